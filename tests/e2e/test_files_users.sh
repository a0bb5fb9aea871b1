# The doorbell and leftovers where several users share a directory (issue 17
# §5). Users are switched with setpriv (uids 40001/40002, group 40000; no
# accounts needed), which needs root: without it this test is skipped (77).
source "$(dirname "$0")/lib.sh" "$@"
file_backend_only "queue files and their permissions for other users"
[[ $(id -u) == 0 ]] || skip "needs root (to act as other users with setpriv)"
command -v setpriv >/dev/null || missing "setpriv (Debian: util-linux), to act as other users"
G=40000
as_a() { setpriv --reuid=40001 --regid=$G --groups=$G "$@"; }
as_b() { setpriv --reuid=40002 --regid=$G --groups=$G "$@"; }
chmod 755 "$T"

# started PID: wait (up to 10 s) until process PID has mapped FILE-wake, i.e.
# is about to wait on the doorbell.
started() {
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q -- "-wake" "/proc/$1/maps" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# ---- a sender who cannot write FILE-wake still wakes a waiting receiver ------------------
S=$T/shared
mkdir -p "$S" && chmod 777 "$S"
F=$S/q
"$Q" -f "$F" create s >/dev/null || die "create"
chmod 666 "$F" "$F-lock" && chmod 644 "$F-wake"
"$Q" -f "$F" receive s --wait 60 >"$T/got" &
receiver=$!
started "$receiver" || fail "the receiver did not start waiting"
run as_a "$Q" -f "$F" send s hello
assert_eq 0 "$RC" "a sender without write permission on FILE-wake can send"
assert_contains "$ERR" "$F-wake: no write permission" "the sender says the doorbell is not writable"
assert_eq 1 "$(grep -c . "$T/err")" "one line, once"
exit_within "$receiver" 20
assert_eq 0 $? "the waiting receiver got the message (long before its 60 s wait)"
assert_eq hello "$(cut -f4 "$T/got")" "the receiver got the message"

# ---- deleting FILE-wake while receivers wait -------------------------------------------
"$Q" -f "$F" create t >/dev/null || die "create t"
"$Q" -f "$F" receive t --wait 60 >"$T/got" &
receiver=$!
started "$receiver" || fail "the receiver did not start waiting"
rm -f "$F-wake"
"$Q" -f "$F" send t again >/dev/null || fail "send after FILE-wake was deleted"
exit_within "$receiver" 20
assert_eq 0 $? "a receiver whose doorbell was deleted got the message"
assert_eq again "$(cut -f4 "$T/got")" "the receiver got the message"

# ---- FILE.creating left by root's crashed create, in a sticky directory --------------------
D=$T/sticky
mkdir -p "$D" && chmod 1777 "$D"
: >"$D/jobs.q.creating"   # root's create was killed before it published
run as_a "$Q" -f "$D/jobs.q" create s
assert_eq 77 "$RC" "another user's create in a sticky directory: permission"
assert_contains "$ERR" "$D/jobs.q.creating is left over from a create that did not finish" \
  "the error names FILE.creating, the real obstacle"
assert_contains "$ERR" "sticky directory" "the error says why it cannot be removed"
[[ -e $D/jobs.q ]] && fail "no queue file was made"
# Root (or the owner) can: the leftover is removed and the file made.
assert_exit 0 "$Q" -f "$D/jobs.q" create s
[[ -e $D/jobs.q.creating ]] && fail "root's create left FILE.creating"
# In a directory without the sticky bit, another user's leftover goes.
N=$T/open
mkdir -p "$N" && chmod 777 "$N"
: >"$N/jobs.q.creating"
(umask 000 && as_b "$Q" -f "$N/jobs.q" create s) || fail "create over a leftover in an open directory"
[[ -e $N/jobs.q.creating ]] && fail "the leftover FILE.creating is still there"

# ---- a killed backup's temp file is removed by the next backup, not another user's ----------
B=$T/backups
mkdir -p "$B" && chmod 1777 "$B"
"$Q" -f "$F" backup "$B/b.q" || fail "backup"
sleep 0 & dead=$!
wait "$dead"
printf 'half' >"$B/b.q.tmp-$dead" && chown 40001 "$B/b.q.tmp-$dead"
sleep 0 & dead2=$!
wait "$dead2"
printf 'half' >"$B/b.q.tmp-$dead2"
"$Q" -f "$F" backup "$B/b.q" || fail "backup over leftovers"
[[ -e $B/b.q.tmp-$dead ]] || fail "root's backup removed another user's leftover"
[[ -e $B/b.q.tmp-$dead2 ]] && fail "root's backup left its own dead leftover"
rm -f "$B"/b.q.tmp-*
