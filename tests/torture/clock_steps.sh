#!/usr/bin/env bash
# Scenario 6, clock steps: producers and consumers run while the wall clock q
# sees (libfaketime, LD_PRELOAD for q only) is stepped back and forward by up
# to STEP seconds every 2-4 s. Stepping back may only delay deliveries,
# stepping forward may only cause redeliveries (leases end early): the checker
# runs with --clock-steps STEP, where leases are judged on q's own clocks: a
# delivery may start before the previous lease ended by the receiver's clock
# only by as much as a clock was ahead (a process whose clock is ahead ends
# leases early for everyone: the forward step causes the redelivery), never
# more; every duplicate must still be explained; nothing lost or invented. The
# drain runs with the clock back in place and waits out the largest step.
source "$(dirname "$0")/lib.sh" "$@"
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
[[ -n $FAKETIME_LIB ]] || die "clock_steps needs libfaketime (Debian: libfaketime)"
# libfaketime is preloaded into every q: the dynamic build of the same sources.
use_dynamic_q
Q=$QD

RUN_SECONDS=$(long_or_short 300 12)
STEP=${CLOCK_STEP:-5}
VT_CHOICES=(1s 2s)
SLOW_PCT=10 SLOW_MS=1500 EXTEND_PCT=10 NACK_PCT=5 ABANDON_PCT=5
PRODUCER_PAUSE_MS=30
RECEIVE_WAIT=200ms

assert_exit 0 "$Q" create "$QUEUE" --max-receives 0 || die "cannot create the queue"
# libfaketime must really move q's clock, or this scenario tests nothing.
LD_PRELOAD=$FAKETIME_LIB FAKETIME=+10d "$Q" send probe x --create -q || die "probe send failed"
probe=$("$Q" peek probe --json | jq -r .sent_at)
[[ $probe > $(date -u -d '+9 days' +%Y-%m-%dT%H:%M:%S) ]] || die "libfaketime does not move q's clock (sent_at $probe)"
"$Q" delete probe >/dev/null
echo "+0" >"$T/clock"
export QPRELOAD=$FAKETIME_LIB FAKETIME_TIMESTAMP_FILE=$T/clock FAKETIME_DONT_FAKE_MONOTONIC=1
start_load 3 8 0
steps=0
end=$((SECONDS + RUN_SECONDS))
offsets=("+0" "-$STEP" "+$STEP" "-$((STEP / 2))" "+$((STEP * 2 / 3))" "+0")
while ((SECONDS < end)); do
  sleep "$((2 + RANDOM % 3))"
  echo "${offsets[RANDOM % ${#offsets[@]}]}" >"$T/clock"
  steps=$((steps + 1))
done
stop_load
echo "+0" >"$T/clock"
unset QPRELOAD FAKETIME_TIMESTAMP_FILE
drain 2 "$((STEP + 3))s"
check --clock-steps "$STEP"
echo "clock_steps: ${RUN_SECONDS}s, $steps clock steps of up to ${STEP}s: $(cat "$T/summary.json")"
