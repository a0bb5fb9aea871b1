#!/usr/bin/env bash
# A queue file on a read-only mount (issue 25 item 16): the commands that only
# read work (LMDB without its lock file, MDB_NOLOCK, under a shared flock of
# the file that q's writers' exclusive one excludes); every write is refused
# with one line saying the file system is read-only, exit 73 (not 77: it is no
# matter of permissions), and the file stays byte for byte as it was. The
# mount is a read-only bind mount of the test's directory, made in a mount
# namespace of each command's own (unshare -m), which needs root: skipped (77)
# without it, a failure under CI=true (CI runs as root).
source "$(dirname "$0")/lib.sh" "$@"
file_backend_only "a queue file on a read-only mount"
cannot() {
  [[ ${CI:-} == true ]] && die "CI=true runs as root and must make the mount: $*"
  skip "$*"
}
[[ $(id -u) == 0 ]] || cannot "needs root (a read-only bind mount in a mount namespace: unshare -m)"
command -v unshare >/dev/null || missing "unshare (Debian: util-linux)"
command -v sha256sum >/dev/null || missing "sha256sum (Debian: coreutils)"

D=$T/data # the writable place
R=$T/ro   # the same directory, mounted read-only in each command's namespace
mkdir -p "$D" "$R"
# in_ro CMD...: CMD in a mount namespace of its own where $R is $D, read-only.
in_ro() {
  unshare -m --propagation private sh -c \
    'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" || exit 99; shift 2; exec "$@"' \
    sh "$D" "$R" "$@"
}
in_ro sh -c ': >"$1/probe"' sh "$R" 2>/dev/null
case $? in
  99) cannot "cannot make a read-only bind mount here (mount --bind; mount -o remount,bind,ro)" ;;
  0) die "the read-only mount took a write" ;;
esac

F=$D/q
RF=$R/q
"$Q" -f "$F" create mail --max-receives 1 >/dev/null || die "create"
for b in one two three; do "$Q" -f "$F" send mail "$b" -q; done
receipt=$("$Q" -f "$F" receive mail | cut -f2)
"$Q" -f "$F" create jobs >/dev/null
"$Q" -f "$F" send jobs job -q
sum() { sha256sum "$F" | cut -d' ' -f1; }
before=$(sum)

# Reading works.
for cmd in "list" "stats" "stats mail --json" "peek mail" "show mail m1" "export mail" \
           "dlq list mail" "check mail" "verify"; do
  # shellcheck disable=SC2086
  run in_ro "$Q" -f "$RF" $cmd
  assert_eq 0 "$RC" "on a read-only mount: q $cmd ($ERR)"
done
run in_ro "$Q" -f "$RF" list
assert_eq $'jobs\nmail' "$OUT" "list names both queues"
run in_ro "$Q" -f "$RF" stats mail --json
assert_eq "2 1" "$(jq -r '"\(.visible) \(.in_flight)"' <<<"$OUT")" "stats counts as the writable path does"
run in_ro "$Q" -f "$RF" peek mail
assert_contains "$OUT" "two" "peek shows the bodies"

# Writing is refused: exit 73, one line naming the file and the read-only file system.
for cmd in "send mail x" "ack mail $receipt" "receive mail" "create other" "purge mail -y" \
           "pause mail"; do
  # shellcheck disable=SC2086
  run in_ro "$Q" -f "$RF" $cmd
  assert_eq 73 "$RC" "on a read-only mount: q $cmd exits 73"
  assert_contains "$ERR" "$RF: " "q $cmd names the file"
  assert_contains "$ERR" "read-only file system" "q $cmd says why"
  [[ $ERR == *permission* ]] && fail "q $cmd blames permissions: $ERR"
  assert_eq 1 "$(wc -l <"$T/err")" "q $cmd: one line"
done
run in_ro "$Q" -f "$R/new.q" create fresh
assert_eq 73 "$RC" "a new file on a read-only mount: 73 ($ERR)"
assert_contains "$ERR" "read-only file system" "says why"
assert_eq "$before" "$(sum)" "the queue file is byte for byte as it was"
[[ -e $D/new.q || -e $D/new.q.creating ]] && fail "a file appeared on the read-only mount"
run "$Q" -f "$F" ack mail "$receipt"
assert_eq 0 "$RC" "the refused ack left the receipt current ($ERR)"

# A file copied to read-only media without its lock file reads too.
"$Q" -f "$F" backup "$D/copy.q" || die "backup"
rm -f "$D/copy.q-lock" "$D/copy.q-wake"
run in_ro "$Q" -f "$R/copy.q" stats mail --json
assert_eq 0 "$RC" "a copy without FILE-lock on a read-only mount ($ERR)"
assert_eq 2 "$(jq .visible <<<"$OUT")" "the copy's count"
[[ -e $D/copy.q-lock ]] && fail "a lock file was made for the copy"

# The adversary: the same file written through the writable path while read
# through the read-only one. A reader holds a shared flock on the file for
# each read transaction, so a q writer (whose exclusive flock it is) never
# reuses a page a reader is reading; a writer holding the lock makes the
# reader wait (bounded by --lock-timeout, then 69).
command -v flock >/dev/null || missing "flock (Debian: util-linux)"
exec {held}<"$F"
flock -x "$held" || die "cannot take the writer lock with flock(1)"
run in_ro "$Q" -f "$RF" --lock-timeout 200ms stats mail
assert_eq 69 "$RC" "a reader waits for a writer's lock, then 69 ($ERR)"
exec {held}<&-
run in_ro "$Q" -f "$RF" --lock-timeout 2s stats mail
assert_eq 0 "$RC" "once the writer is done the reader reads ($ERR)"

# Every read transaction takes the lock, not only the open: a long-running
# reader (stats --watch, one read a 100 ms) stops with 69 once a writer has
# held the file past its --lock-timeout.
in_ro "$Q" -f "$RF" --lock-timeout 300ms stats jobs --watch --interval 100ms \
  >"$T/watch" 2>"$T/watch.err" &
watcher=$!
wait_for 10 test -s "$T/watch" || fail "stats --watch on the read-only mount printed nothing"
exec {held}<"$F"
flock -x "$held" || die "cannot take the writer lock with flock(1)"
wait_for 5 sh -c '! kill -0 "$1" 2>/dev/null' sh "$watcher" ||
  fail "a reader's later transaction did not wait for the writer's lock"
exec {held}<&-
kill "$watcher" 2>/dev/null
wait "$watcher"
assert_eq 69 "$?" "stats --watch: 69 once a writer held the lock past --lock-timeout ($(cat "$T/watch.err"))"

# Writers and readers at once: every read succeeds and sees whole queues.
(for i in $(seq 1 150); do "$Q" -f "$F" send jobs "bulk-$i-$(head -c 300 /dev/zero | tr '\0' x)" -q || exit 1; done) &
writer=$!
reads=0
bad=0
while kill -0 "$writer" 2>/dev/null || ((reads < 20)); do
  out=$(in_ro "$Q" -f "$RF" stats jobs --json 2>&1) || { bad=$((bad + 1)); echo "read failed: $out" >&2; }
  reads=$((reads + 1))
done
wait "$writer" || fail "the writer failed"
assert_eq 0 "$bad" "$reads reads through the read-only mount during 150 sends: none failed"
run in_ro "$Q" -f "$RF" stats jobs --json
assert_eq 151 "$(jq .visible <<<"$OUT")" "the reader sees every send"
