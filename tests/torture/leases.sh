#!/usr/bin/env bash
# Scenario 5, leases under stress: 16 consumers receive with 1-3 s visibility
# timeouts; a third of them work about one lease long (straddling the timeout),
# a fifth extend their lease first, some release (nack) or drop deliveries; two
# producers keep sending. Then the queue is drained and the checker proves the
# lease invariants: no delivery while another one's lease runs (on q's clock and
# in real time), every redelivery explained by a lease that ran out, a nack or
# a drop, no successful ack followed by a redelivery, nothing lost.
#
#   leases.sh Q [--fault rogue-clock]
# The control adds a consumer whose clock runs an hour ahead (libfaketime): it
# takes messages whose leases still run; the checker must report lease-overlap.
fault=""
if [[ ${2:-} == --fault ]]; then fault=$3; set -- "$1"; fi
source "$(dirname "$0")/lib.sh" "$@"

RUN_SECONDS=$(long_or_short "${LEASE_SECONDS:-300}" "${LEASE_SECONDS:-12}")
[[ -n $fault ]] && RUN_SECONDS=12
VT_CHOICES=(1s 2s 3s)
SLOW_PCT=30
SLOW_MS=2000       # works 1-3 s: around the lease
EXTEND_PCT=20
NACK_PCT=5
ABANDON_PCT=5
BATCH_MAX=2
RECEIVE_WAIT=500ms
PRODUCER_PAUSE_MS=40   # the consumers keep up: leases that run out come back at once

assert_exit 0 "$Q" create "$QUEUE" --max-receives 0 || die "cannot create the queue"
start_load 2 16 0
if [[ $fault == rogue-clock ]]; then
  lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
  [[ -n $lib ]] || die "the control needs libfaketime (Debian: libfaketime)"
  use_dynamic_q
  ( sleep 1; export LD_PRELOAD=$lib FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1
    BATCH_MAX=10 RECEIVE_WAIT=50ms Q=$QD consumer 99 ) &
  LOAD_PIDS+=($!)
fi
sleep "$RUN_SECONDS"
stop_load
drain 2 4s

if [[ -n $fault ]]; then
  if python3 "$TORTURE_DIR/checker.py" "$L" --json "$T/summary.json"; then
    fail "control ($fault): the checker passed a run with overlapping leases"
  elif [[ $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["violations"].get("lease-overlap", 0))' "$T/summary.json") == 0 ]]; then
    fail "control ($fault): the checker failed, but found no lease-overlap"
  else
    echo "leases control ($fault): the checker caught the overlapping leases, as it must"
  fi
  exit 0
fi
check
echo "leases: ${RUN_SECONDS}s, 16 consumers: $(cat "$T/summary.json")"
