#!/usr/bin/env bash
# q verify on the NATS backend (issue 16): a consistency check of q's records
# (settings, leases, per-queue records) against the JetStream streams. Each
# inconsistency is made by hand behind q's back with nats_poke (raw JetStream
# calls) and must be reported (exit 74, one line naming it); a healthy
# namespace, with messages visible, in flight, delayed and dead, is clean (0).
#   test_nats_verify.sh Q_BINARY NATS_POKE
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../scripts/nats-cluster
Q=${1:?usage: test_nats_verify.sh Q_BINARY NATS_POKE}
POKE=${2:?usage: test_nats_verify.sh Q_BINARY NATS_POKE}
source "$here/lib.sh"   # nats_require; this test's own harness follows
nats_require "$Q"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
dir=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-verify.XXXXXX")
trap '"$cluster" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
urls=$("$cluster" start "$dir" 3) || { echo "FAIL: cluster start"; exit 1; }
ns=verify
export Q_FILE="$urls/$ns"
q() { OUT=$("$Q" "$@" 2>"$dir/err"); RC=$?; ERR=$(cat "$dir/err"); }
poke() { "$POKE" "$urls" "$@" || fail "nats_poke $*"; }
kv_put() { poke pub "\$KV.q_$ns.$1" "$2"; }
# reported TEXT WHAT: verify exits 74 and a line of its output contains TEXT.
reported() {
  q verify
  [[ $RC == 74 ]] || fail "$2: verify exit $RC, expected 74 (out: $OUT; err: $ERR)"
  [[ $OUT == *"$1"* ]] || fail "$2: verify did not say '$1' (out: $OUT)"
}

# ---- healthy: visible, in flight, delayed, nacked, dead letters ----------------------
q create jobs --visibility-timeout 1m --max-receives 1
for i in 1 2 3 4 5; do "$Q" send jobs "m$i" -q; done
"$Q" send jobs later --delay 1h -q
r=$("$Q" receive jobs --json | jq -r .receipt)
"$Q" nack jobs "$r" --delay 1h --reason "try later" || fail "nack"
r=$("$Q" receive jobs --json | jq -r .receipt)
"$Q" ack jobs "$r" || fail "ack"
"$Q" receive jobs >/dev/null  # in flight
q create dl --max-receives 1 --visibility-timeout 0
"$Q" send dl x -q
"$Q" receive dl >/dev/null
"$Q" receive dl >/dev/null  # its receives used up: dead-lettered
[[ $("$Q" stats dl --json | jq .dead) == 1 ]] || fail "no dead letter made"
q verify
[[ $RC == 0 ]] || fail "a healthy namespace: verify exit $RC (out: $OUT; err: $ERR)"
[[ $OUT == *"consistent"* ]] || fail "a healthy namespace: verify said '$OUT'"

# ---- a lease whose message is gone ----------------------------------------------------
q receive jobs --json
seq=$(jq -r .id <<<"$OUT" | tr -d m)
poke del-msg "Q_${ns}_jobs" "$seq"
reported "message m$seq: lease record whose message is gone" "a lease without its message"

# ---- a leftover dead-state lease (a move to the dead letters cut short) ---------------
# Lease keys name the sequence in decimal, message ids in hex: 99 is m63.
kv_put "lease.jobs.99" '{"s":"d","k":0,"u":0,"r":0,"f":0,"n":5,"a":"","why":"x","g":"","w":"t1"}'
reported "message m63: leftover dead-letter lease" "a dead-state lease without its message"

# ---- a damaged lease record --------------------------------------------------------------
kv_put "lease.jobs.98" 'not json'
reported "message m62: a lease record is damaged" "a damaged lease record"

# ---- a settings record without its stream ----------------------------------------------
q create ghost
poke del-stream "Q_${ns}_ghost"
reported "queue ghost: settings record without its stream" "settings without a stream"

# ---- a stream without a settings record (a create or delete cut short) ----------------
poke add-stream "Q_${ns}_orphan" "q.$ns.orphan"
reported "stream Q_${ns}_orphan: the messages of no queue" "a stream without settings"

# ---- a queue's stream without its consumer -----------------------------------------------
q create noconsumer
poke del-consumer "Q_${ns}_noconsumer" q
reported "queue noconsumer: its stream Q_${ns}_noconsumer has no consumer" "a missing consumer"

# ---- a damaged settings record -----------------------------------------------------------
q create bad
kv_put "config.bad" '{"not":"settings"'
reported "queue bad: settings record damaged" "a damaged settings record"

# ---- an idempotency-key record of no queue ------------------------------------------------
kv_put "done.nothere.abc" '{"u":1}'
reported "record done.nothere.abc: an idempotency-key record of no queue" "a done record of no queue"

# Each problem a line; nothing else reported twice; the healthy queue dl is never named.
q verify
[[ $OUT != *"queue dl"* ]] || fail "the healthy queue dl was reported: $OUT"
lines=$(grep -c . <<<"$OUT")
((lines == 8)) || fail "expected 8 problem lines, got $lines: $OUT"

if ((fails > 0)); then
  echo "test_nats_verify: $fails failure(s)"
  exit 1
fi
echo "test_nats_verify: ok"
