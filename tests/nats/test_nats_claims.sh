#!/usr/bin/env bash
# The claim that makes a lease write exact on a cluster (Client::put_if,
# nats/client.cpp), against clocks and kills (issue 25, items 1, 2 and 6):
#  1. skew: an ack stopped between its claim and its write holds a live claim;
#     a nack of the same receipt by a client 30 s ahead (libfaketime) must
#     wait for it, not judge it stale by its own clock: the ack wins (0), the
#     nack is refused (3). (Before: the nack removed the claim at once and
#     wrote over the same revision.)
#  2. a kill between claim and write: a retry with a short --lock-timeout
#     exits 69 naming the claim and its age by the cluster's clock; one by a
#     client 30 s behind succeeds once the claim is 5 s old by the cluster's
#     clock (before: "its lease kept changing" in milliseconds, and a client
#     behind waited its skew more).
#  3. leftovers: a kill after an ack's message left the stream, after a
#     dead-letter move's delete, after a lease write (its claim not removed):
#     one more operation (q verify) removes them and finds the namespace
#     consistent; the claim record is gone.
#   test_nats_claims.sh Q_BINARY NATS_POKE
# The hooks: Q_TEST_NATS_KILL_AT / Q_TEST_NATS_STOP_AT (libq/nats/stage.hpp).
source "$(dirname "$0")/lib.sh"
nats_test claims "${1:?usage: test_nats_claims.sh Q_BINARY NATS_POKE}"
POKE=${2:?usage: test_nats_claims.sh Q_BINARY NATS_POKE}
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 2>/dev/null | head -1)
if [[ -z $FAKETIME_LIB ]]; then
  [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]] && { echo "FAIL: libfaketime not installed"; exit 1; }
  echo "SKIP: libfaketime not installed"
  exit 77
fi
export Q_FILE="$urls/claims"
bucket=KV_q_claims
# A skewed client: wall clock moved, the monotonic clock left alone (as NTP
# skew is); LD_PRELOAD reaches q-nats through the static q's exec (the
# thread-safe libfaketimeMT: q-nats has the NATS client's threads).
skewed() {
  local by=$1
  shift
  LD_PRELOAD=$FAKETIME_LIB FAKETIME=$by FAKETIME_DONT_FAKE_MONOTONIC=1 "$@"
}
state_of() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null; }
wait_stopped() {  # PID: until it stopped itself (SIGSTOP), at most 10 s
  local until=$(($(now_ms) + 10000 * scale))
  while [[ $(state_of "$1") != T ]]; do
    (($(now_ms) < until)) || return 1
    sleep 0.02
  done
}

"$Q" create fence --visibility-timeout 60s --max-receives 0 || { echo "FAIL: create"; exit 1; }

# The skew reaches q-nats: a lease taken by a client 30 s ahead ends 30 s later.
"$Q" send fence probe >/dev/null
out=$(skewed +30s "$Q" receive fence --json) || { echo "FAIL: skewed receive"; exit 1; }
visible=$(jq -r .visible_until <<<"$out")
vis_ms=$(date -d "$visible" +%s%3N 2>/dev/null || echo 0)
((vis_ms - $(now_ms) > 75000)) || fail "faketime did not reach q-nats (lease until $visible)"
"$Q" ack fence "$(jq -r .receipt <<<"$out")" >/dev/null || fail "ack of the probe"

# 1. A live claim and a client 30 s ahead.
"$Q" send fence one >/dev/null
r1=$("$Q" receive fence --json | jq -r .receipt)
Q_TEST_NATS_STOP_AT=cas-claimed "$Q" ack fence "$r1" >/dev/null 2>"$T/ack.err" &
acker=$!
wait_stopped "$acker" || fail "the ack did not stop at its claim"
skewed +30s "$Q" nack fence "$r1" >/dev/null 2>"$T/nack.err" &
nacker=$!
# The claim is live (its writer only stopped): the nack must still be waiting
# after a second (it would have written over the claim at once).
held_until=$(($(now_ms) + 1000))
while (($(now_ms) < held_until)); do
  kill -0 "$nacker" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$nacker" 2>/dev/null || fail "a client 30 s ahead did not wait for a live claim (nack ended while the ack held its claim)"
kill -CONT "$acker"
wait "$acker"
ack_rc=$?
wait "$nacker"
nack_rc=$?
[[ $ack_rc == 0 ]] || fail "the ack holding the claim: exit $ack_rc, expected 0 ($(cat "$T/ack.err"))"
[[ $nack_rc == 3 ]] || fail "the skewed nack: exit $nack_rc, expected 3 (stale) ($(cat "$T/nack.err"))"
[[ $ack_rc == 0 && $nack_rc == 0 ]] && fail "ack and nack of one receipt both succeeded"
[[ $(counts fence) == "0 0 0" ]] || fail "after the race: $(counts fence), expected an empty queue"

# 2. The claimer killed between its claim and its write.
"$Q" send fence two >/dev/null
r2=$("$Q" receive fence --json | jq -r .receipt)
Q_TEST_NATS_KILL_AT=cas-claimed "$Q" ack fence "$r2" >/dev/null 2>&1
[[ $? == 137 ]] || fail "the ack was not killed at its claim"
Q_LOCK_TIMEOUT=1s q ack fence "$r2"
expect 69 "a retry while the dead claim is fresh (--lock-timeout 1s)"
[[ $ERR == *"holds its claim cas."*"by the cluster's clock"* ]] ||
  fail "the wait does not say what holds the message: $ERR"
start=$(now_ms)
OUT=$(Q_LOCK_TIMEOUT=10s skewed -30s "$Q" ack fence "$r2" 2>"$T/err")
RC=$? ERR=$(cat "$T/err")
took=$(($(now_ms) - start))
expect 0 "a retry by a client 30 s behind, once the dead claim is 5 s old by the cluster's clock"
((took <= 8000 * scale)) || fail "the retry took ${took} ms (the claim is dead after 5 s)"
echo "killed claim: the retry by a client 30 s behind exited $RC after ${took} ms"
[[ $(counts fence) == "0 0 0" ]] || fail "after the retried ack: $(counts fence)"

# 3. Leftovers of kills at the last steps; one q verify later, all is well.
"$Q" send fence three >/dev/null
r3=$("$Q" receive fence --json | jq -r .receipt)
Q_TEST_NATS_KILL_AT=ack-sent "$Q" ack fence "$r3" >/dev/null 2>&1
[[ $? == 137 ]] || fail "the ack was not killed after its +ACK"
"$Q" create dl --visibility-timeout 1s --max-receives 1 >/dev/null || fail "create dl"
"$Q" send dl four >/dev/null
"$Q" receive dl >/dev/null || fail "receive of dl"
# The second receive dead-letters it (its receives are used up) once the lease ran out.
until=$(($(now_ms) + 10000 * scale))
while :; do
  Q_TEST_NATS_KILL_AT=dead-removed "$Q" receive dl >/dev/null 2>&1
  [[ $? == 137 ]] && break
  (($(now_ms) < until)) || { fail "the dead-letter move was not killed after its delete"; break; }
  sleep 0.2
done
"$Q" create short --visibility-timeout 1s >/dev/null || fail "create short"
"$Q" send short five >/dev/null
r5=$("$Q" receive short --json | jq -r .receipt)
Q_TEST_NATS_KILL_AT=cas-written "$Q" ack short "$r5" >/dev/null 2>&1
[[ $? == 137 ]] || fail "the ack was not killed after its lease write"
[[ $("$POKE" "$urls" count "$bucket" '$KV.q_claims.cas.>') == 1 ]] || fail "no claim left by the kill after the write"
# The acked lease of 'five' is finished by the next receive; its claim goes
# once it is 5 s old by the cluster's clock.
until=$(($(now_ms) + 15000 * scale))
while :; do
  q verify
  [[ $RC == 0 && $("$POKE" "$urls" count "$bucket" '$KV.q_claims.cas.>') == 0 ]] && break
  (($(now_ms) < until)) || { fail "q verify after the kills: exit $RC: $OUT $ERR (claims left: $("$POKE" "$urls" count "$bucket" '$KV.q_claims.cas.>'))"; break; }
  sleep 0.5
done
[[ $(stat_field dl dead) == 1 ]] || fail "the killed move left no dead letter: $(stat_field dl dead)"
# 'five' was acked (its lease says so) but JetStream never heard: the receive
# that gets it again (after its 1 s lease) finishes the ack, delivers nothing.
until=$(($(now_ms) + 10000 * scale))
while :; do
  q receive short --wait 1s
  [[ $RC == 0 ]] && { fail "the message acked by a killed ack was delivered again: $OUT"; break; }
  [[ $("$POKE" "$urls" count "$bucket" '$KV.q_claims.lease.>') == 0 ]] && break
  (($(now_ms) < until)) || { fail "lease records left: $("$POKE" "$urls" count "$bucket" '$KV.q_claims.lease.>')"; break; }
done
[[ $(counts short) == "0 0 0" ]] || fail "short after the kills: $(counts short)"
[[ $(counts fence) == "0 0 0" ]] || fail "fence after the kills: $(counts fence)"

# 4. An ack killed after its decision (cas-written: the lease says acked,
# nothing counted yet), finished by a receive killed after its +ACK: the ack
# is counted once all the same, because the finisher counts before its +ACK
# (a receive's own counts wait for its end; this one must not).
"$Q" create late --visibility-timeout 1s >/dev/null || fail "create late"
"$Q" send late six >/dev/null
r6=$("$Q" receive late --json | jq -r .receipt)
Q_TEST_NATS_KILL_AT=cas-written "$Q" ack late "$r6" >/dev/null 2>&1
[[ $? == 137 ]] || fail "the ack of six was not killed after its lease write"
until=$(($(now_ms) + 15000 * scale))
while :; do
  Q_TEST_NATS_KILL_AT=ack-sent "$Q" receive late --wait 1s >/dev/null 2>&1
  [[ $? == 137 ]] && break
  (($(now_ms) < until)) || { fail "no receive finished the killed ack of six"; break; }
done
[[ $(stat_field late acked) == 1 ]] ||
  fail "the ack finished by a killed receive counted $(stat_field late acked), want 1"
[[ $(counts late) == "0 0 0" ]] || fail "late after the kills: $(counts late)"
finish "claims against skewed clocks and kills"
