#!/usr/bin/env bash
# Scenario 7, stuck and dead readers, and a stopped writer.
#
#   readers.sh Q [storm|dead-reader|stopped-writer]   (default: all)
#
# storm: hundreds of `q stats` / `q peek` / `q dlq list` processes, on a queue
#   big enough that their read transactions last, are SIGKILLed at random
#   moments while producers send and `q work` consumes. No command may fail with
#   "too many processes" (LMDB's readers full) or anything else, the reader table
#   holds no dead process afterwards, and the file stays small.
# dead-reader: a reader is killed inside its read transaction (the stall shim
#   stops it there, then SIGKILL) while a long-running `q work` drains a backlog
#   and no other q process opens the file. The dead reader's snapshot must not
#   make the file grow much beyond what the same work needs without it.
# stopped-writer: a q stopped (SIGSTOP) while it holds the writer lock. Other
#   writers (send, receive, ack) exit 69 after --lock-timeout, not later and
#   never hang; q work says it waits and goes on once the lock is free;
#   readers (stats, peek) still work at once; after
#   SIGCONT, or after a SIGKILL of the stopped writer, everything works again.
part=${2:-all}
set -- "$1"
source "$(dirname "$0")/lib.sh" "$@"
STALL=${TORTURE_SHIM_DIR:-}/libq_stall.so
[[ -f $STALL ]] || die "the stall shim is not built: set TORTURE_SHIM_DIR (tests/torture/run does)"
# The stalled processes preload the shim: they run the dynamic build ($QD).
use_dynamic_q
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

# wait_stopped PID: until the process is stopped (state T), at most 5 s.
wait_stopped() {
  local state end=$((SECONDS + 30 * ${Q_TEST_TIME_SCALE:-1}))
  while ((SECONDS < end)); do
    read -r _ _ state _ <"/proc/$1/stat" 2>/dev/null || return 1
    [[ $state == T ]] && return 0
    sleep 0.01
  done
  return 1
}

size_of() { stat -c %s "$1"; }

# ---- storm ---------------------------------------------------------------------------
if [[ $part == all || $part == storm ]]; then
  export Q_FILE=$T/storm.q
  "$Q" create s --max-receives 1 >/dev/null
  "$Q" create r >/dev/null
  # Dead letters to list, and a backlog to peek at: long read transactions.
  seq -f 'dead-%g' 1 1500 | "$Q" send s --lines -q
  "$Q" receive s -n 1500 --visibility-timeout 0 >/dev/null
  "$Q" receive s >/dev/null
  seq -f 'backlog-%g' 1 5000 | "$Q" send r --lines -q
  size0=$(size_of "$Q_FILE")
  ROUNDS=$(long_or_short 60 8)
  PER_ROUND=50
  "$Q" work r -j 2 -q --visibility-timeout 30s -- true </dev/null >/dev/null 2>"$T/work.err" &
  wpid=$!
  ( while [[ ! -e $T/stop ]]; do seq -f 'more-%g' 1 20 | "$Q" send r --lines -q || echo "send failed" >>"$T/send.err"; done ) &
  spid=$!
  mkdir -p "$T/readers"
  started=0 killed=0
  for ((round = 0; round < ROUNDS; round++)); do
    pids=()
    for ((i = 0; i < PER_ROUND; i++)); do
      # SIGKILL after 0-29 ms: before, during or after the read transaction.
      k=(timeout -s KILL "0.0$((RANDOM % 3))$((RANDOM % 10))")
      ((RANDOM % 5 == 0)) && k=()
      case $((RANDOM % 3)) in
        0) "${k[@]}" "$Q" stats >/dev/null 2>"$T/readers/$round.$i" & ;;
        1) "${k[@]}" "$Q" peek r -n 100000 >/dev/null 2>"$T/readers/$round.$i" & ;;
        2) "${k[@]}" "$Q" dlq list s -n 100000 >/dev/null 2>"$T/readers/$round.$i" & ;;
      esac
      pids+=($!)
    done
    started=$((started + PER_ROUND))
    for pid in "${pids[@]}"; do
      wait "$pid" 2>/dev/null
      rc=$?
      if ((rc == 137)); then
        killed=$((killed + 1))
      elif ((rc != 0)); then
        echo "reader exited $rc" >>"$T/readers.bad"
      fi
    done
  done 2>/dev/null  # (bash's "Killed" notices)
  touch "$T/stop"
  wait "$spid"
  kill -TERM "$wpid"; wait "$wpid"
  if grep -l . "$T"/readers/* >/dev/null 2>&1; then
    fail "readers printed errors: $(cat "$T"/readers/* | sort | uniq -c | head -n 5)"
  fi
  [[ -s $T/readers.bad ]] && fail "readers exited badly: $(sort "$T/readers.bad" | uniq -c | xargs)"
  [[ -s $T/send.err ]] && fail "producers failed $(wc -l <"$T/send.err") times during the reader storm"
  grep -qi "too many" "$T/work.err" && fail "q work: $(<"$T/work.err")"
  "$Q" stats >/dev/null || fail "q stats fails after the reader storm"
  check_reader_table "$Q_FILE"
  size1=$(size_of "$Q_FILE")
  # The queue holds about what it held (q work keeps up); killed readers may pin
  # old pages only until the next process opens the file.
  ((size1 <= size0 * 4 + 8 * 1024 * 1024)) ||
    fail "the file grew from $size0 to $size1 bytes during the reader storm"
  echo "readers (storm): $started readers started, $killed killed mid-run; file $size0 -> $size1 bytes"
fi

# ---- dead reader while q work drains alone --------------------------------------------------
# drain_backlog FILE WITH_DEAD_READER: bytes the file grew while q work drained 3000 messages.
drain_backlog() {
  local f=$1 dead=$2 wpid rpid
  export Q_FILE=$f
  "$Q" create r >/dev/null
  seq -f 'm%g' 1 10 | "$Q" send r --lines -q
  # q work opens the file first, and works through what is there; each command
  # run leaves a line in $done.
  local done=$f.done
  : >"$done"
  "$Q" work r -j 4 -q -- bash -c 'echo x >>"$0"' "$done" </dev/null >/dev/null 2>&1 &
  wpid=$!
  local i
  wait_lines "$done" 10 "q work on the first 10 messages"
  # Stop q work outside a write: stopped while holding the writer lock (the
  # flock on the file; after its last ack it may still poll with a receive),
  # it would make the backlog's send time out, and the drain wait for nothing.
  local tries
  for ((tries = 0; ; tries++)); do
    kill -STOP "$wpid"
    flock -n -x "$f" true 2>/dev/null && break
    kill -CONT "$wpid"
    ((tries < 1000)) || { fail "q work never let go of the writer lock"; break; }
    sleep 0.01
  done
  seq -f 'backlog-%g' 1 3000 | "$Q" send r --lines -q || fail "the backlog's send failed (exit $?)"
  if [[ $dead == yes ]]; then
    LD_PRELOAD=$STALL Q_STALL=read "$QD" stats r >/dev/null 2>&1 &
    rpid=$!
    wait_stopped "$rpid" || fail "the reader did not stop in its transaction"
    kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
  fi
  local before
  before=$(size_of "$f")
  kill -CONT "$wpid"
  # Wait for the 3010 commands, without opening the file meanwhile.
  wait_lines "$done" 3010 "q work draining the backlog"
  sleep 0.5   # (the last acks commit after the last command's line)
  local after
  after=$(size_of "$f")
  kill -TERM "$wpid"; wait "$wpid" 2>/dev/null
  local left
  left=$("$Q" stats r --json | jq '.visible + .in_flight')
  ((left == 0)) || fail "q work did not drain the backlog ($left left)"
  echo $((after - before))
}

if [[ $part == all || $part == dead-reader ]]; then
  grew_clean=$(drain_backlog "$T/clean.q" no)
  grew_dead=$(drain_backlog "$T/dead.q" yes)
  limit=$((grew_clean * 4 + 2 * 1024 * 1024))
  if ((grew_dead > limit)); then
    fail "a reader killed in its transaction made the file grow by $grew_dead bytes while q work" \
         "drained 3000 messages (without it: $grew_clean bytes): q work never clears dead readers"
  fi
  echo "readers (dead-reader): file growth while q work drains 3000 messages:" \
       "$grew_clean bytes clean, $grew_dead bytes with a dead reader (limit $limit)"
fi

# ---- a stopped writer --------------------------------------------------------------------------
# elapsed_ms CMD...: runs CMD, sets RC and MS.
elapsed_ms() {
  local t0=${EPOCHREALTIME/./}
  "$@" >"$T/out" 2>"$T/err" </dev/null
  RC=$?
  MS=$(((${EPOCHREALTIME/./} - t0) / 1000))
}

if [[ $part == all || $part == stopped-writer ]]; then
  export Q_FILE=$T/writer.q
  "$Q" create w >/dev/null
  seq -f 'm%g' 1 20 | "$Q" send w --lines -q
  receipt=$("$Q" receive w --json | jq -r .receipt)
  LD_PRELOAD=$STALL Q_STALL=write "$QD" send w "stuck-writer" >"$T/stuck.out" 2>&1 &
  stuck=$!
  wait_stopped "$stuck" || die "the writer did not stop"
  # Writers give up after --lock-timeout, with 69 and a message that says so.
  for cmd in "send w x" "receive w" "ack w $receipt" "nack w $receipt" "extend w $receipt --by 1m" \
             "purge w" "create v"; do
    read -r -a argv <<<"$cmd"
    elapsed_ms "$Q" --lock-timeout 1s "${argv[@]}"
    [[ $RC == 69 ]] || fail "q $cmd with a stopped writer: exit $RC, expected 69: $(<"$T/err")"
    ((MS >= 1000 && MS < 3000)) || fail "q $cmd with a stopped writer gave up after $MS ms (lock timeout 1s)"
    grep -q "busy" "$T/err" || fail "q $cmd: the message does not say busy: $(<"$T/err")"
  done
  elapsed_ms env Q_LOCK_TIMEOUT=2s "$Q" send w y
  [[ $RC == 69 ]] || fail "Q_LOCK_TIMEOUT=2s q send: exit $RC, expected 69"
  ((MS >= 2000 && MS < 4000)) || fail "Q_LOCK_TIMEOUT=2s q send gave up after $MS ms"
  # q work, long-running, does not give up its commands over a lock wait
  # (issue 17): it says it waits, keeps trying, and goes on after SIGCONT.
  timeout 60 "$Q" work w --lock-timeout 1s --max-messages 1 -- true 2>"$T/work.err" &
  worker=$!
  for ((i = 0; i < 400; i++)); do grep -q "writer lock" "$T/work.err" && break; sleep 0.05; done
  grep -q "writer lock" "$T/work.err" || fail "q work with a stopped writer does not report its wait: $(head -c 300 "$T/work.err")"
  kill -0 "$worker" 2>/dev/null || fail "q work with a stopped writer gave up: $(head -c 300 "$T/work.err")"
  # Readers do not wait.
  for cmd in "stats" "stats w --json" "peek w" "list" "dlq list w" "config w"; do
    read -r -a argv <<<"$cmd"
    elapsed_ms "$Q" --lock-timeout 1s "${argv[@]}"
    [[ $RC == 0 ]] || fail "q $cmd with a stopped writer: exit $RC: $(<"$T/err")"
    ((MS < 900)) || fail "q $cmd (a reader) waited $MS ms for a stopped writer"
  done
  # SIGCONT: the stopped send completes, and everything works.
  kill -CONT "$stuck"; wait "$stuck"
  [[ $? == 0 ]] || fail "the stopped send failed after SIGCONT: $(<"$T/stuck.out")"
  wait "$worker"
  [[ $? == 0 ]] || fail "q work did not go on after SIGCONT: $(head -c 300 "$T/work.err")"
  assert_exit 0 "$Q" --lock-timeout 1s send w after-cont
  # SIGKILL of a stopped writer releases the lock at once.
  LD_PRELOAD=$STALL Q_STALL=write "$QD" send w "killed-writer" >/dev/null 2>&1 &
  stuck=$!
  wait_stopped "$stuck" || die "the writer did not stop"
  kill -KILL "$stuck"; wait "$stuck" 2>/dev/null
  elapsed_ms "$Q" --lock-timeout 1s send w after-kill
  [[ $RC == 0 ]] || fail "send after the stopped writer was killed: exit $RC: $(<"$T/err")"
  ((MS < 900)) || fail "send after the stopped writer was killed waited $MS ms"
  "$Q" peek w -n 1000 --json | jq -r .body | grep -x killed-writer >/dev/null &&
    fail "the killed writer's message is in the queue"
  check_reader_table "$Q_FILE"
  echo "readers (stopped-writer): writers gave up with 69 after the lock timeout, q work waited and went on, readers went on"
fi
