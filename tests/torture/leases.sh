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
# The control runs the same load (shorter) after planting a lease overlap on the
# empty queue (plant_rogue_clock, lib.sh): a consumer receives a marker message
# under a 10-minute lease, then a consumer whose clock is an hour ahead
# (libfaketime) receives the same message while that lease runs, both logged
# like the load. The script then exits 0 only when the checker FAILED with
# exactly one violation, the `lease-overlap` of the marker's second delivery.
# (Planted, so certain: a rogue consumer running among the load takes the
# backlog of ready messages first and overlaps a live lease only by chance.)
fault=""
if [[ ${2:-} == --fault ]]; then fault=$3; set -- "$1"; fi
source "$(dirname "$0")/lib.sh" "$@"
[[ -z $fault || $fault == rogue-clock ]] || die "unknown fault: $fault (leases.sh has: rogue-clock)"

RUN_SECONDS=$(long_or_short "${LEASE_SECONDS:-300}" "${LEASE_SECONDS:-12}")
[[ -n $fault ]] && RUN_SECONDS=6   # a control needs no long run
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
[[ $fault == rogue-clock ]] && plant_rogue_clock
start_load 2 16 0
sleep "$RUN_SECONDS"
stop_load
drain 2 4s

if [[ -n $fault ]]; then
  control_checker "$fault" && expect_planted_overlap
  exit 0
fi
check
echo "leases: ${RUN_SECONDS}s, 16 consumers: $(cat "$T/summary.json")"
