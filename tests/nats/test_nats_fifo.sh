#!/usr/bin/env bash
# FIFO queues on the NATS backend (issue 16): the checks of tests/e2e/test_fifo.sh
# against a real 3-node cluster. Producers write interleaved groups from
# several processes, competing consumers (some "crashing" before their ack)
# drain it, and for every group the acked sequence must be exactly the sent
# sequence; one message per group in flight; the oldest head first; the
# next message of a group is delivered as soon as its head is acked (the
# wait record), not when a lease runs out; stats count groups and held groups.
#   test_nats_fifo.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_test fifo "${1:?usage: test_nats_fifo.sh Q_BINARY}"
export Q_FILE="$urls/fifo"

# ---- the rules: a group is required, no per-message delay, the kind is fixed -------------
q create orders --fifo --visibility-timeout 700ms --max-receives 0
expect 0 "create --fifo"
q send orders "no group"
expect 64 "a send without --group"
[[ $ERR == *--group* || $ERR == *group* ]] || fail "a missing group is named: '$ERR'"
q send orders --group g1 --delay 1s "delayed"
expect 64 "a per-message delay"
q config orders --standard
expect 64 "a queue's kind cannot change"

# ---- group order, one in flight per group, oldest head first, the waker ------------------
q create line --fifo --visibility-timeout 30s
for m in a1 b1 a2 c1 a3 b2; do "$Q" send line --group "${m:0:1}" "$m" >/dev/null || fail "send $m"; done
[[ $(stat_field line groups) == 3 ]] || fail "groups: $("$Q" stats line --json)"
q receive line -n 10 --json
expect 0 "receive -n 10"
[[ $(jq -r .body <<<"$OUT" | tr '\n' ' ') == "a1 b1 c1 " ]] ||
  fail "one message per group, oldest head first: got '$(jq -r .body <<<"$OUT" | tr '\n' ' ')'"
[[ $(jq -r .group <<<"$OUT" | tr '\n' ' ') == "a b c " ]] || fail "groups of the messages: $OUT"
ra1=$(jq -r 'select(.body == "a1") | .receipt' <<<"$OUT")
rb1=$(jq -r 'select(.body == "b1") | .receipt' <<<"$OUT")
rc1=$(jq -r 'select(.body == "c1") | .receipt' <<<"$OUT")
[[ $(stat_field line held_groups) == 3 && $(stat_field line in_flight) == 3 ]] ||
  fail "held groups: $("$Q" stats line --json)"
q receive line
expect 1 "every group held: nothing to receive"
start=$(now_ms)
"$Q" ack line "$ra1" || fail "ack a1"
q receive line --wait 10s --json
took=$(($(now_ms) - start))
[[ $(jq -r .body <<<"$OUT") == a2 ]] || fail "after a1's ack: '$OUT'"
((took < 1500 * scale)) || fail "a2 came ${took} ms after a1's ack (its head's lease is 30s)"
echo "a group's next message was received ${took} ms after its head's ack"
ra2=$(jq -r .receipt <<<"$OUT")
# A nack releases the head: the group's next message stays behind it.
"$Q" nack line "$rb1" || fail "nack b1"
q receive line --json
[[ $(jq -r .body <<<"$OUT") == b1 && $(jq -r .receive_count <<<"$OUT") == 2 ]] ||
  fail "after nack of b1, b1 again: '$OUT'"
rb1=$(jq -r .receipt <<<"$OUT")
for r in "$ra2" "$rb1" "$rc1"; do "$Q" ack line "$r" || fail "ack $r"; done
q receive line -n 10 --json
[[ $(jq -r .body <<<"$OUT" | tr '\n' ' ') == "a3 b2 " ]] || fail "the last heads: '$(jq -r .body <<<"$OUT" | tr '\n' ' ')'"
jq -r .receipt <<<"$OUT" | "$Q" ack line >/dev/null || fail "ack a3 b2"
[[ $(stat_field line groups) == 0 && $(stat_field line visible) == 0 ]] || fail "drained: $("$Q" stats line --json)"

# ---- content dedup: without --dedup-id the body is the dedup id -----------------------------
q create cd --fifo --content-dedup on
"$Q" send cd --group g same >/dev/null
q send cd --group g same --json
[[ $(jq -r .duplicate <<<"$OUT") == true ]] || fail "content dedup: $OUT"

# ---- a dead-lettered head frees its group at once; redrive puts it back in its place ---------
# a1 is the head (lease 30s), a2 passed over (its redelivery put off for 30s). a1
# is nacked and, with --max-receives 1, dead-lettered by the receive that gets it
# again: a2 must come in that same receive, not when its 30s are over.
q create dl --fifo --visibility-timeout 30s --max-receives 1
for m in a1 a2 a3; do "$Q" send dl --group a "$m" >/dev/null || fail "send $m"; done
q receive dl -n 10 --json
[[ $(jq -r .body <<<"$OUT") == a1 ]] || fail "dl: the head first: '$OUT'"
ra1=$(jq -r .receipt <<<"$OUT")
"$Q" nack dl "$ra1" --reason "bad a1" || fail "nack a1"
start=$(now_ms)
q receive dl --wait 10s --json
took=$(($(now_ms) - start))
[[ $(jq -r .body <<<"$OUT") == a2 ]] || fail "after a1 was dead-lettered, a2: '$OUT' ($ERR)"
((took < 1500 * scale)) || fail "a2 came ${took} ms after its head was dead-lettered (its put-off was 30s)"
echo "a group's next message was received ${took} ms after its head went to the dead letters"
ra2=$(jq -r .receipt <<<"$OUT")
[[ $("$Q" dlq list dl --json | jq -r '"\(.id) \(.group) \(.reason)"') == "m1 a bad a1" ]] ||
  fail "the dead letter keeps its group and reason: $("$Q" dlq list dl --json)"
# Redrive while a2 is in flight: a1 goes back before a3, and waits for a2 (one in flight per group).
q redrive dl
expect 0 "redrive into a FIFO queue"
[[ $(stat_field dl groups) == 1 && $(stat_field dl visible) == 2 && $(stat_field dl dead) == 0 ]] ||
  fail "after the redrive, one group of 3 messages: $("$Q" stats dl --json)"
q receive dl -n 10
expect 1 "a2 in flight: nothing of its group to receive, the redriven a1 included"
"$Q" ack dl "$ra2" || fail "ack a2"
q receive dl -n 10 --json
[[ $(jq -r '"\(.body) \(.id) \(.group)"' <<<"$OUT") == "a1 m1 a" ]] ||
  fail "the redriven a1 (its id and group kept) before a3: '$OUT'"
ra1b=$(jq -r .receipt <<<"$OUT")
q receive dl -n 10
expect 1 "a1 in flight: a3 waits"
"$Q" ack dl "$ra1b" || fail "ack the redriven a1"
q receive dl --wait 10s --json
[[ $(jq -r .body <<<"$OUT") == a3 ]] || fail "a3 last: '$OUT'"
jq -r .receipt <<<"$OUT" | "$Q" ack dl >/dev/null || fail "ack a3"
# A stale receipt of a dead-lettered head: its lease (1s) ran out, the next receive
# dead-lettered it; the old receipt is refused (exit 3).
q create dl2 --fifo --visibility-timeout 1s --max-receives 1
for m in b1 b2; do "$Q" send dl2 --group b "$m" >/dev/null || fail "send $m"; done
q receive dl2 --json
rb1=$(jq -r .receipt <<<"$OUT")
sleep 1.3
q receive dl2 --wait 10s --json
[[ $(jq -r .body <<<"$OUT") == b2 ]] || fail "b1 dead-lettered, b2 received: '$OUT' ($ERR)"
rb2=$(jq -r .receipt <<<"$OUT")
q ack dl2 "$rb1"
expect 3 "the receipt of a dead-lettered head"
[[ $ERR == *stale* ]] || fail "the refusal says stale: '$ERR'"
[[ $("$Q" dlq list dl2 --json | jq -r .id) == m1 ]] || fail "b1 is a dead letter: $("$Q" dlq list dl2 --json)"
# With the group free, a redriven message goes before the group's waiting ones.
"$Q" send dl2 --group b b3 >/dev/null
"$Q" nack dl2 "$rb2" || fail "nack b2"
q redrive dl2 --id m1
expect 0 "redrive --id into a FIFO queue"
q receive dl2 -n 10 --json
[[ $(jq -r .body <<<"$OUT") == b1 ]] || fail "the redriven b1 before b2 and b3: '$OUT'"

# Redriven into another FIFO queue a dead letter joins its group's end there (a
# file puts x1, sent before o1, first: README, Differences on NATS).
q create dl3 --fifo --visibility-timeout 30s --max-receives 1
q create other --fifo
"$Q" send dl3 --group b x1 >/dev/null
"$Q" send other --group b o1 >/dev/null
q receive dl3 --json
"$Q" nack dl3 "$(jq -r .receipt <<<"$OUT")" || fail "nack x1"
q receive dl3
expect 1 "x1 dead-lettered by the receive"
q redrive dl3 --to other
expect 0 "redrive --to another FIFO queue"
q receive other -n 10 --json
[[ $(jq -r .body <<<"$OUT") == o1 ]] || fail "o1 first in the other queue: '$OUT'"
jq -r .receipt <<<"$OUT" | "$Q" ack other >/dev/null || fail "ack o1"
q receive other --wait 10s --json
[[ $(jq -r '"\(.body) \(.group)"' <<<"$OUT") == "x1 b" ]] || fail "then the redriven x1: '$OUT'"

# ---- the storm of tests/e2e/test_fifo.sh ------------------------------------------------------
producer() {
  local p=$1 i g id
  for i in $(seq 1 30); do
    g=g$(((i + p) % 6))
    id=$("$Q" send orders --group "$g" "$g:$p:$i") || { echo "send failed" >&2; return 1; }
    printf '%s %s\n' "$g" "$id" >>"$T/sent.$p"
  done
}
consumer() {
  local c=$1 empty=0 msg line receipt group id token
  RANDOM=$((c * 7919))
  while ((empty < 4)); do
    if ! msg=$("$Q" receive orders -n 3 --wait 300ms --json); then
      empty=$((empty + 1))
      continue
    fi
    empty=0
    while IFS= read -r line; do
      receipt=$(jq -r .receipt <<<"$line")
      group=$(jq -r .group <<<"$line")
      id=$(jq -r .id <<<"$line")
      if ((RANDOM % 10 == 0)); then break; fi  # a crash: no ack, the rest of the batch too
      token=$c.$RANDOM.$RANDOM
      printf '%s %s %s\n' "$group" "$id" "$token" >>"$T/acking"
      "$Q" ack orders "$receipt" 2>>"$T/ackerr" || printf 'refused %s\n' "$token" >>"$T/acking"
    done <<<"$msg"
  done
}
for p in 1 2 3; do producer "$p" & done
for c in 1 2 3; do consumer "$c" & done
wait
cat "$T"/sent.* >"$T/sent"
awk '$1 == "refused" {gone[$2] = 1; next} {line[++n] = $0; token[n] = $3}
     END {for (i = 1; i <= n; i++) if (!(token[i] in gone)) {split(line[i], f, " "); print f[1], f[2]}}' \
  "$T/acking" >"$T/acked"
[[ $(wc -l <"$T/sent") == 90 ]] || fail "every send succeeded: $(wc -l <"$T/sent")"
[[ $(wc -l <"$T/acked") == 90 ]] || fail "every message acked exactly once: $(wc -l <"$T/acked")"
to_num() { while read -r g id; do printf '%s %d %s\n' "$g" "0x${id#m}" "$id"; done; }
for g in g0 g1 g2 g3 g4 g5; do
  sent=$(to_num <"$T/sent" | awk -v g="$g" '$1 == g' | sort -k2,2n | awk '{print $3}' | tr '\n' ' ')
  acked=$(awk -v g="$g" '$1 == g {print $2}' "$T/acked" | tr '\n' ' ')
  [[ $sent == "$acked" ]] || fail "group $g acked out of send order: sent '$sent', acked '$acked'"
done
[[ $(stat_field orders visible) == 0 && $(stat_field orders groups) == 0 ]] ||
  fail "drained: $("$Q" stats orders --json)"

finish "NATS FIFO"
