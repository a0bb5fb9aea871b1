#!/usr/bin/env bash
# Holders on a cluster (issue 23; libq/nats/holders.hpp): a q work killed
# with -9 mid-handler gives its message back within about a second (its
# helper's connection closes, the next look for a delivery pings it and gets
# "no responders"), not after its 30 s visibility timeout; a SIGSTOPped q
# work keeps its message (its helper still answers), and gives it back at
# once when it is then killed. Prints the death-to-redelivery times (median).
#   test_nats_holders.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_test holders "${1:?usage: test_nats_holders.sh Q_BINARY}"
export Q_FILE="$urls/holders" T

# Polls until $1 exists, up to $2 seconds (scaled); false when it never does.
wait_file() {
  local until=$(($(now_ms) + $2 * 1000 * scale))
  while [[ ! -s $1 ]]; do
    (($(now_ms) < until)) || return 1
    sleep 0.02
  done
}

"$Q" create H --visibility-timeout 30s >/dev/null || fail "create H"
limit=$((1500 * scale)) # "within about a second", plus a beat of a loaded machine
times=()
for trial in 1 2 3 4 5; do
  rm -f "$T"/started "$T"/second
  "$Q" send H "job$trial" >/dev/null || fail "send job$trial"
  # The handler is q work's own child (exec), ended by q work's death.
  "$Q" work H -q -- sh -c 'cat >/dev/null; date +%s%3N >"$0"; exec sleep 60' "$T/started" &
  first=$!
  wait_file "$T/started" 10 || { fail "trial $trial: the first q work did not start its handler"; break; }
  # Another q work waits; it takes the message once it is released.
  "$Q" work H -q --max-messages 1 -- sh -c 'cat >"$0.body"; date +%s%3N >"$0"' "$T/second" &
  second=$!
  sleep 0.3
  killed=$(now_ms)
  kill -9 "$first"
  wait "$first" 2>/dev/null
  if ! wait_file "$T/second" 5; then
    fail "trial $trial: the killed q work's message did not come back within 5 s (visibility timeout 30 s)"
    kill "$second" 2>/dev/null
    wait "$second" 2>/dev/null
    break
  fi
  wait "$second" 2>/dev/null
  took=$(($(<"$T/second") - killed))
  [[ $(<"$T/second.body") == "job$trial" ]] || fail "trial $trial: the second q work ran '$(<"$T/second.body")'"
  ((took <= limit)) || fail "trial $trial: redelivered $took ms after the kill -9 (limit $limit ms)"
  times+=("$took")
done
if ((${#times[@]} > 0)); then
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((${#times[@]} + 1) / 2))p")
  echo "q work killed with -9 on a cluster: redelivered after ${times[*]} ms (median $median ms)"
fi
[[ $(counts H) == "0 0 0" ]] || fail "after the trials: $(counts H) (visible in_flight delayed)"

# ---- a stopped q work keeps its message; killed, it gives it back at once -------------
"$Q" create S --visibility-timeout 20s >/dev/null || fail "create S"
"$Q" send S stopped >/dev/null
rm -f "$T/started"
"$Q" work S -q -- sh -c 'cat >/dev/null; date +%s%3N >"$0"; exec sleep 60' "$T/started" &
stopped=$!
wait_file "$T/started" 10 || fail "the q work to stop did not start its handler"
kill -STOP "$stopped"
q receive S --wait "$((3 * scale))s"
expect 1 "a receive while the holder is stopped (its helper still answers)"
[[ $(counts S) == "0 1 0" ]] || fail "a stopped q work keeps its message: $(counts S)"
killed=$(now_ms)
kill -9 "$stopped"
kill -CONT "$stopped" 2>/dev/null
wait "$stopped" 2>/dev/null
q receive S --wait "$((5 * scale))s" --json
took=$(($(now_ms) - killed))
expect 0 "the stopped q work's message once it is killed"
[[ $(jq -r .reason <<<"$OUT") == "holder died" ]] || fail "released as 'holder died': $OUT"
((took <= limit)) || fail "the stopped, then killed q work's message came back after $took ms (limit $limit ms)"
echo "stopped q work kept its message 3 s; killed, it came back after $took ms"

finish "a dead q work's message comes back within a second on a cluster; a stopped one keeps it"
