#!/usr/bin/env bash
# Many short-lived q processes on one queue: 4 producers, 4 consumers, some of
# which "crash" (skip the ack). Every message sent is acked exactly once, nothing
# is lost or invented, and every extra delivery is explained by a skipped or
# late (stale) ack.
source "$(dirname "$0")/lib.sh" "$@"

PRODUCERS=4
CONSUMERS=4
# Under ASan (Q_TEST_TIME_SCALE 4) a q process is several times slower: fewer
# messages, and a visibility timeout that a receive-then-ack still fits in
# (at 500 ms there, every batch came back before its ack and the consumers
# never drained the queue). The invariants checked are the same.
N=$((200 / ${Q_TEST_TIME_SCALE:-1}))   # messages per producer
VT=$((500 * ${Q_TEST_TIME_SCALE:-1}))ms  # a skipped ack comes back after this
CRASH_PERCENT=10      # share of receive batches whose ack is skipped
# Any process still busy after this is a hang; like every limit of the suite it
# stretches with Q_TEST_TIME_SCALE (the ASan stage runs q several times slower:
# 800 one-shot sends by 4 producers took 62-66 s there).
DEADLINE_S=$((60 * ${Q_TEST_TIME_SCALE:-1}))

assert_exit 0 "$Q" create mp --visibility-timeout $VT --max-receives 1000
mkdir -p "$T/logs"
: >"$T/logs/errors"

# error MSG: a problem seen by a background process (checked at the end).
error() { echo "$*" >>"$T/logs/errors"; }

# ---- producers ---------------------------------------------------------------------
# Producer p sends bodies p<p>-<i> for i in 1..N: mostly one `q send` each, and
# every 20th i starts a --lines batch of 10. A body is logged as sent only
# after q send exited 0 and printed one id per body.
producer() {
  local p=$1 i=1 k out ids
  local log=$T/logs/sent.$p
  : >"$log"
  while ((i <= N)); do
    if ((i % 20 == 1 && i + 9 <= N)); then
      local batch=()
      for ((k = i; k < i + 10; k++)); do batch+=("p$p-$k"); done
      if out=$(printf '%s\n' "${batch[@]}" | "$Q" send mp --lines 2>&1); then
        ids=$(grep -c '^m[0-9a-f]*$' <<<"$out")
        ((ids == 10)) || error "producer $p: send --lines of 10 printed $ids ids: $out"
        printf '%s\n' "${batch[@]}" >>"$log"
      else
        error "producer $p: q send --lines failed (exit $?): $out"
      fi
      ((i += 10))
    else
      if out=$("$Q" send mp "p$p-$i" 2>&1); then
        [[ $out =~ ^m[0-9a-f]+$ ]] || error "producer $p: send printed '$out'"
        echo "p$p-$i" >>"$log"
      else
        error "producer $p: q send failed (exit $?): $out"
      fi
      ((i += 1))
    fi
  done
}

# ---- consumers ---------------------------------------------------------------------
# Consumer c loops on `q receive -n 5 --json` + `q ack`. Logs (one body a line):
#   delivered.c  every delivery
#   acked.c      deliveries whose ack succeeded
#   skipped.c    deliveries it "crashed" on (no ack)
#   stale.c      deliveries whose ack was refused as stale (the lease ran out)
# It stops after producers are done and 5 empty receives in a row (each waiting
# 250 ms, more than a lease, so skipped messages have come back by then).
consumer() {
  local c=$1 empty=0 out rc receipts bodies ack_err
  seed_random "$c"
  local dir=$T/logs
  : >"$dir/delivered.$c"; : >"$dir/acked.$c"; : >"$dir/skipped.$c"; : >"$dir/stale.$c"
  local started=$SECONDS
  while :; do
    if ((SECONDS - started > DEADLINE_S)); then
      error "consumer $c: still running after ${DEADLINE_S}s"
      return
    fi
    out=$("$Q" receive mp -n 5 --json --wait 250ms 2>"$dir/recv-err.$c")
    rc=$?
    if ((rc == 1)); then
      [[ -e $dir/producers-done ]] && ((++empty >= 5)) && return
      continue
    fi
    if ((rc != 0)); then
      error "consumer $c: q receive failed (exit $rc): $(cat "$dir/recv-err.$c")"
      sleep 0.05
      continue
    fi
    empty=0
    local fields
    if ! fields=$(jq -r '"\(.receipt)\t\(.body)"' <<<"$out" 2>&1); then
      error "consumer $c: q receive printed invalid JSON: $out"
      continue
    fi
    receipts=() bodies=()
    local receipt body
    while IFS=$'\t' read -r receipt body; do
      receipts+=("$receipt")
      bodies+=("$body")
    done <<<"$fields"
    ((${#receipts[@]} >= 1 && ${#receipts[@]} <= 5)) ||
      error "consumer $c: receive -n 5 returned ${#receipts[@]} messages"
    printf '%s\n' "${bodies[@]}" >>"$dir/delivered.$c"
    if ((RANDOM % 100 < CRASH_PERCENT)); then
      printf '%s\n' "${bodies[@]}" >>"$dir/skipped.$c"
      continue
    fi
    ack_err=$(printf '%s\n' "${receipts[@]}" | "$Q" ack mp 2>&1 >/dev/null)
    rc=$?
    if ((rc == 0)); then
      printf '%s\n' "${bodies[@]}" >>"$dir/acked.$c"
    elif ((rc == 3)); then
      # Some leases ran out before the ack: stderr names each stale receipt.
      local j
      for j in "${!receipts[@]}"; do
        if [[ $ack_err == *"${receipts[j]}"* ]]; then
          echo "${bodies[j]}" >>"$dir/stale.$c"
        else
          echo "${bodies[j]}" >>"$dir/acked.$c"
        fi
      done
    else
      error "consumer $c: q ack failed (exit $rc): $ack_err"
    fi
  done
}

start=$(now_ms)
consumer_pids=()
for ((c = 1; c <= CONSUMERS; c++)); do
  consumer $c &
  consumer_pids+=($!)
done
producer_pids=()
for ((p = 1; p <= PRODUCERS; p++)); do
  producer $p &
  producer_pids+=($!)
done
for pid in "${producer_pids[@]}"; do wait "$pid"; done
produced_ms=$(($(now_ms) - start))
touch "$T/logs/producers-done"
for pid in "${consumer_pids[@]}"; do wait "$pid"; done
consumed_ms=$(($(now_ms) - start))

# ---- final drain: anything left must come out and be acked --------------------------------
L=$T/logs
: >"$L/delivered.drain"; : >"$L/acked.drain"; : >"$L/skipped.drain"; : >"$L/stale.drain"
empty=0
while ((empty < 3)); do
  out=$("$Q" receive mp -n 100 --json --wait 600ms 2>"$T/err")
  rc=$?
  if ((rc == 1)); then
    ((empty++))
    continue
  fi
  ((rc == 0)) || die "drain: q receive failed (exit $rc): $(cat "$T/err")"
  empty=0
  jq -r .body <<<"$out" | tee -a "$L/delivered.drain" >>"$L/acked.drain"
  jq -r .receipt <<<"$out" | "$Q" ack mp || die "drain: q ack failed"
done
drained=$(grep -c . "$L/delivered.drain")

# ---- the invariants ---------------------------------------------------------------------
if [[ -s $L/errors ]]; then
  fail "errors in producers/consumers ($(wc -l <"$L/errors")), first ones:"
  head -n 10 "$L/errors" >&2
fi

cat "$L"/sent.* | sort >"$T/sent"
cat "$L"/acked.* | sort >"$T/acked"
cat "$L"/delivered.* | sort >"$T/delivered"
cat "$L"/skipped.* | sort >"$T/skipped"
cat "$L"/stale.* | sort >"$T/stale"
n_sent=$(grep -c . "$T/sent")
n_sent_unique=$(sort -u "$T/sent" | grep -c .)
n_acked=$(grep -c . "$T/acked")
n_acked_unique=$(sort -u "$T/acked" | grep -c .)
n_delivered=$(grep -c . "$T/delivered")
n_skipped=$(grep -c . "$T/skipped")
n_stale=$(grep -c . "$T/stale")
duplicates=$((n_delivered - $(sort -u "$T/delivered" | grep -c .)))

assert_eq $((PRODUCERS * N)) "$n_sent" "every producer send succeeded (bodies logged as sent)"
assert_eq "$n_sent" "$n_sent_unique" "sent bodies are unique"

missing=$(comm -23 <(sort -u "$T/sent") <(sort -u "$T/acked"))
if [[ -n $missing ]]; then
  fail "$(grep -c . <<<"$missing") sent messages were never acked, e.g.: $(head -n 5 <<<"$missing" | xargs)"
fi
invented=$(comm -13 <(sort -u "$T/sent") <(sort -u "$T/delivered"))
if [[ -n $invented ]]; then
  fail "$(grep -c . <<<"$invented") delivered bodies were never sent, e.g.: $(head -n 5 <<<"$invented" | xargs)"
fi
double_acked=$(uniq -d "$T/acked")
if [[ -n $double_acked ]]; then
  fail "$(grep -c . <<<"$double_acked") messages were acked successfully more than once, e.g.: $(head -n 5 <<<"$double_acked" | xargs)"
fi
# Every delivery ends in exactly one of: an ack, a skipped ack, a stale ack.
assert_eq "$n_delivered" "$((n_acked + n_skipped + n_stale))" \
  "deliveries = acked + skipped + stale (acked $n_acked, skipped $n_skipped, stale $n_stale)"
# Extra deliveries only come from skipped or stale acks.
assert_eq "$((n_skipped + n_stale))" "$duplicates" \
  "duplicate deliveries ($duplicates) are exactly the skipped ($n_skipped) and stale ($n_stale) acks"
# A skipped message was delivered again later (and then acked).
not_redelivered=$(comm -23 <(sort -u "$T/skipped") <(sort -u "$T/acked"))
[[ -z $not_redelivered ]] || fail "skipped messages never acked: $(head -n 5 <<<"$not_redelivered" | xargs)"

s=$(stats_json mp)
assert_eq 0 "$(jq .visible <<<"$s")" "end: visible 0"
assert_eq 0 "$(jq .in_flight <<<"$s")" "end: in_flight 0"
assert_eq 0 "$(jq .delayed <<<"$s")" "end: delayed 0"
assert_eq 0 "$(jq .dead <<<"$s")" "end: dead 0 (max receives 1000)"
assert_eq "$n_sent" "$(jq .sent <<<"$s")" "end: sent counter = bodies sent"
if nats_lacks counters; then
  skip_part "lifetime counters (acked, received) are not kept on NATS"
else
  assert_eq "$n_acked_unique" "$(jq .acked <<<"$s")" "end: acked counter = bodies acked"
  assert_eq "$n_delivered" "$(jq .received <<<"$s")" "end: received counter = deliveries"
fi
assert_eq null "$(jq .oldest_age_ms <<<"$s")" "end: no oldest message"

echo "multiprocess: sent $n_sent, delivered $n_delivered, acked $n_acked, skipped acks $n_skipped," \
  "stale acks $n_stale, duplicate deliveries $duplicates, left for the final drain $drained;" \
  "producers done after ${produced_ms} ms, consumers after ${consumed_ms} ms"
