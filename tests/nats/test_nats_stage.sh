#!/usr/bin/env bash
# q work SRC --to DST on the NATS backend (issue 16) killed with SIGKILL between
# publishing a message's outputs to DST and acking it in SRC (the test-only
# hook Q_TEST_NATS_KILL_AT=stage-sent, libq/nats/stage.hpp): the outputs
# are in DST once and the source comes back (its holder, the killed q work,
# died); it is run again, and that run's outputs (the same Nats-Msg-Ids) are
# not stored a second time: every output is in DST exactly once, every source
# acked.
#   test_nats_stage.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../scripts/nats-cluster
Q=${1:?usage: test_nats_stage.sh Q_BINARY}
source "$here/lib.sh"   # nats_require; this test's own harness follows
nats_require "$Q"
scale=${Q_TEST_TIME_SCALE:-1}
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
T=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-stage.XXXXXX")
trap '"$cluster" stop "$T/c" >/dev/null 2>&1; rm -rf "$T"' EXIT
urls=$("$cluster" start "$T/c" 3) || { echo "FAIL: cluster start"; exit 1; }
export Q_FILE="$urls/stage" T
now_ms() { date +%s%3N; }
visible() { "$Q" stats "$1" --json | jq -r .visible; }

"$Q" create src --visibility-timeout 1s >/dev/null || { echo "FAIL: create src"; exit 1; }
"$Q" create dst >/dev/null || { echo "FAIL: create dst"; exit 1; }
for w in alpha beta gamma; do "$Q" send src "$w" >/dev/null; done
# Two outputs per source, the second naming it; each run is logged.
cat >"$T/stage.sh" <<'EOS'
#!/bin/sh
echo "$Q_MESSAGE_ID $Q_RECEIVE_COUNT" >>"$T/runs"
cat
echo
echo "second of $Q_MESSAGE_ID"
EOS
chmod +x "$T/stage.sh"
WORK=("$Q" work src --to dst --to-lines -q)

# ---- killed between the publish and the ack ------------------------------------------
Q_TEST_NATS_KILL_AT=stage-sent "${WORK[@]}" --max-messages 1 -- "$T/stage.sh"
rc=$?
((rc == 137)) || fail "q work with the kill point: exit $rc, expected 137 (SIGKILL)"
killed_id=$(head -1 "$T/runs" | cut -d' ' -f1)
outputs=$("$Q" peek dst --json --max 100 | jq -r .body | sort | paste -sd, -)
[[ $outputs == "alpha,second of $killed_id" ]] ||
  fail "after the kill, DST holds [$outputs], expected the killed run's two outputs once"

# ---- its holder died, so it is given back at once; the next q work runs it again -------------
# (before holders on NATS it stayed leased until its 1 s visibility timeout ran out)
deadline=$(($(now_ms) + 5000 * scale))
while [[ $(visible src) != 3 ]] && (($(now_ms) < deadline)); do sleep 0.1; done
[[ $(visible src) == 3 ]] ||
  fail "the killed run's source never came back: SRC $("$Q" stats src --json | jq -c '{visible, in_flight}')"
"${WORK[@]}" --exit-when-empty -- "$T/stage.sh" || fail "the q work after the kill: exit $?"
[[ $(grep -c "^$killed_id " "$T/runs") == 2 ]] ||
  fail "the killed run's source ran $(grep -c "^$killed_id " "$T/runs") times, expected 2: $(tr '\n' ' ' <"$T/runs")"
grep -q "^$killed_id 2$" "$T/runs" || fail "its second run was not its second delivery: $(tr '\n' ' ' <"$T/runs")"
bodies=$("$Q" peek dst --json --max 100 | jq -r .body | sort)
want=$(for w in alpha beta gamma; do echo "$w"; done
       for id in $(cut -d' ' -f1 "$T/runs" | sort -u); do echo "second of $id"; done)
want=$(sort <<<"$want")
[[ $bodies == "$want" ]] || fail "DST holds:
$bodies
expected each output once:
$want"
[[ $("$Q" stats src --json | jq -r '"\(.visible) \(.in_flight) \(.delayed)"') == "0 0 0" ]] ||
  fail "SRC after the drain: $("$Q" stats src --json | jq -c '{visible, in_flight, delayed}')"
echo "killed between publish and ack: the source ran $(grep -c "^$killed_id " "$T/runs") times, DST holds $(wc -l <<<"$bodies") outputs for 3 sources"

((fails == 0)) && echo "PASS: NATS q work --to killed between the publish and the ack"
exit $((fails > 0))
