#!/usr/bin/env bash
# Deliveries and waits on a cluster (issue 25, items 4, 5 and 7):
#  1. 1,100 messages in flight (receive -n 100 in a loop): receives go on past 1,000 (the consumer's
#     max_ack_pending is unlimited, not the server's default 1000), a new
#     message is still delivered; a consumer made the old way (1000) is
#     updated by the first receive it holds back;
#  2. q work on a cluster that stops answering (every node SIGSTOPped longer
#     than --lock-timeout) reports the wait and goes on: its running command
#     is kept and acked, it exits 0; and its loop lists no leases (no KV
#     watch: no consumer created on the bucket's stream while it waits);
#  3. 2 of 3 nodes down (once the node left no longer leads): q list, q stats
#     and q receive of a visible message all wait --lock-timeout and exit 69
#     (issue 25: q list exited 74 at once, "no stream matches subject"; a
#     receive exited 1 after 2 s).
#   test_nats_loop.sh Q_BINARY NATS_POKE
source "$(dirname "$0")/lib.sh"
nats_test loop "${1:?usage: test_nats_loop.sh Q_BINARY NATS_POKE}"
POKE=${2:?usage: test_nats_loop.sh Q_BINARY NATS_POKE}
if ! command -v strace >/dev/null; then
  [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]] && { echo "FAIL: strace not installed"; exit 1; }
  echo "SKIP: strace not installed"
  exit 77
fi
export Q_FILE="$urls/loop"

# ---- 1. 1,100 in flight ---------------------------------------------------------
"$Q" create many --visibility-timeout 10m >/dev/null || { echo "FAIL: create"; exit 1; }
# The consumer as q made it before (nats.c left max_ack_pending out: 1000).
"$POKE" "$urls" del-consumer Q_loop_many q || fail "poke: delete the consumer"
old=$("$POKE" "$urls" old-consumer Q_loop_many q) || fail "poke: the old consumer"
[[ $old == 1000 ]] || fail "the old-style consumer's max_ack_pending is $old, expected the server's 1000"
seq 1 1100 | "$Q" send many --lines >/dev/null || fail "send 1100"
got=0
start=$(now_ms)
for ((i = 0; i < 120 && got < 1100; i++)); do
  n=$("$Q" receive many -n 100 --json 2>"$T/err" | grep -c receipt)
  got=$((got + n))
done
echo "in flight: $got received in $i receives, $(($(now_ms) - start)) ms"
((got == 1100)) || fail "receives stopped at $got in flight (expected 1100): $(cat "$T/err")"
"$Q" send many new-one >/dev/null
q receive many --json
expect 0 "a receive with 1100 in flight"
[[ $(jq -r .body <<<"$OUT") == new-one ]] || fail "the new message was not delivered: $OUT"
now=$(curl -s "http://127.0.0.1:$MON_1/jsz?consumers=true&config=true" |
  jq '[.account_details[].stream_detail[] | select(.name == "Q_loop_many") | .consumer_detail[].config.max_ack_pending] | max')
((now > 1000000)) || fail "the consumer's max_ack_pending is $now after the update"

# ---- 2. q work through a cluster that stops answering ---------------------------------
"$Q" create jobs --visibility-timeout 30s >/dev/null || fail "create jobs"
"$Q" send jobs slow >/dev/null
# One command runs 6 s; a second slot stays free, so the loop keeps asking
# when the next message is ready, through the stop.
Q_LOCK_TIMEOUT=1s strace -f -qq -s 300 -e trace=write,writev,sendto,sendmsg -o "$T/strace" \
  "$Q" work jobs --exit-when-empty -j 2 -- sh -c 'sleep 6; echo done >>"$0"' "$T/ran" \
  >"$T/work.out" 2>"$T/work.err" &
worker=$!
until=$(($(now_ms) + 20000 * scale))
until [[ $(counts jobs) == "0 1 0" ]]; do
  (($(now_ms) < until)) || { fail "q work did not take its message"; break; }
  sleep 0.1
done
pids=$(cat "$CL"/n*.pid)
for p in $pids; do kill -STOP "$p"; done
sleep $((3 * scale))
for p in $pids; do kill -CONT "$p"; done
wait "$worker"
rc=$?
((rc == 0)) || fail "q work through the stopped cluster: exit $rc: $(tail -3 "$T/work.err")"
[[ $(cat "$T/ran" 2>/dev/null) == done ]] || fail "the command did not run to its end once"
grep -q "still waiting" "$T/work.err" || fail "q work did not report the wait: $(tail -3 "$T/work.err")"
[[ $(counts jobs) == "0 0 0" ]] || fail "jobs after q work: $(counts jobs)"
watches=$(grep -c 'CONSUMER.CREATE.KV_q_loop' "$T/strace")
echo "q work: $(grep -c 'CONSUMER.INFO.Q_loop_jobs' "$T/strace") consumer lookups, $watches KV watches (listings)"
((watches == 0)) || fail "q work listed the bucket $watches times in its loop"

# ---- 3. 2 of 3 nodes down ----------------------------------------------------------
# Twice: the meta leader among the two killed, then the meta leader the one left.
without_quorum() {  # WHAT
  local cmd start took until=$(($(now_ms) + 20000 * scale))
  # A meta leader left alone answers from its state until it steps down.
  while "$cluster" status "$CL" | grep -q 'meta leader: n[1-3]'; do
    (($(now_ms) < until)) || { fail "the node left still leads ($1)"; break; }
    sleep 0.2
  done
  for cmd in "list" "stats many" "receive avail"; do
    start=$(now_ms)
    # shellcheck disable=SC2086
    OUT=$(Q_LOCK_TIMEOUT=2s "$Q" $cmd 2>"$T/err")
    RC=$? ERR=$(cat "$T/err")
    took=$(($(now_ms) - start))
    expect 69 "q $cmd with 2 of 3 nodes down ($1)"
    ((took >= 1500)) || fail "q $cmd gave up after $took ms, before its --lock-timeout of 2s ($1)"
    echo "q $cmd, 2 of 3 nodes down ($1): exit $RC after $took ms: $ERR"
  done
}
"$Q" create avail >/dev/null && "$Q" send avail waiting >/dev/null || fail "a visible message"
meta_leader() { "$cluster" status "$CL" | sed -n 's/.*meta leader: n\([1-3]\).*/\1/p' | head -1; }
leader=$(meta_leader)
[[ $leader =~ ^[1-3]$ ]] || fail "no meta leader: $("$cluster" status "$CL")"
other=$((leader % 3 + 1))
node kill "$leader" || fail "kill n$leader"
node kill "$other" || fail "kill n$other"
without_quorum "n$leader, the meta leader, and n$other killed"
node restart "$leader" >/dev/null || fail "restart n$leader"
node restart "$other" >/dev/null || fail "restart n$other"
leader=$(meta_leader)
[[ $leader =~ ^[1-3]$ ]] || fail "no meta leader after the restarts: $("$cluster" status "$CL")"
for n in 1 2 3; do
  [[ $n == "$leader" ]] || node kill "$n" || fail "kill n$n"
done
without_quorum "all but n$leader, the meta leader, killed"
finish "deliveries and waits on a cluster"
