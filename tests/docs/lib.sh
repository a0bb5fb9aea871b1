# Helpers for the documentation, completion, packaging and systemd tests. Each
# test script does:
#
#   source "$(dirname "$0")/lib.sh" "$@"     # SOURCE_DIR BUILD_DIR PATH_TO_q
#
# and gets:
#   $SRC $BUILD $Q      the source tree, the build tree, the q binary (absolute)
#   $T                  a fresh temporary directory, removed on exit
#   $SPEC               the command tree of $Q (scripts/cli-spec), a file
#   fail MSG            record a failure (the test goes on, exits 1 at the end)
#   die MSG             record a failure and stop now
#   need TOOL PACKAGE   stop with a failure when TOOL is missing: every tool is
#                       in scripts/bootstrap's package list, so CI has it
#   paths               every command path ("q", "q send", "q dlq list"), a line each
#   subs PATH           the subcommands of PATH
#   opt_entries PATH    the options of PATH: "NAMES<TAB>LABEL<TAB>FLAGS" a line each
#   opt_names PATH      every option name of PATH (-n and --max apart), sorted
#   positionals PATH    the positional names of PATH
#   same_set WHAT WANT GOT   compare two newline-separated sets, report differences

set -u
set -o pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 SOURCE_DIR BUILD_DIR PATH_TO_q" >&2
  exit 2
fi
SRC=$(cd "$1" && pwd)
BUILD=$(cd "$2" && pwd)
Q=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
[[ -x $Q ]] || { echo "$0: '$3' is not an executable q binary" >&2; exit 2; }
TEST_NAME=$(basename "$0" .sh)
export LC_ALL=C

T=$(mktemp -d "${TMPDIR:-/tmp}/q-docs-$TEST_NAME.XXXXXX") || exit 2
_FAILS=$T/.failures
: >"$_FAILS"
_cleanup() {
  local rc=$? n=0
  [[ -s $_FAILS ]] && n=$(wc -l <"$_FAILS")
  rm -rf "$T"
  if ((n > 0)); then
    echo "$TEST_NAME: $n check(s) FAILED" >&2
    exit 1
  fi
  if ((rc != 0)); then
    echo "$TEST_NAME: FAILED (exit $rc)" >&2
    exit "$rc"
  fi
  echo "$TEST_NAME: ok"
}
trap _cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "$*" >>"$_FAILS"
}
die() {
  fail "$@"
  exit 1
}
need() {
  command -v "$1" >/dev/null ||
    die "$1 is missing: install the Debian package $2 (scripts/bootstrap does)"
}

SPEC=$T/spec
"$SRC/scripts/cli-spec" "$Q" >"$SPEC" || die "scripts/cli-spec could not read '$Q --help'"

paths() { awk -F'\t' '$1 == "cmd" { print $2 }' "$SPEC"; }
subs() { awk -F'\t' -v p="$1" '$1 == "sub" && $2 == p { print $3 }' "$SPEC"; }
opt_entries() {
  awk -F'\t' -v p="$1" 'BEGIN { OFS = "\t" }
    $1 == "opt" && $2 == p { n = $3; gsub(/\{(true|false)\}/, "", n); print n, $4, $5 }' "$SPEC"
}
opt_names() { opt_entries "$1" | cut -f1 | tr ',' '\n' | sort -u; }
positionals() { awk -F'\t' -v p="$1" '$1 == "pos" && $2 == p { print $3 }' "$SPEC"; }

# same_set WHAT WANT GOT: WANT and GOT are newline-separated sets.
same_set() {
  local what=$1 missing extra
  missing=$(comm -23 <(sort -u <<<"$2" | sed '/^$/d') <(sort -u <<<"$3" | sed '/^$/d'))
  extra=$(comm -13 <(sort -u <<<"$2" | sed '/^$/d') <(sort -u <<<"$3" | sed '/^$/d'))
  [[ -z $missing ]] || fail "$what: missing: $(echo $missing)"
  [[ -z $extra ]] || fail "$what: unexpected: $(echo $extra)"
  [[ -z $missing && -z $extra ]]
}
