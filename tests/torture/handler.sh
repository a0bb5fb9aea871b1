#!/usr/bin/env bash
# The command `q work` runs in the torture scenarios: logs the delivery it got
# (work_begin) and how it ended (work_end) to $HANDLER_LOG, works for a random
# while, and exits 0, or now and then 1 (released for a retry).
#   HANDLER_SLEEP_MS   longest work time (default 100)
#   HANDLER_FAIL_PCT   share of runs that exit 1 (default 5)
#   HANDLER_STAGE      set (q work --to): print "ID RECEIPT" to stdout, the output
body=$(cat)
# Its random choices follow the scenario's seed and the delivery (Q_TEST_SEED).
RANDOM=$(( ${Q_TEST_SEED:-$$} + 16#${Q_MESSAGE_ID#m} % 100000 * 100 + Q_RECEIVE_COUNT ))
t0=${EPOCHREALTIME/./}
printf '{"op":"work_begin","q":"%s","id":"%s","receipt":"%s","count":%s,"body":"%s","pid":%s,"ppid":%s,"t0":%s}\n' \
  "$Q_QUEUE" "$Q_MESSAGE_ID" "$Q_RECEIPT" "$Q_RECEIVE_COUNT" "$body" "$$" "$PPID" "$t0" >>"$HANDLER_LOG"
max=${HANDLER_SLEEP_MS:-100}
ms=$((RANDOM % (max + 1)))
sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
rc=0
((RANDOM % 100 < ${HANDLER_FAIL_PCT:-5})) && rc=1
# q work --to (HANDLER_STAGE): the output names the run that wrote it.
[[ -n ${HANDLER_STAGE:-} ]] && printf '%s %s\n' "$Q_MESSAGE_ID" "$Q_RECEIPT"
printf '{"op":"work_end","receipt":"%s","pid":%s,"ppid":%s,"t1":%s,"rc":%s}\n' \
  "$Q_RECEIPT" "$$" "$PPID" "${EPOCHREALTIME/./}" "$rc" >>"$HANDLER_LOG"
exit "$rc"
