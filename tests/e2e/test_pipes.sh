#!/usr/bin/env bash
# Output to a closed pipe ends quietly; output to a full disk is an error.
source "$(dirname "$0")/lib.sh" "$@"

assert_exit 0 "$Q" create big
# Enough output to overflow any pipe buffer: 3000 lines of ~120 bytes.
body=$(printf 'x%.0s' {1..100})
for i in $(seq 3000); do echo "$i-$body"; done >"$T/bodies"
"$Q" send big --lines -q <"$T/bodies" || die "could not fill the queue"
assert_eq 3000 "$(stat_field big visible)" "3000 messages sent"

# peek | head -n1: the reader leaves early; q must end quietly.
first=$( { "$Q" peek big -n 3000 2>"$T/peek.err"; echo $? >"$T/peek.rc"; } | head -n1)
assert_match "^m1	visible	0	1-x+$" "$first" "peek | head -n1 shows the first message"
assert_eq "" "$(cat "$T/peek.err")" "peek into a closed pipe: nothing on stderr"
rc=$(cat "$T/peek.rc")
[[ $rc == 0 || $rc == 141 ]] || fail "peek into a closed pipe: exit $rc (want 0 or 141 for SIGPIPE)"

# The same with JSON and with other listing commands.
first=$( { "$Q" peek big -n 3000 --json 2>"$T/peek.err"; } | head -n1)
assert_eq "m1" "$(jq -r .id <<<"$first")" "peek --json | head -n1"
assert_eq "" "$(cat "$T/peek.err")" "peek --json into a closed pipe: nothing on stderr"
first=$( { "$Q" receive big -n 3000 --visibility-timeout 0s 2>"$T/recv.err"; } | head -n1)
assert_match "^m1	" "$first" "receive -n 3000 | head -n1"
assert_eq "" "$(cat "$T/recv.err")" "receive into a closed pipe: nothing on stderr"
first=$( { "$Q" --help 2>"$T/help.err"; } | head -n1)
assert_eq "" "$(cat "$T/help.err")" "--help into a closed pipe: nothing on stderr"

# The file is fine afterwards.
assert_exit 0 "$Q" stats big --json
assert_eq 3000 "$(jq '.visible + .in_flight' <<<"$OUT")" "queue intact after closed pipes"

# Writing to a full device: an error on stderr and a non-zero exit (74, I/O error).
if [[ -w /dev/full ]]; then
  "$Q" list >/dev/full 2>"$T/full.err"
  rc=$?
  assert_eq 74 "$rc" "q list >/dev/full: exit 74"
  assert_contains "$(cat "$T/full.err")" "cannot write" "q list >/dev/full: error on stderr"
  "$Q" peek big -n 3000 >/dev/full 2>"$T/full.err"
  rc=$?
  assert_eq 74 "$rc" "q peek >/dev/full: exit 74"
  [[ -s $T/full.err ]] || fail "q peek >/dev/full: no error on stderr"
  "$Q" stats --json >/dev/full 2>"$T/full.err"
  assert_eq 74 "$?" "q stats >/dev/full: exit 74"
  "$Q" send big hello >/dev/full 2>"$T/full.err"
  rc=$?
  [[ $rc != 0 ]] || fail "q send >/dev/full: exit 0 though the id could not be printed"
  [[ -s $T/full.err ]] || fail "q send >/dev/full: no error on stderr"
else
  skip_part "/dev/full is not writable here: the write-error (74) checks did not run"
fi
