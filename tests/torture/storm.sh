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

FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
if [[ $fault == rogue-clock ]]; then
  [[ -n $FAKETIME_LIB ]] || die "rogue-clock needs libfaketime (Debian: libfaketime)"
  use_dynamic_q   # libfaketime needs a dynamic q
fi

# plant_rogue_clock: on the empty queue, the holder sends a marker and receives
# it with a 10-minute lease; the rogue, its clock an hour ahead, sees that lease
# as over and receives the marker again (receive count 2) at once, and acks it;
# the holder's ack then comes back stale (which explains the duplicate, so the
# overlap is the only violation). Sets MARKER_ID and ROGUE_PID.
plant_rogue_clock() {
  local hlog=$L/holder.jsonl rlog=$L/rogue.jsonl holder_receipt rogue_receipt
  qrun send "$QUEUE" rogue-marker --json
  ((RC == 0)) || die "rogue-clock: the marker's send exited $RC: $(head -c 300 "$QE")"
  qlog "$hlog" send ',"bodies":["rogue-marker"],"out":'"$(json_lines_array "$QO")"
  MARKER_ID=$(jq -r .id "$QO")

  qrun receive "$QUEUE" -n 1 --json --visibility-timeout 10m
  ((RC == 0)) || die "rogue-clock: the holder's receive exited $RC: $(head -c 300 "$QE")"
  qlog "$hlog" receive ",\"out\":$(json_lines_array "$QO")"
  [[ $(jq -r '"\(.id) \(.receive_count)"' "$QO") == "$MARKER_ID 1" ]] ||
    die "rogue-clock: the holder did not receive the marker $MARKER_ID first: $(<"$QO")"
  holder_receipt=$(jq -r .receipt "$QO")

  FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1 QPRELOAD=$FAKETIME_LIB Q=$QD \
    qrun receive "$QUEUE" -n 1 --json --visibility-timeout 1s
  ((RC == 0)) || die "rogue-clock: the rogue's receive exited $RC (the clock fault did not take): $(head -c 300 "$QE")"
  qlog "$rlog" receive ",\"out\":$(json_lines_array "$QO")"
  [[ $(jq -r '"\(.id) \(.receive_count)"' "$QO") == "$MARKER_ID 2" ]] ||
    die "rogue-clock: the rogue did not receive the marker $MARKER_ID again: $(<"$QO")"
  ROGUE_PID=$QPID
  rogue_receipt=$(jq -r .receipt "$QO")

  FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1 QPRELOAD=$FAKETIME_LIB Q=$QD \
    ack_receipts "$rlog" "$rogue_receipt"
  ((RC == 0)) || die "rogue-clock: the rogue's ack exited $RC: $(head -c 300 "$QE")"
  ack_receipts "$hlog" "$holder_receipt"
  ((RC == 3)) || die "rogue-clock: the holder's ack exited $RC, not 3 (stale): $(head -c 300 "$QE")"
}
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

if [[ -n $fault ]]; then
  python3 "$TORTURE_DIR/checker.py" "$L" --json "$T/summary.json" >"$T/checker.out" 2>&1
  crc=$?
  cat "$T/checker.out"
  if ((crc == 0)); then
    fail "control ($fault): the checker passed a run whose promise was broken on purpose"
    exit 0
  elif ((crc != 1)) || [[ ! -s $T/summary.json ]]; then
    fail "control ($fault): the checker could not judge the logs (exit $crc)"
    exit 0
  fi
  violations=$(jq -c .violations "$T/summary.json")
  case $fault in
    purge)
      if (($(jq '.violations.lost // 0' "$T/summary.json") > 0)); then
        echo "storm control (purge): the checker caught it (lost), as it must: $violations"
      else
        fail "control (purge): the checker failed, but found no lost message: $violations"
      fi
      ;;
    rogue-clock)
      # Exactly the planted overlap: the marker's second delivery (the rogue's,
      # in real time long before the holder's lease ended), nothing incidental.
      overlap="    $MARKER_ID: delivery 2 (receive, pid $ROGUE_PID) was over at "
      if [[ $violations != '{"lease-overlap":1}' ]]; then
        fail "control (rogue-clock): the checker must report exactly one lease-overlap (the marker $MARKER_ID), found: $violations"
      elif ! grep -qF -- "$overlap" "$T/checker.out"; then
        fail "control (rogue-clock): the checker's lease-overlap is not the planted one (marker $MARKER_ID, rogue pid $ROGUE_PID)"
      else
        echo "storm control (rogue-clock): the checker caught it (lease-overlap of $MARKER_ID), as it must"
      fi
      ;;
  esac
  exit 0
fi
check
echo "storm: $(long_or_short long short) mode, ${SECONDS_STORM}s: $(cat "$T/summary.json")"
