#!/usr/bin/env bash
# q export, q import and q backup on the NATS backend (issue 16; nats/transfer.*,
# nats/backup.*) against a 3-node cluster: export gives each message its state
# (in flight, delayed, dead); import into a new queue gives new ids (the
# stream's sequence has not passed them) and keeps receive counts, delays,
# dedup ids and dead letters; the same import run again stores nothing twice
# (Nats-Msg-Id); bad input leaves the queue exactly as it was; an import into
# the queue whose sequence has passed the ids keeps them; --skip-existing;
# q backup writes a queue file with every queue that q -f reads.
#   test_nats_transfer.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../scripts/nats-cluster
Q=${1:?usage: test_nats_transfer.sh Q_BINARY}
source "$here/lib.sh"   # nats_require; this test's own harness follows
nats_require "$Q"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
dir=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-transfer.XXXXXX")
trap '"$cluster" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
urls=$("$cluster" start "$dir" 3) || { echo "FAIL: cluster start"; exit 1; }
export Q_FILE="$urls/transfer"
q() { OUT=$("$Q" "$@" 2>"$dir/err"); RC=$?; ERR=$(cat "$dir/err"); }
expect() { [[ $RC == "$1" ]] || fail "$2: exit $RC, expected $1 (stderr: $ERR)"; }
states() { jq -r '"\(.body) \(.state) \(.receive_count)"' "$1" | sort | paste -sd,; }
depth() { "$Q" stats "$1" --json | jq '.visible + .in_flight + .delayed'; }

# ---- export: every state ------------------------------------------------------------------
q create jobs --visibility-timeout 10m --dedup-window 10m
"$Q" send jobs a -q
"$Q" send jobs b --attr k=v -q
"$Q" send jobs c --dedup-id d1 -q
"$Q" send jobs later --delay 1h -q
q receive jobs --json
[[ $(jq -r .body <<<"$OUT") == a ]] || fail "received '$OUT', expected a"
q create dq --max-receives 1 --visibility-timeout 0
"$Q" send dq gone -q
"$Q" receive dq >/dev/null
"$Q" receive dq >/dev/null  # receives used up: a dead letter
"$Q" export jobs >"$dir/jobs.jsonl" || fail "export jobs"
"$Q" export dq >"$dir/dq.jsonl" || fail "export dq"
[[ $(states "$dir/jobs.jsonl") == "a in_flight 1,b visible 0,c visible 0,later delayed 0" ]] ||
  fail "export states: $(states "$dir/jobs.jsonl")"
[[ $(states "$dir/dq.jsonl") == "gone dead 1" ]] || fail "export of a dead letter: $(states "$dir/dq.jsonl")"
[[ $(jq -r 'select(.body=="b") | .attributes.k' "$dir/jobs.jsonl") == v ]] || fail "attributes exported"
[[ $(jq -r 'select(.body=="c") | .dedup_id' "$dir/jobs.jsonl") == d1 ]] || fail "dedup id exported"

# ---- import into a new queue: new ids, states as a file import gives them ------------------
q import jobs2 --create <"$dir/jobs.jsonl"
expect 0 "import into a new queue"
[[ $(grep -c . <<<"$OUT") == 4 ]] || fail "import printed '$OUT', expected 4 ids"
"$Q" export jobs2 >"$dir/jobs2.jsonl"
[[ $(states "$dir/jobs2.jsonl") == "a visible 1,b visible 0,c visible 0,later delayed 0" ]] ||
  fail "imported states (in flight arrives visible): $(states "$dir/jobs2.jsonl")"
[[ $(jq -r 'select(.body=="later") | .visible_at' "$dir/jobs2.jsonl") == \
  $(jq -r 'select(.body=="later") | .visible_at' "$dir/jobs.jsonl") ]] || fail "the delay was not kept"
[[ $(jq -r 'select(.body=="a") | .sent_at' "$dir/jobs2.jsonl") == \
  $(jq -r 'select(.body=="a") | .sent_at' "$dir/jobs.jsonl") ]] || fail "sent_at was not kept"
# Difference: the same import run again stores nothing twice (Nats-Msg-Id).
q import jobs2 <"$dir/jobs.jsonl"
expect 0 "the same import again"
[[ $(depth jobs2) == 4 ]] || fail "the same import again: depth $(depth jobs2), expected 4"
# The dedup id, inside its window, is recognised by a send after the import.
q send jobs2 c --dedup-id d1 --json
[[ $(jq -r .duplicate <<<"$OUT") == true ]] || fail "a send with an imported dedup id: $OUT"
# The imported receive count goes on: a receive of a makes it 2.
q receive jobs2 -n 3 --json
[[ $(jq -r 'select(.body=="a") | .receive_count' <<<"$OUT") == 2 ]] ||
  fail "the receive count after an import: $OUT"

# ---- bad input: the queue exactly as it was ------------------------------------------------
"$Q" export jobs2 >"$dir/before.jsonl"
printf '{"body":"x"}\nnot json\n' | "$Q" import jobs2 2>"$dir/err"
[[ $? == 65 ]] || fail "a line that is not JSON: not 65 ($(cat "$dir/err"))"
grep -q "line 2" "$dir/err" || fail "the bad line is not named: $(cat "$dir/err")"
"$Q" config jobs2 --max-size 10 >/dev/null
printf '{"body":"x"}\n{"body":"far too long for this queue"}\n' | "$Q" import jobs2 2>"$dir/err"
[[ $? == 65 ]] || fail "a body over the max size: not 65 ($(cat "$dir/err"))"
grep -q "nothing was imported" "$dir/err" || fail "no 'nothing was imported': $(cat "$dir/err")"
printf '{"body":"x","group":"g"}\n' | "$Q" import jobs2 2>"$dir/err"
[[ $? == 65 ]] || fail "a group on a standard queue: not 65"
"$Q" config jobs2 --max-depth 4 >/dev/null
printf '{"body":"x"}\n' | "$Q" import jobs2 2>"$dir/err"
[[ $? == 75 ]] || fail "over max depth: not 75 ($(cat "$dir/err"))"
"$Q" export jobs2 >"$dir/after.jsonl"
cmp -s <(jq -c '{id,body,state}' "$dir/before.jsonl" | sort) <(jq -c '{id,body,state}' "$dir/after.jsonl" | sort) ||
  fail "a refused import changed the queue"

# ---- dead letters ------------------------------------------------------------------------
q import dq2 --create <"$dir/dq.jsonl"
expect 0 "import of a dead letter"
q dlq list dq2 --json
[[ $(jq -r '"\(.body) \(.reason)"' <<<"$OUT") == "gone not acknowledged after 1 receive" ]] ||
  fail "imported dead letter: $OUT"
[[ $(depth dq2) == 0 ]] || fail "the imported dead letter left a live message: depth $(depth dq2)"

# ---- ids kept where the stream's sequence has passed them; --skip-existing ------------------
ids=$(jq -r .id "$dir/jobs.jsonl" | sort | paste -sd,)
"$Q" purge jobs >/dev/null 2>&1
q import jobs <"$dir/jobs.jsonl"
expect 0 "import back into jobs"
[[ $(sort <<<"$OUT" | paste -sd,) == "$ids" ]] || fail "ids not kept: '$OUT' (expected $ids)"
q import jobs --skip-existing <"$dir/jobs.jsonl"
expect 0 "import --skip-existing"
[[ -z $OUT && $ERR == *"skipped 4 messages"* ]] || fail "--skip-existing: out '$OUT', err '$ERR'"
[[ $(depth jobs) == 4 ]] || fail "--skip-existing stored something: depth $(depth jobs)"

# ---- backup: a queue file with every queue ---------------------------------------------------
q backup "$dir/b.q"
expect 0 "backup"
"$Q" -f "$dir/b.q" verify >/dev/null || fail "the backup file does not verify"
[[ $("$Q" -f "$dir/b.q" list | paste -sd,) == "$("$Q" list | paste -sd,)" ]] ||
  fail "the backup's queues: $("$Q" -f "$dir/b.q" list | paste -sd,)"
[[ $("$Q" -f "$dir/b.q" stats jobs2 --json | jq -c '[.visible+.in_flight, .delayed]') == "[3,1]" ]] ||
  fail "the backup of jobs2: $("$Q" -f "$dir/b.q" stats jobs2 --json)"
[[ $("$Q" -f "$dir/b.q" config jobs2 --json | jq -c '[.max_depth, .max_size]') == "[4,10]" ]] ||
  fail "the backup of jobs2's settings: $("$Q" -f "$dir/b.q" config jobs2 --json)"
[[ $("$Q" -f "$dir/b.q" dlq list dq --json | jq -r .body) == gone ]] || fail "the backup's dead letter"
q backup "$Q_FILE"
expect 64 "backup onto a nats:// location"
ls -a "$dir" | grep -q '^\.q-backup' && fail "a temporary directory was left behind"

if ((fails > 0)); then
  echo "test_nats_transfer: $fails failure(s)"
  exit 1
fi
echo "test_nats_transfer: ok"
