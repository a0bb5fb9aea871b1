# Helpers for the end-to-end tests. Each test script does:
#
#   source "$(dirname "$0")/lib.sh" "$@"     # $1: path to the q binary
#
# and gets:
#   $Q        absolute path of the q binary
#   $T        a fresh temporary directory, removed on exit
#   $Q_FILE   exported, a queue file inside $T (not created yet)
#   fail MSG              record a failure (the test goes on, and exits 1 at the end)
#   die MSG               record a failure and stop now
#   run CMD...            run CMD; sets RC, OUT, ERR (OUT/ERR without trailing newlines;
#                         the exact bytes stay in $T/out and $T/err)
#   assert_eq WANT GOT MSG
#   assert_exit CODE CMD...   run CMD (as `run`) and check its exit code
#   assert_contains HAYSTACK NEEDLE MSG
#   assert_match REGEX STRING MSG
#   now_ms                milliseconds since the epoch
#   skip REASON           the whole test cannot run here: exit 77 now (ctest: skipped)
#   skip_part REASON      one part cannot run here: the rest runs, and the test
#                         then exits 77 (skipped) unless something failed (exit 1)
#   missing REASON        a package or binary the test needs is not installed:
#                         skip, or a failure under CI=true or Q_REQUIRE_ALL=1
#                         (require_all: scripts/bootstrap installs every one)
#   missing_part REASON   the same for one part (skip_part, or fail)
#   seed_random [N]       seed $RANDOM from $Q_TEST_SEED (+ N): bash reseeds $RANDOM
#                         in every subshell, so each background loop calls it with
#                         its own N; the seed is printed at the start of each test
#   wait_for SECONDS CMD...   run CMD until it succeeds; 1 after SECONDS (poll, no
#                         fixed sleep; the limit scales with Q_TEST_TIME_SCALE)
#   $Q_TEST_LOCATION      when set to a nats:// or tls:// location (nats://HOST:PORT,.../ANY),
#                         the test runs against that cluster: Q_FILE is the same
#                         servers with a namespace of this test's own, so tests
#                         (and runs) never see each other's queues
#   on_nats               true when the test runs against a nats:// location
#   file_backend_only REASON  skip (77) when on NATS: the test needs what only a
#                         queue file has, or what the NATS backend lacks yet
#                         (REASON says which; README lists the differences)
#   nats_lacks FEATURE    true when on NATS and the backend lacks FEATURE (the
#                         list _NATS_LACKS below, the one place to update)
#
# Assertions print the command, its exit code, stdout and stderr when they fail,
# so a failure report is enough to see what q did.

set -u
set -o pipefail

if [[ $# -lt 1 || -z ${1:-} ]]; then
  echo "usage: $0 PATH_TO_q" >&2
  exit 2
fi
if [[ ! -x $1 ]]; then
  echo "$0: '$1' is not an executable q binary" >&2
  exit 2
fi
Q=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
TEST_NAME=$(basename "$0" .sh)

command -v jq >/dev/null || { echo "$TEST_NAME: jq is required" >&2; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/q-e2e-$TEST_NAME.XXXXXX") || exit 2
# Failures are counted in a file so that assertions made in subshells count too.
_FAILS=$T/.failures
: >"$_FAILS"
# Parts skipped (skip_part), one reason a line: the test then exits 77, never 0,
# so a check that did not run is reported as skipped, not passed.
_SKIPS=$T/.skips
: >"$_SKIPS"

_cleanup() {
  local rc=$?
  # Stop background processes this test started (only our own children).
  local pids
  pids=$(jobs -pr 2>/dev/null)
  if [[ -n $pids ]]; then
    kill $pids 2>/dev/null
    wait 2>/dev/null
  fi
  local n=0 skipped=""
  [[ -s $_FAILS ]] && n=$(wc -l <"$_FAILS")
  [[ -s $_SKIPS ]] && skipped=$(paste -sd';' "$_SKIPS")
  rm -rf "$T"
  if ((n > 0)); then
    echo "$TEST_NAME: $n assertion(s) FAILED" >&2
    exit 1
  fi
  if ((rc == 77)) || { ((rc == 0)) && [[ -n $skipped ]]; }; then
    echo "$TEST_NAME: SKIPPED (exit 77): ${skipped:-see above}" >&2
    exit 77
  fi
  if ((rc != 0)); then
    echo "$TEST_NAME: FAILED (exit $rc)" >&2
    exit "$rc"
  fi
  echo "$TEST_NAME: ok"
  exit 0
}
trap _cleanup EXIT

# Every random choice of a test comes from this seed (printed; set Q_TEST_SEED
# to run the same choices again; TORTURE_SEED is the torture scenarios' name).
Q_TEST_SEED=${Q_TEST_SEED:-${TORTURE_SEED:-$((SRANDOM % 1000000))}}
[[ $Q_TEST_SEED =~ ^[0-9]+$ ]] || { echo "Q_TEST_SEED must be a number, not '$Q_TEST_SEED'" >&2; exit 2; }
export Q_TEST_SEED
seed_random() { RANDOM=$((Q_TEST_SEED + ${1:-0})); }
seed_random
echo "$TEST_NAME: seed $Q_TEST_SEED (Q_TEST_SEED=$Q_TEST_SEED repeats its random choices)"

# A clean environment: only the variables a test sets itself.
unset Q_NO_SYNC Q_LOCK_TIMEOUT XDG_DATA_HOME
export HOME=$T/home
mkdir -p "$HOME"
export Q_FILE=$T/test.q
if [[ ${Q_TEST_LOCATION:-} == nats://* || ${Q_TEST_LOCATION:-} == tls://* ]]; then
  # A namespace of this test's own: 1-32 letters, digits and '-'.
  _ns=$(printf '%s' "${TEST_NAME#test_}" | tr -c 'a-zA-Z0-9' '-' | cut -c1-16)
  export Q_FILE="${Q_TEST_LOCATION%/*}/t-$_ns-$$-$((SRANDOM % 100000))"
fi
on_nats() { [[ $Q_FILE == nats://* || $Q_FILE == tls://* ]]; }
# What the NATS backend does not have (yet); empty: every feature is there.
_NATS_LACKS=" "
nats_lacks() { on_nats && [[ $_NATS_LACKS == *" $1 "* ]]; }
file_backend_only() {
  if on_nats; then skip "on NATS: $*"; fi
}
export LC_ALL=C

fail() {
  echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: $*" >&2
  echo "$*" >>"$_FAILS"
}

die() {
  fail "$@"
  exit 1
}

# skip REASON: this test cannot run here (no unshare, not root; a missing tool: missing):
# exit 77, which ctest reports as skipped (SKIP_RETURN_CODE 77), never as passed.
skip() {
  echo "$TEST_NAME: skipped: $*" >&2
  echo "$*" >>"$_SKIPS"
  exit 77
}

# skip_part REASON: one part of this test cannot run here; the others go on, and
# the test ends with exit 77 (skipped) when nothing failed.
skip_part() {
  echo "$TEST_NAME: part skipped: $*" >&2
  echo "$*" >>"$_SKIPS"
}

# require_all: true under CI=true or Q_REQUIRE_ALL=1, where every package of
# scripts/bootstrap is installed: a missing tool is a broken bootstrap, not a
# reason to skip. (What the environment cannot do, not root, no unshare, no
# user namespaces, stays a skip.)
require_all() { [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]]; }

# missing REASON: the whole test needs a package or binary that is not installed.
missing() {
  require_all && die "missing: $* (CI=true or Q_REQUIRE_ALL=1: scripts/bootstrap installs it, so this is a failure)"
  skip "$*"
}

# missing_part REASON: one part needs a package or binary that is not installed.
missing_part() {
  if require_all; then
    fail "missing: $* (CI=true or Q_REQUIRE_ALL=1: scripts/bootstrap installs it, so this is a failure)"
  else
    skip_part "$*"
  fi
}

# wait_for SECONDS CMD...: poll CMD (every 20 ms) until it succeeds; returns 1
# when it did not within SECONDS * Q_TEST_TIME_SCALE (default 1; the sanitizer
# stage and loaded machines set more). For asserting that a state is reached
# without a fixed sleep.
wait_for() {
  local limit=$1
  shift
  local end=$((SECONDS + ${limit%.*} * ${Q_TEST_TIME_SCALE:-1} + 1))
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.02
  done
}

# Shows what the last `run` did, for failure messages.
_last_run() {
  printf '    command: %s\n    exit: %s\n    stdout: %s\n    stderr: %s\n' \
    "${RUN_CMD:-}" "${RC:-}" "$(head -c 2000 "$T/out" 2>/dev/null)" \
    "$(head -c 2000 "$T/err" 2>/dev/null)"
}

run() {
  RUN_CMD=$(printf '%q ' "$@")
  "$@" >"$T/out" 2>"$T/err"
  RC=$?
  OUT=$(<"$T/out")
  ERR=$(<"$T/err")
  return 0
}

# Like run, with standard input from a string (printf %b is NOT applied).
run_in() {
  local input=$1
  shift
  RUN_CMD="printf %s $(printf '%q' "$input") | $(printf '%q ' "$@")"
  printf '%s' "$input" | "$@" >"$T/out" 2>"$T/err"
  RC=$?
  OUT=$(<"$T/out")
  ERR=$(<"$T/err")
  return 0
}

assert_eq() {
  local want=$1 got=$2 msg=${3:-}
  if [[ $want != "$got" ]]; then
    echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: $msg" >&2
    printf '    expected: %q\n    got:      %q\n' "$want" "$got" >&2
    echo "$msg" >>"$_FAILS"
    return 1
  fi
  return 0
}

assert_exit() {
  local want=$1
  shift
  run "$@"
  if [[ $RC != "$want" ]]; then
    echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: expected exit $want from: $RUN_CMD" >&2
    _last_run >&2
    echo "exit $RC != $want: $RUN_CMD" >>"$_FAILS"
    return 1
  fi
  return 0
}

# assert_exit_in CODE INPUT CMD...: like assert_exit with stdin from INPUT.
assert_exit_in() {
  local want=$1 input=$2
  shift 2
  run_in "$input" "$@"
  if [[ $RC != "$want" ]]; then
    echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: expected exit $want from: $RUN_CMD" >&2
    _last_run >&2
    echo "exit $RC != $want: $RUN_CMD" >>"$_FAILS"
    return 1
  fi
  return 0
}

assert_contains() {
  local haystack=$1 needle=$2 msg=${3:-}
  if [[ $haystack != *"$needle"* ]]; then
    echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: $msg" >&2
    printf '    expected to contain: %q\n    got: %q\n' "$needle" "$haystack" >&2
    echo "$msg" >>"$_FAILS"
    return 1
  fi
  return 0
}

assert_not_contains() {
  local haystack=$1 needle=$2 msg=${3:-}
  if [[ $haystack == *"$needle"* ]]; then
    echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: $msg" >&2
    printf '    expected NOT to contain: %q\n    got: %q\n' "$needle" "$haystack" >&2
    echo "$msg" >>"$_FAILS"
    return 1
  fi
  return 0
}

assert_match() {
  local regex=$1 string=$2 msg=${3:-}
  if ! [[ $string =~ $regex ]]; then
    echo "FAIL [$TEST_NAME:${BASH_LINENO[0]}]: $msg" >&2
    printf '    expected to match: %s\n    got: %q\n' "$regex" "$string" >&2
    echo "$msg" >>"$_FAILS"
    return 1
  fi
  return 0
}

# The stats of one queue as JSON (one line); dies when q cannot give them.
stats_json() {
  local out
  out=$("$Q" stats "$1" --json) || die "q stats $1 --json failed"
  [[ -n $out ]] || die "q stats $1 --json printed nothing"
  printf '%s\n' "$out"
}

# stat_field QUEUE FIELD: one field of `q stats QUEUE --json`.
stat_field() {
  stats_json "$1" | jq -r ".$2"
}

now_ms() { date +%s%3N; }

# exit_within PID SECONDS: the job's exit code, or 124 when it still runs then.
exit_within() {
  local pid=$1 i
  for ((i = 0; i < $2 * 20; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      return $?
    fi
    sleep 0.05
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 124
}
