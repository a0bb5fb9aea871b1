#!/usr/bin/env bash
# Holders (issue 14 item 3): a message held by a process that dies is released
# at once (reason "holder died"), not at the end of its visibility timeout; a
# living holder, even one that is stopped, keeps it.
#
# The same on NATS (issue 23): a holder is a live NATS connection of a helper
# process, pinged by whoever looks for a delivery (libq/nats/holders.hpp);
# tests/nats/test_nats_holders.sh measures it on a cluster.
source "$(dirname "$0")/lib.sh" "$@"
scale=${Q_TEST_TIME_SCALE:-1}

assert_exit 0 "$Q" create H --visibility-timeout 5m --max-receives 5
in_flight_is() { [[ $(stat_field "$1" in_flight) == "$2" ]]; }

# ---- q work killed with -9: another worker has the message within a second -------------
assert_exit 0 "$Q" send H job1
"$Q" work H -q -- sleep 60 &
first=$!
wait_for 10 in_flight_is H 1 || die "the first worker did not take the message"
# A second worker waits (no message for it yet).
"$Q" work H -q --max-messages 1 -- sh -c 'date +%s%3N >"$0"; cat >"$0.body"' "$T/second" &
second=$!
sleep 0.3
killed=$(now_ms)
kill -9 "$first"
wait "$first" 2>/dev/null
exit_within "$second" $((5 * scale)) || fail "the second worker did not finish"
[[ -s $T/second ]] || die "the second worker never ran the message"
took=$(($(<"$T/second") - killed))
assert_eq job1 "$(cat "$T/second.body")" "the second worker ran the killed worker's message"
echo "q work killed with -9 (visibility timeout 5m): redelivered to a waiting worker in $took ms"
((took < 1000 * scale)) || fail "redelivery took $took ms (limit $((1000 * scale)) ms)"
assert_eq 0 "$(stat_field H in_flight)" "nothing left in flight"

# ---- q work killed with -9 while its command's processes live on (issue 25 item 9) -----
# Only the command gets SIGTERM when q work dies: a grandchild, or a command
# that ignores SIGTERM, runs on. Its message is not released while any of them
# runs (they hold q work's lock byte on FILE-wake), then at once.
assert_exit 0 "$Q" create G --visibility-timeout 5m
outlive() { # NAME COMMAND...: the command writes $0.pid, runs until $0.go exists
  local name=$1
  shift
  rm -f "$T/$name".*
  assert_exit 0 "$Q" send G "$name"
  "$Q" work G -q -- "$@" &
  local w=$!
  wait_for 10 test -s "$T/$name.pid" || die "$name: the command did not start"
  kill -9 "$w"
  wait "$w" 2>/dev/null
  local pid
  pid=$(<"$T/$name.pid")
  kill -0 "$pid" || die "$name: the process meant to outlive q work is gone"
  assert_exit 1 "$Q" receive G --wait 1s
  assert_eq 1 "$(stat_field G in_flight)" "$name: not released while it runs"
  touch "$T/$name.go"
  local ended=$(now_ms)
  run "$Q" receive G --wait $((5 * scale))s --json
  assert_eq 0 "$RC" "$name: released once it has exited"
  assert_eq "$name" "$(jq -r .body <<<"$OUT")" "$name: its message"
  assert_eq "holder died" "$(jq -r .reason <<<"$OUT")" "$name: as 'holder died'"
  local id receipt
  id=$(jq -r .id <<<"$OUT")
  receipt=$(jq -r .receipt <<<"$OUT")
  # q show tells the release as it was (issue 25 item 15), not "timed out".
  assert_exit 0 "$Q" show G "$id"
  assert_contains "$OUT" "ended: released (its holder died)" "$name: q show says the holder died"
  assert_not_contains "$OUT" "timed out" "$name: not a lease that ran out"
  echo "$name outlived q work -9: released $(($(now_ms) - ended)) ms after it ended"
  "$Q" ack G "$receipt" >/dev/null
}
outlive grandchild sh -c 'sh -c '\''echo $$ >"$0.pid"; while [ ! -e "$0.go" ]; do sleep 0.05; done'\'' "$0" & wait' "$T/grandchild"
outlive term-ignoring sh -c 'trap "" TERM; echo $$ >"$0.pid"; while [ ! -e "$0.go" ]; do sleep 0.05; done' "$T/term-ignoring"

# ---- a shell loop with --holder $$, killed --------------------------------------------
assert_exit 0 "$Q" send H job2
bash -c '"$1" receive H --holder $$ --json >"$2"; exec sleep 60' _ "$Q" "$T/loop.msg" &
loop=$!
wait_for 10 test -s "$T/loop.msg" || die "the loop did not receive"
killed=$(now_ms)
kill -9 "$loop"
wait "$loop" 2>/dev/null
got=$("$Q" receive H --wait 5s --json)
took=$(($(now_ms) - killed))
assert_eq job2 "$(jq -r .body <<<"$got")" "the loop's message came back"
assert_eq 2 "$(jq -r .receive_count <<<"$got")" "its receive count was kept"
assert_eq "holder died" "$(jq -r .reason <<<"$got")" "with the reason 'holder died'"
echo "receive --holder \$\$ loop killed with -9: receivable again after $took ms"
((took < 1000 * scale)) || fail "redelivery took $took ms (limit $((1000 * scale)) ms)"
assert_exit 0 "$Q" ack H "$(jq -r .receipt <<<"$got")"

# ---- a one-shot receive releases it too (no waiting receiver) ----------------------------
assert_exit 0 "$Q" send H job3
bash -c '"$1" receive H --holder $$ >"$2"; exec sleep 60' _ "$Q" "$T/one.msg" &
loop=$!
wait_for 10 test -s "$T/one.msg" || die "the loop did not receive"
kill -9 "$loop"
wait "$loop" 2>/dev/null
receive_any() { "$Q" receive H >/dev/null 2>&1; }
wait_for 2 receive_any || fail "a one-shot receive did not get the dead holder's message"

# ---- a stopped holder keeps its lease until the timeout ----------------------------------
assert_exit 0 "$Q" create P --visibility-timeout 2s
assert_exit 0 "$Q" send P job4
bash -c '"$1" receive P --holder $$ >"$2"; exec sleep 60' _ "$Q" "$T/stopped.msg" &
stopped=$!
wait_for 10 test -s "$T/stopped.msg" || die "the loop did not receive"
kill -STOP "$stopped"
assert_exit 1 "$Q" receive P --wait 1s
assert_eq 1 "$(stat_field P in_flight)" "a stopped holder keeps its lease"
run "$Q" receive P --wait $((3 * scale))s --json
assert_eq 0 "$RC" "after its timeout, the message is delivered again"
assert_eq "null" "$(jq -r '.reason // null' <<<"$OUT")" "released by its timeout, not as 'holder died'"
kill -9 "$stopped"
kill -CONT "$stopped" 2>/dev/null
wait "$stopped" 2>/dev/null

# ---- --holder checks its pid --------------------------------------------------------------
assert_exit 64 "$Q" receive H --holder 0
assert_exit 64 "$Q" receive H --holder 4194305
assert_contains "$ERR" "--holder 4194305: no such process" "names the flag and the pid"
assert_exit 64 "$Q" receive H --holder abc

assert_exit 0 "$Q" verify
