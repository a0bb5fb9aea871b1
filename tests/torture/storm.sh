#!/usr/bin/env bash
# Scenario 1, the kill -9 storm: 8 producer and 8 consumer loops of short-lived
# q commands and a `q work` share one file while a killer SIGKILLs a random q
# process (or q work's command) every 50-300 ms. Then the load stops, the queue
# is drained, and the checker proves nothing was lost, invented, or delivered
# twice at once; the LMDB reader table holds no dead process afterwards.
#
#   storm.sh Q [--fault purge|rogue-clock]
# --fault runs a control: a rogue process breaks the promise behind the
# checker's back (purges messages, or receives them with a clock an hour ahead
# and never logs it), and the checker must catch it: the script then exits 0
# only when the checker FAILED.
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

start_load "$PRODUCERS" "$CONSUMERS" 1

FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
[[ $fault == rogue-clock ]] && use_dynamic_q   # libfaketime needs a dynamic q
rogue() {
  sleep 2
  case $fault in
    purge)
      # Deletes messages behind everyone's back: loss the checker must see.
      "$Q" purge "$QUEUE" >/dev/null 2>&1
      ;;
    rogue-clock)
      # One more consumer, logged like the others, whose clock is an hour
      # ahead: it takes messages whose leases still run for the others.
      [[ -n $FAKETIME_LIB ]] || die "rogue-clock needs libfaketime (Debian: libfaketime)"
      export LD_PRELOAD=$FAKETIME_LIB FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1
      Q=$QD consumer 99
      ;;
  esac
}
expect_violation=""
case $fault in
  purge) expect_violation=lost ;;
  rogue-clock) expect_violation=lease-overlap ;;
esac
[[ -n $fault ]] && { rogue & LOAD_PIDS+=($!); }

killer "$SECONDS_STORM" 50 300
stop_load
drain 3 2s
check_reader_table

if [[ -n $fault ]]; then
  if python3 "$TORTURE_DIR/checker.py" "$L" --json "$T/summary.json"; then
    fail "control ($fault): the checker passed a run whose promise was broken on purpose"
  elif [[ $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["violations"].get(sys.argv[2], 0))' \
           "$T/summary.json" "$expect_violation") == 0 ]]; then
    fail "control ($fault): the checker failed, but found no $expect_violation violation"
  else
    echo "storm control ($fault): the checker caught it ($expect_violation), as it must"
  fi
  exit 0
fi

check
echo "storm: $(long_or_short long short) mode, ${SECONDS_STORM}s: $(cat "$T/summary.json")"
