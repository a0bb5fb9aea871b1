# Read-only monitoring (issue 15): a user with read permission on the queue
# file and read-write permission on FILE-lock (LMDB's reader table) runs every
# command that only reads; nothing else is needed, and writes are refused with
# exit 77. Users are switched with setpriv (uid 40011, no account needed),
# which needs root: without it this test is skipped (77).
source "$(dirname "$0")/lib.sh" "$@"
file_backend_only "read-only opens of a queue file"
[[ $(id -u) == 0 ]] || skip "needs root (to act as another user with setpriv)"
command -v setpriv >/dev/null || missing "setpriv (Debian: util-linux), to act as another user"
as_reader() { setpriv --reuid=40011 --regid=40010 --clear-groups "$@"; }
chmod 755 "$T"
D=$T/ro
mkdir -p "$D" && chmod 755 "$D"   # the reader may not write the directory
F=$D/q
"$Q" -f "$F" create mail --max-receives 1 >/dev/null || die "create"
"$Q" -f "$F" send mail hello -q
"$Q" -f "$F" send mail poison -q
"$Q" -f "$F" receive mail >/dev/null
"$Q" -f "$F" nack mail "$("$Q" -f "$F" receive mail | cut -f2)" --reason 'smtp 550' 2>/dev/null
"$Q" -f "$F" receive mail >/dev/null   # dead-letters the released one
"$Q" -f "$F" pause mail --reason maintenance >/dev/null
chmod 644 "$F" "$F-wake"
chmod 666 "$F-lock"
ls -l "$D" >&2

for cmd in "list" "stats" "stats mail --json" "stats --prometheus" "peek mail" "show mail m1" \
           "export mail" "dlq list mail" "dlq list mail --by-reason" "dlq show mail m2" "verify"; do
  # shellcheck disable=SC2086
  run as_reader "$Q" -f "$F" $cmd
  assert_eq 0 "$RC" "read-only user: q $cmd ($ERR)"
done
run as_reader "$Q" -f "$F" stats mail --json
assert_eq true "$(jq .paused <<<"$OUT")" "the reader sees the pause"
run as_reader "$Q" -f "$F" check mail
assert_eq 1 "$RC" "check as the reader: WARNING (paused), not UNKNOWN"
run as_reader "$Q" -f "$F" top mail </dev/null
[[ $RC == 77 ]] && fail "top as the reader: permission denied"

# Writes are refused, naming the file.
run as_reader "$Q" -f "$F" send mail x
assert_eq 77 "$RC" "a write as the reader: 77"
assert_contains "$ERR" "permission" "says why"
assert_eq 1 "$("$Q" -f "$F" stats mail --json | jq '.visible + .in_flight')" "nothing changed"

# Without write permission on FILE-lock, the message says exactly what is needed.
chmod 644 "$F-lock"
run as_reader "$Q" -f "$F" stats
assert_eq 77 "$RC" "no write permission on FILE-lock: 77"
assert_contains "$ERR" "read and write permission on $F-lock" "names the lock file and what it needs"
chmod 600 "$F"
chmod 666 "$F-lock"
run as_reader "$Q" -f "$F" stats
assert_eq 77 "$RC" "no read permission on the file: 77"
assert_contains "$ERR" "no read permission" "says so"
