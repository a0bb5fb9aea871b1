#!/usr/bin/env bash
# The node-kill storm on a 3-node NATS JetStream cluster (issue 16), judged by
# the torture checker (tests/torture/checker.py) with the same rules as the file
# storms: every send that exited 0 is acked or dead-lettered at the end, nothing
# is delivered that was not sent, no two leases of a message overlap, every
# duplicate delivery is explained (a lease that ran out, a nack, a dropped
# delivery), nothing is acked twice nor after a good ack (a stale receipt that
# acted would show as one of those), and the queue is empty after the drain.
#
#   1. fencing across a leader change, on the empty queue: a marker is received
#      under a 1 s lease, the leader of the queue's stream is killed (-9), the
#      marker is delivered again after the lease ran out, and the first receipt's
#      ack must be refused as stale (exit 3); the node is restarted;
#   2. the storm: producer and consumer loops of short-lived q commands (the
#      torture load: batches, nacks, extends, slow and dropped deliveries); a
#      third in, kill -9 of the stream's leader; two thirds in, it is restarted
#      and must rejoin the cluster (the meta group names a leader from it);
#   3. the drain and the checker on the logs of 1 and 2;
#   4. the checker must fail on the same logs edited two ways (so this test can
#      fail): one successful ack dropped (violation `lost`, that message), and
#      the stale ack of 1 made to succeed (`redelivered-after-ack`).
#
# In the storm, q processes die too (issue 25): KILL_PCT (default 8) percent of
# the consumers' receives, acks, nacks and extends kill themselves at one of
# the steps of a lease write (Q_TEST_NATS_KILL_AT, libq/nats/stage.hpp:
# cas-claimed, cas-written; ack-sent for acks and receives, which finish acks
# others left), each logged as a kill of that process for the checker; and
# half the receives die after the delete of a dead-letter move, if they make
# one (max receives 2 here, so a message delivered twice goes to the dead
# letters on its next delivery). And two consumers' clocks are off by 30 s
# (libfaketime, monotonic clock left alone): consumer 1 acks 30 s ahead,
# consumer 2 acks, nacks and extends 30 s behind. Their receives keep the
# true time: a lease's end is the receiver's clock by design (ARCHITECTURE.md:
# skew lengthens or shortens leases), so a receive 30 s off would overlap
# leases on purpose; a write fenced by a claim must hold whatever the clock.
#
#   test_nats_storm.sh Q_BINARY
# STORM_SECONDS (default 24) sets the storm's length. Every wait for the cluster
# is q's own --lock-timeout (Q_LOCK_TIMEOUT, 30 s times Q_TEST_TIME_SCALE): a
# command that waits out an election succeeds; one that gives up fails the test.
# Skipped (77) without nats-server, q-nats or jq (a failure under CI=true or
# Q_REQUIRE_ALL=1); without libfaketime it fails (the skewed clients are the point).
source "$(dirname "$0")/lib.sh"
nats_require "${1:?usage: test_nats_storm.sh Q_BINARY}"
# The torture harness: $T, $L (the logs), the load loops, drain, check.
source "$(dirname "$0")/../torture/lib.sh" "$1"
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 2>/dev/null | head -1)
[[ -n $FAKETIME_LIB ]] || die "libfaketime not installed (Debian package libfaketime)"
KILL_PCT=${KILL_PCT:-8}
NACK_PCT=${NACK_PCT:-10}
ABANDON_PCT=${ABANDON_PCT:-8}

# The torture lib's qrun, for the consumers (`c` is the consumer loop's own
# number, seen through bash's dynamic scope): a kill at a lease write's step
# now and then, and the clocks of consumers 1 and 2 off by 30 s.
eval "_torture_$(declare -f qrun)"
qrun() {
  local op=$1 point="" skew=""
  if [[ " ${FUNCNAME[*]} " == *" consumer "* ]]; then
    local points=()
    case $op in
      receive) points=(cas-claimed cas-written ack-sent) ;;
      ack) points=(cas-claimed cas-written ack-sent) ;;
      nack | extend) points=(cas-claimed cas-written) ;;
    esac
    ((${#points[@]} && RANDOM % 100 < KILL_PCT)) && point=${points[RANDOM % ${#points[@]}]}
    # A receive that moves a message to the dead letters is rare: half of
    # them die after the move's delete (the point does nothing otherwise).
    [[ $op == receive ]] && ((RANDOM % 2)) && point=${point:+$point,}dead-removed
    [[ $c == 1 && $op == ack ]] && skew=+30s
    [[ $c == 2 && $op =~ ^(ack|nack|extend)$ ]] && skew=-30s
  fi
  if [[ -n $skew ]]; then
    echo "$op $skew" >>"$T/skewed.$BASHPID"
    QPRELOAD=$FAKETIME_LIB FAKETIME=$skew FAKETIME_DONT_FAKE_MONOTONIC=1 \
      Q_TEST_NATS_KILL_AT=$point _torture_qrun "$@"
  else
    Q_TEST_NATS_KILL_AT=$point _torture_qrun "$@"
  fi
  if [[ -n $point ]] && ((RC == 137)); then
    printf '{"op":"kill","pid":%s,"t0":%s,"what":"q %s (Q_TEST_NATS_KILL_AT=%s)"}\n' \
      "$QPID" "$T1" "$op" "$point" >>"$L/killer.$BASHPID.jsonl"
  fi
}

CL=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-storm.XXXXXX")
_storm_exit() {
  local rc=$?
  touch "$STOP"
  cp "$CL"/n*.log "$T"/ 2>/dev/null   # kept with the logs when the test failed
  "$cluster" stop "$CL" >/dev/null 2>&1
  rm -rf "$CL"
  ( exit "$rc" )
  _torture_cleanup
}
trap _storm_exit EXIT
nats_cluster_start "$CL"
export Q_FILE=$urls/storm Q_LOCK_TIMEOUT=$((30 * ${Q_TEST_TIME_SCALE:-1}))s
STREAM=Q_storm_$QUEUE
STORM=${STORM_SECONDS:-24}
VT_CHOICES=(1s 3s)
PRODUCERS=4
CONSUMERS=4

# the_leader: the node number (1-3) leading the queue's stream, waiting for one.
the_leader() {
  local leader deadline=$((SECONDS + 30 * ${Q_TEST_TIME_SCALE:-1}))
  while ((SECONDS < deadline)); do
    leader=$(stream_leader "$STREAM")
    [[ $leader =~ ^n[1-3]$ ]] && { echo "${leader#n}"; return 0; }
    sleep 0.2
  done
  return 1
}
restart_node() {
  node restart "$1" >/dev/null || fail "n$1 did not rejoin after a restart"
  local status
  status=$("$cluster" status "$CL")
  [[ $status =~ (^|$'\n')n$1\ running\ .*meta\ leader:\ n ]] || fail "n$1 is not in the cluster: $status"
}

assert_exit 0 "$Q" create "$QUEUE" --visibility-timeout 1s --max-receives 2 ||
  die "cannot create the queue"

# ---- 1. a stale receipt across a leader change -------------------------------------
flog=$L/fence.jsonl
qrun send "$QUEUE" fence-marker --json
((RC == 0)) || die "fence: send exited $RC: $(head -c 300 "$QE")"
qlog "$flog" send ',"bodies":["fence-marker"],"out":'"$(json_lines_array "$QO")"
qrun receive "$QUEUE" --visibility-timeout 1s --json
qlog "$flog" receive ",\"out\":$(json_lines_array "$QO")"
((RC == 0)) || die "fence: receive exited $RC: $(head -c 300 "$QE")"
r1=$(jq -r .receipt "$QO")
victim=$(the_leader) || die "the queue's stream has no leader"
node kill "$victim" || fail "kill -9 of the stream leader n$victim"
sleep 1.5
qrun receive "$QUEUE" --wait 20s --json
qlog "$flog" receive ",\"out\":$(json_lines_array "$QO")"
r2=$(jq -r .receipt "$QO" 2>/dev/null)
[[ $RC == 0 && $(jq -r .body "$QO") == fence-marker && $r2 != "$r1" ]] ||
  fail "fence: no redelivery of the marker after its lease ran out across a leader change (exit $RC: $(head -c 300 "$QO" "$QE"))"
ack_receipts "$flog" "$r1"
((RC == 3)) || fail "fence: the receipt from before the leader change: ack exit $RC, expected 3 (stale)"
FENCE_RECEIPT=$r1
ack_receipts "$flog" "$r2"
((RC == 0)) || fail "fence: ack of the current receipt after the leader change: exit $RC"
restart_node "$victim"

# ---- 2. the storm, and kill -9 of the stream's leader in the middle -----------------
start_load "$PRODUCERS" "$CONSUMERS" 0
sleep $((STORM / 3))
victim=$(the_leader) || fail "the queue's stream has no leader during the storm"
node kill "$victim" || fail "kill -9 of the stream leader n$victim"
killed_at=$(cat "$L"/producer.*.jsonl 2>/dev/null | wc -l)
sleep $((STORM / 3))
restart_node "$victim"
sleep $((STORM / 3))
stop_load
echo "storm: ${STORM}s, $PRODUCERS producers, $CONSUMERS consumers; n$victim (the stream's leader) killed after ~$killed_at sends, restarted $((STORM / 3))s later; the stream's leader now: $(stream_leader "$STREAM")"

# The wait for the election, as the producers saw it.
python3 - "$L" <<'EOF2'
import glob, json, sys
ms = sorted((r["t1"] - r["t0"]) / 1000 for p in glob.glob(sys.argv[1] + "/producer.*.jsonl")
            for r in map(json.loads, open(p)) if r.get("op") == "send")
if ms:
    print(f"sends: {len(ms)}, median {ms[len(ms) // 2]:.0f} ms, slowest {ms[-1]:.0f} ms (the election)")
EOF2

# ---- 3. the drain and the checker --------------------------------------------------
drain 3 4s
check

# ---- 4. the checker fails on the same logs with a planted fault ---------------------
# control NAME EXPECTED_VIOLATIONS_JSON TEXT PYTHON_EDIT: copy the logs, edit them
# with PYTHON_EDIT (a program given the copy's directory and $FENCE_RECEIPT), and
# the checker must fail with exactly EXPECTED (its violations by kind), naming TEXT.
control() {
  local name=$1 expected=$2 text=$3 edit=$4 dir=$T/control-$1 crc got
  cp -r "$L" "$dir"
  text=$(python3 -c "$edit" "$dir" "$FENCE_RECEIPT") || { fail "control $name: the edit failed"; return; }
  python3 "$TORTURE_DIR/checker.py" "$dir" --json "$dir.json" >"$dir.out" 2>&1
  crc=$?
  got=$(jq -c .violations "$dir.json" 2>/dev/null)
  if ((crc != 1)); then
    fail "control $name: the checker exited $crc on logs with a planted fault: $(cat "$dir.out")"
  elif [[ $got != "$expected" ]] || ! grep -qF -- "$text" "$dir.out"; then
    fail "control $name: expected $expected naming '$text', the checker reported $got: $(head -c 1500 "$dir.out")"
  else
    echo "control $name: the checker failed as it must ($got, $text)"
  fi
}
# One message's successful ack (in a consumer's log) dropped: it is lost.
control lost '{"lost":1}' '' '
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/consumer.*.jsonl")):
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        r = json.loads(line)
        if r.get("op") == "ack" and r.get("rc") == 0:
            receipt = r["receipts"].pop()
            lines[i] = json.dumps(r) if r["receipts"] else ""
            open(path, "w").write("\n".join(lines) + "\n")
            for other in glob.glob(sys.argv[1] + "/*.jsonl"):
                for rec in map(json.loads, filter(None, open(other).read().splitlines())):
                    for m in (rec.get("out") or []) if rec.get("op") == "receive" else []:
                        if m["receipt"] == receipt:
                            print(m["id"] + " (")   # as the checker names a lost message
                            sys.exit(0)
            sys.exit(1)
sys.exit(1)
'
# The stale ack of the fence (exit 3) made to succeed: a delivery acked, then
# delivered again, and the message acked twice.
control stale '{"acked-twice":1,"redelivered-after-ack":1}' 'after receipt' '
import json, sys
path = sys.argv[1] + "/fence.jsonl"
out = []
for line in open(path).read().splitlines():
    r = json.loads(line)
    if r.get("op") == "ack" and r.get("receipts") == [sys.argv[2]]:
        r["rc"], r["stale"] = 0, []
    out.append(json.dumps(r))
open(path, "w").write("\n".join(out) + "\n")
print("after receipt " + sys.argv[2])
'
echo "nats storm: $(cat "$T/summary.json")"
echo "skewed commands (consumer 1 +30s, consumer 2 -30s): $(cat "$T"/skewed.* 2>/dev/null | sort | uniq -c | xargs)"
echo "q processes killed at a lease write's step: $(cat "$L"/killer.*.jsonl 2>/dev/null | jq -r .what | sed 's/^q \([a-z]*\) .*KILL_AT=\(.*\))$/\1 at \2/' | sort | uniq -c | xargs)"
