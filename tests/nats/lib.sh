# Shared preamble and helpers of the NATS tests (tests/nats/test_*.sh). A test does
#
#   source "$(dirname "$0")/lib.sh"
#   nats_test NAME "$1"        # NAME: its temp dir's name; $1: the q binary
#   export Q_FILE="$urls/NAMESPACE"
#   ...
#   finish "what passed"
#
# nats_test skips (exit 77; under CI=true or Q_REQUIRE_ALL=1 fails) without
# Debian's nats-server, q-nats (beside q) or jq; makes $T (a temp dir), starts
# a 3-node cluster in $CL ($T/c) on free loopback ports (scripts/nats-cluster), and on exit kills the test's
# background jobs, stops the cluster and removes $T. It sets:
#   $Q       the q binary          $urls    nats://127.0.0.1:P1,...,P3
#   $scale   Q_TEST_TIME_SCALE     $MON_N, $CLIENT_N  node N's ports (DIR/env)
#   $cluster scripts/nats-cluster  $fails   the failure count (fail adds one)
# Helpers:
#   fail TEXT                 one FAIL line, counted; the test goes on
#   finish TEXT               PASS: TEXT when nothing failed; exits 0 or 1
#   q ARGS...                 runs q: stdout in $OUT, stderr in $ERR, status in $RC
#   expect RC WHAT            the last q exited RC, else a failure naming WHAT
#   counts QUEUE              "visible in_flight delayed" from q stats
#   stat_field QUEUE FIELD    one field of q stats --json
#   now_ms                    milliseconds since the epoch
#   node kill|restart N       kill -9 node N / start it again and wait until it rejoined
#   run_env ENV... -- ARGS    q ARGS with these variables: OUT, ERR, RC and SECS (wall
#                             seconds); both streams also appended to $T/all-output
#                             (the tests that grep every output for a secret)
#   stream_leader STREAM      the node (n1..n3) leading STREAM, asked of any live node
# A test that brings its own harness (test_nats_storm.sh: the torture lib) uses
# nats_require and nats_cluster_start instead of nats_test.
#
# shellcheck shell=bash
set -uo pipefail
NATS_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$NATS_LIB_DIR/../../scripts/nats-cluster
scale=${Q_TEST_TIME_SCALE:-1}
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
finish() {
  ((fails == 0)) && echo "PASS: $*"
  exit $((fails > 0))
}

# nats_missing WHAT: a package or binary the test needs is missing: skip (77),
# or fail (exit 1) under CI=true or Q_REQUIRE_ALL=1, where scripts/bootstrap
# installs every package (and CMake builds q-nats): there it is a broken setup.
nats_missing() {
  if [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]]; then
    echo "FAIL: $* (CI=true or Q_REQUIRE_ALL=1: a missing package is a failure, not a skip)" >&2
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}

# nats_missing_part WHAT: one part cannot run for a missing package: a failure
# under CI=true or Q_REQUIRE_ALL=1, else a note (the rest of the test runs).
nats_missing_part() {
  if [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]]; then
    fail "$* (CI=true or Q_REQUIRE_ALL=1: a missing package is a failure, not a skip)"
  else
    echo "   not run: $*"
  fi
}

# nats_require [Q]: nats_missing unless nats-server is installed and, given the
# q binary, q-nats is built beside it and jq is installed.
nats_require() {
  command -v nats-server >/dev/null || nats_missing "nats-server not installed (Debian: nats-server)"
  [[ -z ${1:-} ]] && return 0
  [[ -x $(dirname "$1")/q-nats ]] || nats_missing "q-nats not built beside $1 (needs libnats-dev)"
  command -v jq >/dev/null || nats_missing "jq not installed (Debian: jq)"
}

# nats_cluster_start DIR: a 3-node cluster with its data in DIR; sets $urls and
# the ports of DIR/env. Exits 1 when the cluster does not come up.
nats_cluster_start() {
  urls=$("$cluster" start "$1" 3) || { echo "FAIL: cluster start"; exit 1; }
  NATS_STARTED=$SECONDS   # every stream of the test is younger than this
  # shellcheck source=/dev/null
  source "$1/env"
}

_nats_exit() {
  local jobs_left
  jobs_left=$(jobs -p)
  [[ -n $jobs_left ]] && kill $jobs_left 2>/dev/null
  "$cluster" stop "$CL" >/dev/null 2>&1
  rm -rf "$T"
}

# nats_test NAME [Q]: the whole preamble (see the top).
nats_test() {
  Q=${2:-}
  nats_require "$Q"
  T=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-$1.XXXXXX")
  CL=$T/c
  trap _nats_exit EXIT
  nats_cluster_start "$CL"
}

now_ms() { date +%s%3N; }
q() { OUT=$("$Q" "$@" 2>"$T/err"); RC=$?; ERR=$(cat "$T/err"); }
expect() { [[ $RC == "$1" ]] || fail "$2: exit $RC, expected $1 (stderr: $ERR)"; }
counts() { "$Q" stats "$1" --json | jq -r '"\(.visible) \(.in_flight) \(.delayed)"'; }
stat_field() { "$Q" stats "$1" --json | jq -r ".$2"; }
node() { "$cluster" "$1" "$CL" "$2"; }
run_env() {
  local -a vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  local t0
  t0=$(now_ms)
  OUT=$(env "${vars[@]}" "$Q" "$@" 2>"$T/err")
  RC=$?
  ERR=$(cat "$T/err")
  SECS=$(awk -v a="$t0" -v b="$(now_ms)" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
  printf '%s\n%s\n' "$OUT" "$ERR" >>"$T/all-output"
}

stream_leader() {
  python3 - "$1" "$MON_1" "$MON_2" "$MON_3" <<'EOF'
import json, sys, urllib.request
for port in sys.argv[2:]:
    try:
        d = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz?streams=true", timeout=2))
    except Exception:
        continue
    for a in d.get("account_details", []):
        for s in a.get("stream_detail", []):
            if s["name"] == sys.argv[1] and s.get("cluster", {}).get("leader"):
                print(s["cluster"]["leader"]); sys.exit(0)
EOF
}
