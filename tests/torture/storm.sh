#!/usr/bin/env bash
# Scenario 1, the kill -9 storm: 8 producer and 8 consumer loops of short-lived
# q commands and a `q work` share one file while a killer SIGKILLs a random q
# process (or q work's command) every 50-300 ms. Then the load stops, the queue
# is drained, and the checker proves nothing was lost, invented, or delivered
# twice at once; the LMDB reader table holds no dead process afterwards.
#
#   storm.sh Q [--fault purge|rogue-clock]
# --fault runs a control: the promise is broken on purpose, and the script then
# exits 0 only when the checker FAILED, and for that reason:
#   purge        a rogue `q purge` mid-run deletes messages behind everyone's
#                back: the checker must report `lost`;
#   rogue-clock  before the load, a consumer receives a marker message under a
#                10-minute lease, then a consumer whose clock is an hour ahead
#                (libfaketime) receives the same message while that lease runs,
#                both logged like the load: the checker must report exactly one
#                violation, a `lease-overlap` of the marker's second delivery.
#                (Planted on the empty queue, so certain: a rogue consumer in
#                the middle of the storm takes the backlog of ready messages
#                first, and overlaps a live lease only by chance.)
fault=""
if [[ ${2:-} == --fault ]]; then fault=$3; set -- "$1"; fi
source "$(dirname "$0")/lib.sh" "$@"

SECONDS_STORM=$(long_or_short "${STORM_SECONDS:-600}" "${STORM_SECONDS:-15}")
[[ -n $fault ]] && SECONDS_STORM=6   # a control needs no long run
PRODUCERS=8
CONSUMERS=8
VT_CHOICES=(1s)
SLOW_MS=800

assert_exit 0 "$Q" create "$QUEUE" --visibility-timeout 1s --max-receives 50 \
  || die "cannot create the queue"

# The rogue-clock control plants its overlap on the empty queue (lib.sh).
[[ $fault == rogue-clock ]] && plant_rogue_clock

start_load "$PRODUCERS" "$CONSUMERS" 1

rogue() {
  sleep 2
  # Deletes messages behind everyone's back: loss the checker must see.
  "$Q" purge "$QUEUE" >/dev/null 2>&1
}
[[ $fault == purge ]] && { rogue & LOAD_PIDS+=($!); }

killer "$SECONDS_STORM" 50 300
stop_load
drain 3 2s
check_reader_table

if [[ -n $fault ]] && control_checker "$fault"; then
  case $fault in
    purge)
      if (($(jq '.violations.lost // 0' "$T/summary.json") > 0)); then
        echo "storm control (purge): the checker caught it (lost), as it must: $VIOLATIONS"
      else
        fail "control (purge): the checker failed, but found no lost message: $VIOLATIONS"
      fi
      ;;
    rogue-clock) expect_planted_overlap ;;
  esac
fi
[[ -n $fault ]] && exit 0
check
echo "storm: $(long_or_short long short) mode, ${SECONDS_STORM}s: $(cat "$T/summary.json")"
