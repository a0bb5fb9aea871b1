#!/usr/bin/env bash
# Exit codes of the --help table, and that a refused command leaves the file as it was.
source "$(dirname "$0")/lib.sh" "$@"

# cmp_file BEFORE WHAT: the queue file is byte-identical to the copy BEFORE.
cmp_file() {
  # On NATS there is no file to compare; the stats checks beside each call show
  # that nothing changed.
  on_nats && return 0
  cmp -s "$1" "$Q_FILE" || fail "$2: the queue file changed ($(cmp "$1" "$Q_FILE" 2>&1 | head -n1))"
}

# ---- usage errors: 64 ----------------------------------------------------------------
assert_exit 64 "$Q"
assert_exit 64 "$Q" frobnicate
assert_contains "$ERR" "frobnicate" "unknown command: stderr names it"
assert_exit 64 "$Q" -f "$T/x.q" frobnicate
assert_exit 64 "$Q" --frobnicate list
assert_exit 64 "$Q" list --frobnicate
assert_contains "$ERR" "--frobnicate" "unknown flag: stderr names it"
assert_exit 64 "$Q" send
assert_exit 64 "$Q" send q1 body extra-argument
assert_exit 64 "$Q" send q1 --lines --null
assert_exit 64 "$Q" receive q1 -n 0
assert_exit 64 "$Q" receive q1 -n abc
[[ -e $Q_FILE ]] && fail "usage errors created the queue file"
assert_exit 0 "$Q" --help
assert_contains "$OUT" "Exit status:" "--help shows the exit code table"
assert_exit 0 "$Q" send --help
assert_contains "$OUT" "  75  queue full" "send --help shows the codes send can return"
[[ $OUT == *"   1  nothing"* ]] && fail "send --help lists exit 1, which only receive returns"
assert_exit 0 "$Q" help send
assert_exit 64 "$Q" redrive
assert_contains "$ERR" "q redrive: " "a parse error names its command"
assert_contains "$ERR" "(see 'q redrive --help')" "a parse error points to the command's help"
assert_exit 3 "$Q" check --max-dead
assert_contains "$OUT" "Q UNKNOWN - " "q check: a usage error is UNKNOWN on stdout"
assert_exit 3 "$Q" check --max-dead 2,1
assert_exit 0 "$Q" --version
assert_match '^q [0-9]' "$OUT" "--version"

# Bad durations: 64, before anything is created or written.
assert_exit 64 "$Q" create q1 --visibility-timeout 5x
assert_contains "$ERR" "--visibility-timeout" "bad duration: stderr names the flag"
assert_exit 64 "$Q" create q1 --retention soon
[[ -e $Q_FILE ]] && fail "create with a bad duration created the queue file"
assert_exit 0 "$Q" create q1
on_nats || cp "$Q_FILE" "$T/before.q"
assert_exit 64 "$Q" receive q1 --wait 1y
assert_exit 64 "$Q" receive q1 --visibility-timeout -1s
assert_exit 64 "$Q" send q1 body --delay 10 --at @1790000000
assert_exit 64 "$Q" send q1 body --delay x
assert_exit 64 "$Q" send q1 body --at tomorrow
assert_exit 64 "$Q" --lock-timeout forever list
assert_exit 64 env Q_LOCK_TIMEOUT=forever "$Q" list
assert_contains "$ERR" "Q_LOCK_TIMEOUT" "bad Q_LOCK_TIMEOUT: stderr names the variable"
assert_exit 64 "$Q" nack q1 m1.0123456789abcdef --delay 5x
assert_exit 64 "$Q" extend q1 m1.0123456789abcdef --by 5x
assert_exit 64 "$Q" extend q1 m1.0123456789abcdef   # --by is required
assert_exit 64 "$Q" create q2 --max-receives 1001
assert_exit 64 "$Q" create q2 --retention 10s
cmp_file "$T/before.q" "usage errors"

# Bad queue names: 64.
assert_exit 64 "$Q" create 'bad name'
assert_contains "$ERR" "queue name" "bad queue name: stderr explains"
assert_exit 64 "$Q" create 'a/b'
assert_exit 64 "$Q" create ''
assert_exit 64 "$Q" create "$(printf 'n%.0s' {1..81})"
assert_exit 64 "$Q" send 'bad name' body
assert_exit 64 "$Q" send 'bad name' body --create
assert_exit 64 "$Q" receive 'bäd'
cmp_file "$T/before.q" "bad queue names"
# An empty duration is as bad as a malformed one (think --wait "$UNSET_VARIABLE").
assert_exit 64 "$Q" receive q1 --wait ''
assert_exit 64 "$Q" receive q1 --visibility-timeout ''
assert_exit 64 "$Q" send q1 body --delay ''

assert_exit 0 "$Q" create "$(printf 'n%.0s' {1..80})"   # 80 is the limit
assert_exit 0 "$Q" create 'A-z_0.9'

# An existing queue with other settings: 64, nothing changed.
assert_exit 0 "$Q" create q1 --visibility-timeout 30s   # the default: agrees
assert_exit 64 "$Q" create q1 --visibility-timeout 10s
assert_contains "$ERR" "q config" "create with other settings points at q config"

# ---- not found: 66 -----------------------------------------------------------------
on_nats || cp "$Q_FILE" "$T/before.q"
assert_exit 66 "$Q" send nosuch body
assert_contains "$ERR" "q create" "send to a missing queue: stderr mentions 'q create'"
assert_exit 66 "$Q" receive nosuch
assert_exit 66 "$Q" stats nosuch
assert_exit 66 "$Q" peek nosuch
assert_exit 66 "$Q" ack nosuch m1.0123456789abcdef
assert_exit 66 "$Q" purge nosuch
assert_exit 66 "$Q" delete nosuch
assert_exit 66 "$Q" dlq list nosuch
assert_exit 66 "$Q" redrive nosuch
cmp_file "$T/before.q" "commands on a missing queue"
assert_exit 0 "$Q" send nosuch body --create
assert_exit 0 "$Q" list
assert_contains "$OUT" "nosuch" "send --create made the queue"
assert_exit 0 "$Q" stats nosuch --json
assert_eq 1 "$(jq .visible <<<"$OUT")" "send --create stored the message"

# A missing queue file: 66, and nothing is created.
for cmd in "list" "stats" "receive q1" "send q1 body" "peek q1"; do
  # shellcheck disable=SC2086
  assert_exit 66 "$Q" -f "$T/missing.q" $cmd
  [[ -e $T/missing.q || -e $T/missing.q-lock ]] && fail "q $cmd created $T/missing.q"
done
assert_contains "$ERR" "missing.q" "missing queue file: stderr names the file"
assert_exit 66 env Q_FILE="$T/missing.q" "$Q" list
# send --create makes the file (and its directories).
assert_exit 0 "$Q" -f "$T/new/dir/made.q" send fresh body --create
[[ -f $T/new/dir/made.q ]] || fail "send --create did not create the file in new directories"

# ---- too large: 65, nothing of the batch written ------------------------------------------
assert_exit 0 "$Q" create small --max-size 10
assert_exit 0 "$Q" send small first
stats_before=$(stats_json small | jq -c 'del(.oldest_age_ms)')
on_nats || cp "$Q_FILE" "$T/before.q"
assert_exit_in 65 $'ok\n0123456789X\nok2\n' "$Q" send small --lines
assert_contains "$ERR" "max size" "too large: stderr explains"
assert_eq "" "$OUT" "too large: no ids printed"
assert_exit 65 "$Q" send small 0123456789X
assert_exit_in 65 "$(head -c 100000 /dev/zero | tr '\0' x)" "$Q" send small
assert_eq "$stats_before" "$(stats_json small | jq -c 'del(.oldest_age_ms)')" "too large: stats unchanged"
cmp_file "$T/before.q" "send over max size"
assert_exit 0 "$Q" send small 0123456789   # exactly the limit
assert_eq 2 "$(stat_field small visible)" "a body of exactly --max-size bytes is accepted"

# The default max size holds on every backend (issue 23 item 4: a 1 MiB body
# was refused on NATS, whose max_payload is what the cluster holds): a body of
# exactly 1 MiB round-trips, one byte more is refused with the same words.
assert_exit 0 "$Q" create mib
assert_eq 1048576 "$("$Q" config mib --json | jq -r .max_size)" "the default max size is 1 MiB"
head -c 1048576 /dev/urandom >"$T/mib"
assert_exit 0 "$Q" send mib <"$T/mib"
assert_exit 0 "$Q" receive mib --json
jq -r '.body_base64 // (.body | @base64)' "$T/out" | base64 -d | cmp -s - "$T/mib" || fail "a 1 MiB body came back changed"
head -c 1 /dev/zero >>"$T/mib"
assert_exit 65 "$Q" send mib <"$T/mib"
assert_contains "$ERR" "is 1048577 bytes, over the queue's max size of 1048576 bytes; nothing was sent" \
  "one byte over 1 MiB: the file's words"

# Malformed attributes: 65.
on_nats || cp "$Q_FILE" "$T/before.q"
assert_exit 65 "$Q" send small body --attr novalue
assert_exit 65 "$Q" send small body --attr =value
cmp_file "$T/before.q" "malformed attributes"

# ---- queue full: 75, nothing written ------------------------------------------------------
assert_exit 0 "$Q" create bounded --max-depth 3
run_in $'1\n2\n' "$Q" send bounded --lines
assert_eq 0 "$RC" "sending 2 into max depth 3"
stats_before=$(stats_json bounded | jq -c 'del(.oldest_age_ms)')
on_nats || cp "$Q_FILE" "$T/before.q"
assert_exit_in 75 $'3\n4\n' "$Q" send bounded --lines
assert_contains "$ERR" "full" "queue full: stderr says full"
assert_eq "" "$OUT" "queue full: no ids printed"
assert_eq "$stats_before" "$(stats_json bounded | jq -c 'del(.oldest_age_ms)')" "queue full: stats unchanged"
cmp_file "$T/before.q" "send over max depth"
assert_exit 0 "$Q" send bounded 3
assert_exit 75 "$Q" send bounded 4
# In-flight and delayed messages count toward the depth too.
assert_exit 0 "$Q" receive bounded
r=$(cut -f2 <<<"$OUT")
assert_exit 75 "$Q" send bounded 4
assert_exit 0 "$Q" ack bounded "$r"
if nats_lacks delay; then
  skip_part "delayed messages (send --delay) are not on NATS yet"
else
  assert_exit 0 "$Q" send bounded 4 --delay 1h
  assert_exit 75 "$Q" send bounded 5
  assert_eq 4 "$(stat_field bounded sent)" "sent counter counts only the accepted sends"
fi

# ---- not a q file: 74, the file untouched, no lock file made --------------------------
printf 'just some text\nnot a queue\n' >"$T/text.q"
head -c 65536 /dev/urandom >"$T/random.q"
# Random bytes with LMDB's magic number where LMDB keeps it: still not a q file
# (LMDB itself looks at it, so a lock file may appear; the data must not change).
{ head -c 16 /dev/urandom; printf '\xde\xc0\xef\xbe'; head -c 8172 /dev/urandom; } >"$T/magic.q"
: >"$T/empty.q"
mkdir "$T/dir.q"
for f in text random magic empty; do
  cp "$T/$f.q" "$T/$f.copy"
  for cmd in "list" "stats" "receive q1" "send q1 body" "send q1 body --create" "create q1" \
             "peek q1" "purge q1"; do
    if [[ $f == empty && ( $cmd == create* || $cmd == *--create ) ]]; then
      continue  # an empty file may become a queue file
    fi
    # shellcheck disable=SC2086
    assert_exit 74 "$Q" -f "$T/$f.q" $cmd
    cmp -s "$T/$f.copy" "$T/$f.q" || fail "q $cmd changed the non-queue file $f.q"
    [[ $f != magic && -e $T/$f.q-lock ]] && { fail "q $cmd created $f.q-lock next to a non-queue file"; rm -f "$T/$f.q-lock"; }
  done
  assert_contains "$ERR" "$f.q" "not a q file: stderr names the file"
done
assert_exit 74 "$Q" -f "$T/dir.q" list
[[ -e $T/dir.q-lock ]] && fail "q list created dir.q-lock next to a directory"

# ---- nothing to receive: 1 ------------------------------------------------------------
assert_exit 0 "$Q" create idle
assert_exit 1 "$Q" receive idle
assert_eq "" "$OUT" "empty receive: no output"
assert_eq "" "$ERR" "empty receive: no error text"
assert_exit 1 "$Q" receive idle --json
assert_eq "" "$OUT" "empty receive --json: no output"
# The upper bounds catch a wait that ignores its limit; they stretch with
# Q_TEST_TIME_SCALE (ASan's process start-up), the lower bounds do not.
slack=$((1500 * ${Q_TEST_TIME_SCALE:-1}))
start=$(now_ms)
assert_exit 1 "$Q" receive idle --wait 200ms
elapsed=$(($(now_ms) - start))
((elapsed >= 190)) || fail "receive --wait 200ms on an empty queue returned after ${elapsed} ms (< 200 ms)"
((elapsed < slack)) || fail "receive --wait 200ms on an empty queue took ${elapsed} ms"
# A message that is only delayed is not receivable either.
if ! nats_lacks delay; then
  assert_exit 0 "$Q" send idle later --delay 1h
  assert_exit 1 "$Q" receive idle
  start=$(now_ms)
  assert_exit 1 "$Q" receive idle --wait 300ms
  elapsed=$(($(now_ms) - start))
  ((elapsed >= 290 && elapsed < slack)) || fail "receive --wait 300ms with only a delayed message took ${elapsed} ms"
fi

# ---- stale and malformed receipts for nack and extend -----------------------------------
assert_exit 0 "$Q" send q1 body
assert_exit 0 "$Q" receive q1
r=$(cut -f2 <<<"$OUT")
assert_exit 65 "$Q" nack q1 garbage
assert_exit 65 "$Q" extend q1 garbage --by 10s
assert_exit 0 "$Q" ack q1 "$r"
assert_exit 3 "$Q" nack q1 "$r"
assert_exit 3 "$Q" extend q1 "$r" --by 10s
assert_exit 64 "$Q" extend q1 "$r" --by 13h

# ---- busy: 69 when the writer lock is not granted in time; readers are not blocked ---------
if on_nats; then
  : # no writer lock on NATS: --lock-timeout bounds the wait for the cluster (test_nats_slice.sh)
elif command -v flock >/dev/null; then
  assert_exit 0 "$Q" create locked
  assert_exit 0 "$Q" send locked before
  cp "$Q_FILE" "$T/before.q"
  # q's writer lock is flock(2) on the queue file; hold it from another process
  # (one process, so that killing it by its pid releases the lock).
  ( exec 9<"$Q_FILE" && flock -x 9 && exec sleep 30 ) &
  holder=$!
  for _ in $(seq 100); do flock -n -x "$Q_FILE" true 2>/dev/null || break; sleep 0.01; done
  start=$(now_ms)
  assert_exit 69 "$Q" --lock-timeout 300ms send locked blocked
  elapsed=$(($(now_ms) - start))
  assert_contains "$ERR" "lock" "busy: stderr mentions the lock"
  ((elapsed >= 290 && elapsed < 2 * slack)) || fail "--lock-timeout 300ms gave up after ${elapsed} ms"
  assert_exit 69 env Q_LOCK_TIMEOUT=200ms "$Q" receive locked
  assert_exit 0 "$Q" stats locked --json   # readers need no writer lock
  assert_eq 1 "$(jq .visible <<<"$OUT")" "stats while the writer lock is held"
  assert_exit 0 "$Q" peek locked
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  cmp_file "$T/before.q" "commands refused as busy"
  assert_exit 0 "$Q" --lock-timeout 300ms send locked after
else
  missing_part "flock(1) (Debian: util-linux): the busy (69) checks did not run"
fi

# ---- permission denied: 77 (root may write anything, so as another user) ---------------------
assert_exit 0 "$Q" -f "$T/ro.q" create ro
chmod 0444 "$T/ro.q"
if [[ $(id -u) != 0 ]]; then
  assert_exit 77 "$Q" -f "$T/ro.q" send ro body
elif command -v setpriv >/dev/null; then
  # As root: the same as nobody (the directory must be searchable for that user).
  chmod 0755 "$T"
  assert_exit 77 setpriv --reuid=65534 --regid=65534 --clear-groups "$Q" -f "$T/ro.q" send ro body
  chmod 0700 "$T"
else
  missing_part "setpriv (Debian: util-linux), as root: the permission (77) check did not run"
fi
chmod 0644 "$T/ro.q"
