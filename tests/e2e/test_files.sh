# The files beside a queue file (FILE-lock, FILE-wake, FILE.creating) and the
# files q writes for the user (backup copies, --prometheus --output):
# never followed through a symbolic link, never left behind by a crash,
# never one of the queue's own files, and never looser than the original.
source "$(dirname "$0")/lib.sh" "$@"
file_backend_only "queue files: paths, symbolic links, locks, crashes"

VICTIM=$T/victim
reset_victim() { printf 'precious\n' >"$VICTIM"; chmod 644 "$VICTIM"; }
victim_intact() { [[ -f $VICTIM && ! -L $VICTIM && $(cat "$VICTIM") == precious ]]; }

# ---- break 3: a symbolic link at FILE-lock or FILE-wake is refused, not followed ---------
for companion in lock wake; do
  rm -f "$Q_FILE"*
  "$Q" create s >/dev/null || die "create"
  "$Q" send s one >/dev/null || die "send"
  reset_victim
  rm -f "$Q_FILE-$companion"
  ln -s "$VICTIM" "$Q_FILE-$companion"
  for cmd in "send s two" "receive s" "stats" "backup $T/b.q"; do
    # shellcheck disable=SC2086
    assert_exit 74 "$Q" $cmd
    assert_contains "$ERR" "$Q_FILE-$companion: is a symbolic link" \
      "FILE-$companion symlink, q $cmd: the error names the link"
    assert_eq 1 "$(wc -l <"$T/err")" "FILE-$companion symlink, q $cmd: one line"
    victim_intact || fail "FILE-$companion symlink, q $cmd: the victim was written"
    reset_victim
  done
  # A dangling link is not created through either.
  rm -f "$VICTIM" "$Q_FILE-$companion"
  ln -s "$VICTIM" "$Q_FILE-$companion"
  assert_exit 74 "$Q" send s three
  [[ -e $VICTIM ]] && fail "FILE-$companion dangling symlink: q created its target"
  # Removing the link lets q make its own file again; nothing was lost.
  rm -f "$Q_FILE-$companion"
  assert_exit 0 "$Q" receive s -n 10
  assert_eq one "$(cut -f4 <<<"$OUT")" "after FILE-$companion was fixed: the message is there"
done

# A hard link to another file, or a FIFO, at FILE-lock is refused as well.
rm -f "$Q_FILE"*
"$Q" create s >/dev/null || die "create"
reset_victim
rm -f "$Q_FILE-lock"
ln "$VICTIM" "$Q_FILE-lock"
assert_exit 74 "$Q" send s x
assert_contains "$ERR" "$Q_FILE-lock: has 2 hard links" "hard-linked FILE-lock is refused"
victim_intact || fail "hard-linked FILE-lock: the victim was written"
rm -f "$Q_FILE-lock"
mkfifo "$Q_FILE-wake.fifo" && rm -f "$Q_FILE-wake" && mv "$Q_FILE-wake.fifo" "$Q_FILE-wake"
assert_exit 74 "$Q" send s x
assert_contains "$ERR" "$Q_FILE-wake: is not a regular file" "a FIFO at FILE-wake is refused"
rm -f "$Q_FILE-wake"

# FILE.creating as a link: a new file is never built through it.
rm -f "$Q_FILE"*
reset_victim
ln -s "$VICTIM" "$Q_FILE.creating"
assert_exit 0 "$Q" create s
victim_intact || fail "FILE.creating symlink: the victim was written"
assert_exit 0 "$Q" stats s

# Temporary files of backup and --prometheus --output are never followed.
reset_victim
for pid_guess in $(seq $(($$ + 1)) $(($$ + 40))); do
  ln -sf "$VICTIM" "$T/b.q.tmp-$pid_guess"
  ln -sf "$VICTIM" "$T/metrics.prom.tmp-$pid_guess"
done
assert_exit 0 "$Q" backup "$T/b.q"
assert_exit 0 "$Q" stats --prometheus --output "$T/metrics.prom"
victim_intact || fail "temp-file symlinks: the victim was written"
rm -f "$T"/*.tmp-*

# ---- break 8: the copy has the source's mode, whatever the umask -------------------------
rm -f "$Q_FILE"* "$T/b.q"
(umask 077 && "$Q" create s >/dev/null) || die "create"
chmod 600 "$Q_FILE"
(umask 022 && "$Q" backup "$T/b.q") || fail "backup under umask 022"
assert_eq 600 "$(stat -c %a "$T/b.q")" "backup of a 0600 file under umask 022"
chmod 640 "$Q_FILE"
(umask 077 && "$Q" backup "$T/b.q") || fail "backup under umask 077"
assert_eq 640 "$(stat -c %a "$T/b.q")" "backup of a 0640 file under umask 077"
if [[ $(id -u) == 0 ]]; then
  chgrp 40000 "$Q_FILE"
  "$Q" backup "$T/b.q" || fail "backup of a file of group 40000"
  assert_eq 40000 "$(stat -c %g "$T/b.q")" "the copy has the source's group"
fi

# ---- break 16: a directory as the target ----------------------------------------------
mkdir -p "$T/backups"
assert_exit 64 "$Q" backup "$T/backups/"
assert_contains "$ERR" "$T/backups/: is a directory" "backup DIR/: names the directory"
assert_exit 64 "$Q" backup "$T/backups"
assert_eq "" "$(ls -A "$T/backups")" "backup DIR: nothing written into it"

# ---- issue 17 §5: the queue's own files are never a backup target ------------------------
rm -f "$Q_FILE"*
"$Q" create s >/dev/null && "$Q" send s keep >/dev/null || die "create/send"
lock_before=$(stat -c %i "$Q_FILE-lock")
ln -s "$Q_FILE-lock" "$T/lock-link"
ln "$Q_FILE" "$T/data-hardlink"
for target in "$Q_FILE" "$Q_FILE-lock" "$Q_FILE-wake" "$Q_FILE.creating" \
  "$T/./$(basename "$Q_FILE")-lock" "$T/lock-link" "$T/data-hardlink"; do
  assert_exit 64 "$Q" backup "$target"
  assert_contains "$ERR" "is the queue file" "backup $target: refused as one of the queue's files"
done
assert_eq "$lock_before" "$(stat -c %i "$Q_FILE-lock")" "FILE-lock was not replaced"
[[ -e $Q_FILE.creating ]] && fail "backup FILE.creating made a file"
rm -f "$T/lock-link" "$T/data-hardlink"
assert_exit 0 "$Q" receive s
assert_eq keep "$(cut -f4 <<<"$OUT")" "the queue still works after the refused backups"

# ---- issue 17 §5: leftovers of a killed backup are removed by the next one ---------------
# A temp file of a process that is gone (a pid that is surely not running) is
# q's to remove; one of a live process, or one that is not q's name, is not.
sleep 0 & dead_pid=$!
wait "$dead_pid"
printf 'half a copy' >"$T/b.q.tmp-$dead_pid"
sleep 1000 & live_pid=$!
printf 'in use' >"$T/b.q.tmp-$live_pid"
printf 'mine' >"$T/b.q.tmp-notapid"
assert_exit 0 "$Q" backup "$T/b.q"
[[ -e $T/b.q.tmp-$dead_pid ]] && fail "the killed backup's temp file is still there"
[[ -e $T/b.q.tmp-$live_pid ]] || fail "a live process's temp file was removed"
[[ -e $T/b.q.tmp-notapid ]] || fail "a file that is not q's temp name was removed"
kill "$live_pid"; wait "$live_pid" 2>/dev/null
rm -f "$T"/b.q.tmp-*

# ---- issue 29: pinned names paid for once -------------------------------------------------
# In a directory no other user may change, LMDB gets /proc/self/fd/D/NAME (D:
# the directory q opened): no private directory is made and removed per
# command. In a directory others may write, names go through the private
# directory of links. Either way a link swapped in is not followed (the
# symlink tests above run in this test's 0700 directory, so on the first path).
if command -v strace >/dev/null; then
  trace_opens() {  # trace_opens FILE CMD...: the file-name calls of one q command
    # LeakSanitizer refuses to run under ptrace (the ASan stage): no leak check here.
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
      strace -f -qq -e trace=mkdir,symlink,rmdir,openat -o "$T/strace" "$Q" -f "$1" "${@:2}" >/dev/null
    local rc=$?
    cat "$T/strace"
    return $rc
  }
  rm -f "$Q_FILE"*
  "$Q" create s >/dev/null || die "create"
  trace=$(trace_opens "$Q_FILE" send s pinned) || fail "traced send"
  assert_not_contains "$trace" "q-open." "own directory: no private directory of links"
  assert_not_contains "$trace" "symlink(" "own directory: no links made"
  assert_contains "$trace" "/proc/self/fd/" "own directory: LMDB opens through the pinned directory"
  mkdir -m 0777 "$T/shared" && chmod 0777 "$T/shared"
  "$Q" -f "$T/shared/s.q" create s >/dev/null || die "create in a shared directory"
  trace=$(trace_opens "$T/shared/s.q" send s shared) || fail "traced send in a shared directory"
  assert_contains "$trace" "q-open." "shared directory: the private directory of links"
  assert_exit 0 "$Q" -f "$T/shared/s.q" receive s
  # A data file that is itself a link is not pinned by its directory (the link
  # could be re-pointed): the private directory is used, and it works.
  ln -s "$Q_FILE" "$T/link.q"
  trace=$(trace_opens "$T/link.q" send s through-link) || fail "traced send through a link"
  assert_contains "$trace" "q-open." "a linked data file: the private directory of links"
  assert_eq 2 "$(stat_field s visible)" "both sends landed in the linked file"
  rm -f "$T/link.q"
else
  missing_part "strace (to see which names LMDB is given)"
fi

# Without a private temporary directory for pinned names, LMDB gets the real
# names (and q checks afterwards which files it opened): still works, in a
# directory others may write (where the directory is not pinned).
rm -rf "$T/shared" && mkdir -m 0777 "$T/shared" && chmod 0777 "$T/shared"
TMPDIR=/nonexistent "$Q" -f "$T/shared/s.q" create s >/dev/null || fail "create with TMPDIR=/nonexistent"
TMPDIR=/nonexistent "$Q" -f "$T/shared/s.q" send s one >/dev/null || fail "send with TMPDIR=/nonexistent"
assert_exit 0 env TMPDIR=/nonexistent "$Q" -f "$T/shared/s.q" receive s
rm -rf "$T/shared"

# ---- break 15: a long-running q work notices that its file was deleted or replaced ----------
for how in delete replace; do
  rm -f "$Q_FILE"* "$T/ran"
  "$Q" create w >/dev/null || die "create"
  "$Q" work w -q -- sh -c 'cat >>"$1"' sh "$T/ran" 2>"$T/work.err" &
  worker=$!
  "$Q" send w first >/dev/null
  for ((i = 0; i < 200; i++)); do [[ -s $T/ran ]] && break; sleep 0.05; done
  [[ -s $T/ran ]] || fail "$how: the worker did not run the first message"
  if [[ $how == delete ]]; then
    rm -f "$Q_FILE" "$Q_FILE-lock" "$Q_FILE-wake"
    "$Q" create w >/dev/null || die "create again"
  else
    # A restore done right moves the companions with the file: a lock file
    # shared by two data files mixes their transaction ids (LMDB).
    "$Q" -f "$T/new.q" create w >/dev/null || die "create new"
    mv "$T/new.q-lock" "$Q_FILE-lock" && mv "$T/new.q-wake" "$Q_FILE-wake"
    mv "$T/new.q" "$Q_FILE"
  fi
  "$Q" send w second >/dev/null
  exit_within "$worker" 10
  rc=$?
  assert_eq 74 "$rc" "$how: q work exits 74 when its file was ${how}d"
  err=$(<"$T/work.err")
  assert_contains "$err" "$Q_FILE: the queue file was ${how}" "$how: q work says why"
  assert_eq 1 "$(stat -c %s "$T/ran" >/dev/null && grep -c . "$T/ran")" "$how: only the first message ran"
  assert_eq 1 "$(stat_field w visible)" "$how: the second message waits in the new file"
  rm -f "$T/new.q"*
done
