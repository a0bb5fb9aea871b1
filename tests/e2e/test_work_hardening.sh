# q work under signals, lock waits, odd environments and odd flags: the
# regressions of issues 12 (breaks 4, 6, 14) and 17 (section 4). Every wait
# polls for a state; the limits are generous, for a loaded machine.
source "$(dirname "$0")/lib.sh" "$@"
export T

# wait_until SECONDS CMD...: poll CMD every 50 ms until it succeeds; false on timeout.
wait_until() {
  local limit=$(($1 * 20))
  shift
  for ((i = 0; i < limit; i++)); do
    "$@" && return 0
    sleep 0.05
  done
  return 1
}
alive() { kill -0 "$1" 2>/dev/null; }
dead() { ! kill -0 "$1" 2>/dev/null; }
exists() { [[ -e $1 ]]; }
contains() { grep -q -- "$2" "$1" 2>/dev/null; }

# ---- issue 12 break 4: a message is released only once its command has exited -------
# The command ignores SIGTERM: after --grace it gets SIGTERM (ignored), SIGKILL
# --kill-after later, and only then is the message released. A second runner,
# started at the SIGTERM, must not run it while the first command lives.
"$Q" create stop --visibility-timeout 1m || die "create stop"
"$Q" send stop stubborn >/dev/null
: >"$T/runs"
"$Q" work stop --grace 300ms --kill-after 1s -- sh -c \
  'trap "" TERM; echo $$ >"$T/a.pid"; echo "A start" >>"$T/runs"; while :; do sleep 0.05; done' \
  2>"$T/a.err" &
a=$!
wait_until 60 exists "$T/a.pid" || die "the first command never started"
apid=$(<"$T/a.pid")
kill -TERM $a
timeout -s INT 90 "$Q" work stop --max-messages 1 -q -- sh -c \
  'if kill -0 "$(cat "$T/a.pid")" 2>/dev/null; then echo "B overlap" >>"$T/runs"; else echo "B alone" >>"$T/runs"; fi' &
b=$!
wait $a
assert_eq 0 $? "a graceful stop exits 0"
dead "$apid" || fail "q work exited while its command (pid $apid) still runs"
kill -KILL "$apid" 2>/dev/null
wait $b
assert_eq $'A start\nB alone' "$(cat "$T/runs")" "the second runner ran the message only after the first command was gone"
assert_contains "$(cat "$T/a.err")" "1 released at stop" "the message was released, once its command was killed"
assert_eq 0 "$(($(stat_field stop visible) + $(stat_field stop in_flight)))" "the second runner acked it"

# A second signal stops at once: the lease is left to run out, never released
# under a live command.
"$Q" send stop stubborn-again >/dev/null
rm -f "$T/a.pid"
"$Q" work stop --grace 20s --kill-after 20s -- sh -c \
  'trap "" TERM; echo $$ >"$T/a.pid"; while :; do sleep 0.05; done' 2>"$T/a2.err" &
a=$!
wait_until 60 exists "$T/a.pid" || die "the command never started"
apid=$(<"$T/a.pid")
kill -TERM $a
wait_until 60 contains "$T/a2.err" "stopping" || fail "the first signal was not noted"
kill -TERM $a
wait $a
assert_eq 1 "$(stat_field stop in_flight)" "stopped at once: the lease is kept, not released, while the command may run"
kill -KILL -- "-$apid" 2>/dev/null
"$Q" purge stop >/dev/null

# ---- issue 12 break 6: each variable once, with this run's value ----------------------
"$Q" create envq || die "create envq"
id=$("$Q" send envq --attr a-b=first --attr a_b=second --attr x=y body) || die "send"
Q_RECEIPT=old Q_MESSAGE_ID=m999 Q_QUEUE=other Q_FILE=/elsewhere.q Q_RECEIVE_COUNT=9 \
  Q_SENT_AT=never Q_ATTR_X=old Q_ATTR_STALE=1 \
  "$Q" -f "$Q_FILE" work envq --exit-when-empty -q -- env >"$T/env.out" || fail "q work env failed"
dups=$(cut -d= -f1 "$T/env.out" | sort | uniq -d | tr '\n' ' ')
assert_eq "" "$dups" "no variable appears twice"
grep -q "^Q_MESSAGE_ID=$id\$" "$T/env.out" || fail "Q_MESSAGE_ID is this message's: $(grep ^Q_ "$T/env.out")"
grep -Eq "^Q_RECEIPT=$id\.[0-9a-f]{16}\$" "$T/env.out" || fail "Q_RECEIPT is this delivery's"
grep -q "^Q_QUEUE=envq\$" "$T/env.out" || fail "Q_QUEUE is this queue"
grep -q "^Q_FILE=$Q_FILE\$" "$T/env.out" || fail "Q_FILE is this file"
grep -q "^Q_RECEIVE_COUNT=1\$" "$T/env.out" || fail "Q_RECEIVE_COUNT is this delivery's"
grep -q "^Q_ATTR_A_B=second\$" "$T/env.out" || fail "colliding attribute keys: the last one wins"
grep -q "^Q_ATTR_X=y\$" "$T/env.out" || fail "Q_ATTR_X is this message's"
grep -q "^Q_ATTR_STALE=" "$T/env.out" && fail "an inherited Q_ATTR_ variable is dropped"

# ---- issue 12 break 14: an execve failure is recorded with its errno ---------------------
# A small stack limit makes the limit on arguments and environment 128 KiB; q work's
# own environment fits, the command's (plus the attributes) does not: E2BIG.
# (--max-receives 1, no backoff: dead-lettered at the next receive, reason kept.)
"$Q" create big --max-receives 1 || die "create big"
args=()
for i in $(seq 40); do args+=(--attr "k$i=$(printf '%01000d' 0)"); done
"$Q" send big "${args[@]}" body >/dev/null || die "send with 40 KB of attributes"
(
  ulimit -s 512
  export FILLER=$(printf '%0100000d' 0)
  exec "$Q" work big --backoff-base 0 --exit-when-empty -- true
) 2>"$T/big.err"
assert_eq 4 $? "a command that cannot run is a failure (exit 4)"
reason=$("$Q" dlq list big --json | jq -r .reason)
assert_contains "$reason" "Argument list too long" "the reason names the errno: $reason"
assert_contains "$(cat "$T/big.err")" "Argument list too long" "so does the note"

# ---- issue 17 §4: flags are validated before the first receive ----------------------------
"$Q" create flags || die "create flags"
for bad in "--visibility-timeout 13h" "--visibility-timeout 0" "--visibility-timeout 200ms" \
           "--timeout 0" "--idempotency-window 0" "--max-messages 0"; do
  read -r -a argv <<<"$bad"
  assert_exit 64 timeout -s KILL 10 "$Q" work flags "${argv[@]}" -- true
  assert_contains "$ERR" "${argv[0]}" "the error names the flag ($bad)"
done

# ---- issue 17 §4: a visibility timeout too short for a heartbeat is clamped -----------
# (the queue's own 0s): one runner never runs a FIFO message twice at once.
"$Q" create fz --fifo --visibility-timeout 0 || die "create fz"
"$Q" send fz --group g one >/dev/null
: >"$T/fz.runs"
assert_exit 0 timeout -s INT 90 "$Q" work fz -j 4 --exit-when-empty -- sh -c 'echo start >>"$T/fz.runs"; sleep 1.5'
assert_eq 1 "$(wc -l <"$T/fz.runs")" "the message ran once, not several times at once"
assert_contains "$ERR" "visibility timeout" "the clamp is said"

# The next two parts hold the queue file's writer lock (an flock on the file),
# which a nats:// location does not have: skipped there, saying so.
if on_nats; then
  skip_part "on NATS: --timeout against a writer-lock wait, and q work across long writer-lock waits, need a queue file's writer lock"
else
# ---- issue 17 §4: --timeout counts from the fork, not from before a lock wait ------------
# The message becomes visible while another process holds the writer lock for
# longer than --timeout; the command (0.2 s) must not be killed for the wait.
"$Q" create tq || die "create tq"
"$Q" work tq --timeout 2s --max-messages 1 -- sh -c 'sleep 0.2' 2>"$T/tq.err" &
w=$!
"$Q" send tq --delay 2s late >/dev/null
rm -f "$T/locked"
flock "$Q_FILE" sh -c 'touch "$T/locked"; sleep 6' &
holder=$!
wait_until 60 exists "$T/locked" || true
[[ -e $T/locked ]] || die "the lock helper never got the lock"
wait $holder
wait $w
assert_eq 0 $? "the command was not timed out by the lock wait: $(cat "$T/tq.err")"

# hold_writer_lock: takes the queue file's writer lock (as q does, an flock on
# the file) in the background until $T/release exists; sets $holder.
hold_writer_lock() {
  rm -f "$T/release" "$T/locked2"
  flock "$Q_FILE" sh -c 'touch "$T/locked2"; while [ ! -e "$T/release" ]; do sleep 0.05; done' &
  holder=$!
  wait_until 60 exists "$T/locked2" || die "the lock helper never got the lock"
}

# ---- issue 17 §4: a long writer-lock wait never ends q work (no exit 69) -------------------
# Held longer than --lock-timeout, both before a receive and before an ack; the
# running command is never abandoned.
"$Q" create lw || die "create lw"
"$Q" send lw one >/dev/null
rm -f "$T/go" "$T/started" "$T/ended" "$T/release"
"$Q" --lock-timeout 300ms work lw --max-messages 1 -- sh -c \
  'touch "$T/started"; while [ ! -e "$T/go" ]; do sleep 0.05; done; touch "$T/ended"' 2>"$T/lw.err" &
w=$!
wait_until 60 exists "$T/started" || die "the command never started"
hold_writer_lock
touch "$T/go"
wait_until 60 exists "$T/ended" || fail "the command did not finish"
wait_until 60 contains "$T/lw.err" "writer lock" || fail "the wait is not reported: $(cat "$T/lw.err")"
alive $w || fail "q work ended during the lock wait: $(cat "$T/lw.err")"
touch "$T/release"
wait $holder
wait $w
assert_eq 0 $? "q work went on after the wait: $(cat "$T/lw.err")"
assert_eq 1 "$(stat_field lw acked)" "the message was acked once the lock was free"

# Before the first receive too.
"$Q" send lw two >/dev/null
hold_writer_lock
"$Q" --lock-timeout 300ms work lw --max-messages 1 -- true 2>"$T/lw2.err" &
w=$!
wait_until 60 contains "$T/lw2.err" "writer lock" || fail "the wait is not reported: $(cat "$T/lw2.err")"
alive $w || fail "q work ended during the lock wait: $(cat "$T/lw2.err")"
touch "$T/release"
wait $holder
wait $w
assert_eq 0 $? "q work took the message after the wait: $(cat "$T/lw2.err")"
fi

# ---- issue 17 §4: the command starts with default signal dispositions and no mask --------
"$Q" create sig || die "create sig"
"$Q" send sig one >/dev/null
# q work is started with TERM, INT and CHLD blocked, every other signal at its
# default (a background job of a script starts with SIGINT and SIGQUIT ignored,
# which q work rightly passes on) but SIGPIPE and SIGXFSZ, which q ignores itself.
cat >"$T/blocked.py" <<'EOF'
import os, signal, sys
for s in range(1, signal.NSIG):
    try:
        signal.signal(s, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD})
os.execv(sys.argv[1], sys.argv[1:])
EOF
python3 "$T/blocked.py" "$Q" work sig --max-messages 1 -q -- grep -E '^Sig(Blk|Ign)' /proc/self/status >"$T/sig.out"
assert_eq 0 $? "q work ran with an inherited signal mask"
assert_contains "$(cat "$T/sig.out")" "SigBlk:	0000000000000000" "the command's signal mask is empty: $(cat "$T/sig.out")"
assert_contains "$(cat "$T/sig.out")" "SigIgn:	0000000000000000" "the command ignores nothing q work set to ignore: $(cat "$T/sig.out")"

# A SIGTERM right after the fork (a --timeout of 1 ms) is never lost: every
# command dies of it, none runs to its end.
for i in $(seq 8); do "$Q" send sig "t$i" >/dev/null; done
: >"$T/sig.runs"
timeout -s INT 120 "$Q" work sig --timeout 1ms --kill-after 60s --max-messages 8 -q -- \
  sh -c 'sleep 3; echo "ran to the end" >>"$T/sig.runs"'
assert_eq "" "$(cat "$T/sig.runs")" "a SIGTERM between fork and exec was lost"
