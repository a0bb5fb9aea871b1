#!/usr/bin/env bash
# receive --wait: wakes within milliseconds of a send by another process.
source "$(dirname "$0")/lib.sh" "$@"

# bg_receive NAME ARGS...: start `q receive ARGS` in the background; its stdout,
# stderr, exit code, pid and end time (ms) go to $T/NAME.{out,err,rc,pid,end}.
bg_receive() {
  local name=$1
  shift
  rm -f "$T/$name".*
  (
    "$Q" receive "$@" >"$T/$name.out" 2>"$T/$name.err" &
    echo $! >"$T/$name.pid"
    wait $!
    echo $? >"$T/$name.rc"
    now_ms >"$T/$name.end"
  ) &
  BG_PID=$!
  while [[ ! -s $T/$name.pid ]]; do sleep 0.01; done
}

# wait_bg NAME LIMIT_MS: wait for the background receive NAME, at most LIMIT_MS
# after $start; if it takes longer, stop it and return 1.
wait_bg() {
  local name=$1 limit=$2 pid
  pid=$(cat "$T/$name.pid")
  while [[ ! -e $T/$name.end ]]; do
    if (($(now_ms) - start > limit)); then
      kill "$pid" 2>/dev/null
      wait 2>/dev/null
      return 1
    fi
    sleep 0.02
  done
  return 0
}

# ---- a send by another process wakes the waiting receiver -----------------------------------
# The doorbell (libq/lmdb/bell.cpp: FUTEX_WAKE at each commit) wakes a waiting
# receive within about a millisecond of the send; without it the receive
# would find the message only at its next look at the file (every 100 ms,
# Bell::kSlice), which a limit of seconds lets pass. So the wake is timed on
# q's own clocks, from the message's sent_at to its last_received_at (no
# process start or exit in it; the send runs --no-sync, so no fsync between
# its sent_at and its commit either), and most of the trials (5 of 7) must take
# under WAKE_MS (20 ms, times Q_TEST_TIME_SCALE): a receive woken only by the
# 100 ms look makes that 1 time in 5 per trial, so 5 of 7 about 1 run in 200.
# Repeated on fresh queues: a lost wake-up may be a race that only shows now
# and then.
scale=${Q_TEST_TIME_SCALE:-1}
WAKE_MS=$((20 * scale))
iso_ms() { date -d "$1" +%s%3N; }
# waiting PID: the process sleeps in a futex (the doorbell, or on NATS its
# wait for the pull), so a send now must wake it.
waiting() { [[ $(cat "/proc/$1/wchan" 2>/dev/null) == *futex* ]]; }
fast=0 lat=()
for trial in 1 2 3 4 5 6 7; do
  qn=wake$trial
  assert_exit 0 "$Q" create $qn
  start=$(now_ms)
  bg_receive $qn $qn --wait 10s --json
  wait_for 5 waiting "$(cat "$T/$qn.pid")" || echo "trial $trial: the receive did not show a futex wait ($(cat "/proc/$(cat "$T/$qn.pid")/wchan" 2>/dev/null)); sending anyway"
  [[ -e $T/$qn.end ]] && fail "trial $trial: receive --wait 10s returned before anything was sent (exit $(cat "$T/$qn.rc"))"
  sent_at=$(now_ms)
  assert_exit 0 "$Q" --no-sync send $qn "wake-up $trial"
  id=$OUT
  # The message must arrive well before the 10 s wait ends.
  start=$sent_at
  if wait_bg $qn 2000; then
    assert_eq 0 "$(cat "$T/$qn.rc")" "trial $trial: long poll exits 0 when a message came"
    assert_eq "$id" "$(jq -r .id <"$T/$qn.out")" "trial $trial: long poll received the message sent meanwhile"
    assert_eq "wake-up $trial" "$(jq -r .body <"$T/$qn.out")" "trial $trial: long poll body"
    assert_eq "" "$(cat "$T/$qn.err")" "trial $trial: long poll: no error text"
    ms=$(($(iso_ms "$(jq -r .last_received_at <"$T/$qn.out")") - $(iso_ms "$(jq -r .sent_at <"$T/$qn.out")")))
    lat+=("$ms")
    ((ms < WAKE_MS)) && fast=$((fast + 1))
  else
    fail "trial $trial: q receive $qn --wait 10s did not wake up within 2 s of a send by another process"
  fi
done
echo "woken ${lat[*]} ms after each send (sent_at to last_received_at); $fast of 7 under ${WAKE_MS} ms"
((fast >= 5)) || fail "only $fast of 7 waiting receives were woken within ${WAKE_MS} ms of the send (${lat[*]} ms): the doorbell did not wake them, they found the message at a later look"

# ---- a send to another queue does not satisfy the wait -----------------------------------
assert_exit 0 "$Q" create lp
assert_exit 0 "$Q" create elsewhere
start=$(now_ms)
bg_receive other lp --wait 1s
sleep 0.2
assert_exit 0 "$Q" send elsewhere not-for-lp
if ! wait_bg other 5000; then
  fail "q receive lp --wait 1s was still waiting after 5 s"
else
  assert_eq 1 "$(cat "$T/other.rc")" "a send to another queue: the waiting receive ends empty (exit 1)"
  assert_eq "" "$(cat "$T/other.out")" "a send to another queue: nothing received"
  took=$(($(cat "$T/other.end") - start))
  ((took >= 950)) || fail "receive --wait 1s returned after ${took} ms (a send to another queue ended the wait)"
fi
assert_eq 1 "$(stat_field elsewhere visible)" "the other queue's message is still there"

# ---- a delayed message: the wait ends when it becomes visible -------------------------------
if nats_lacks delay; then
  skip_part "delayed messages (send --delay) are not on NATS yet"
else
  assert_exit 0 "$Q" create delayed
  assert_exit 0 "$Q" send delayed later --delay 400ms
  start=$(now_ms)
  bg_receive delayed delayed --wait 5s --json
  if ! wait_bg delayed 4000; then
    fail "q receive delayed --wait 5s did not return within 4 s for a message delayed 400ms"
  else
    assert_eq 0 "$(cat "$T/delayed.rc")" "wait for a delayed message: exit 0"
    assert_eq "later" "$(jq -r .body <"$T/delayed.out")" "wait for a delayed message: body"
    took=$(($(cat "$T/delayed.end") - start))
    ((took >= 300 && took < 2000)) || fail "wait for a message delayed 400ms took ${took} ms"
  fi
fi

# ---- an expiring lease: the wait ends when the message is visible again --------------------
assert_exit 0 "$Q" create leased
assert_exit 0 "$Q" send leased job
assert_exit 0 "$Q" receive leased --visibility-timeout 400ms
start=$(now_ms)
bg_receive lease leased --wait 5s --json
if ! wait_bg lease 4000; then
  fail "q receive leased --wait 5s did not return within 4 s for a lease of 400ms"
else
  assert_eq 0 "$(cat "$T/lease.rc")" "wait for an expiring lease: exit 0"
  assert_eq 2 "$(jq -r .receive_count <"$T/lease.out")" "wait for an expiring lease: redelivery"
  took=$(($(cat "$T/lease.end") - start))
  ((took >= 300 && took < 2000)) || fail "wait for a lease of 400ms took ${took} ms"
fi

# ---- two waiting receivers, two messages: each gets one --------------------------------------
assert_exit 0 "$Q" create pair
start=$(now_ms)
bg_receive w1 pair --wait 10s --json
bg_receive w2 pair --wait 10s --json
sleep 0.2
assert_exit_in 0 $'one\ntwo\n' "$Q" send pair --lines
start=$(now_ms)
for w in w1 w2; do
  if wait_bg $w 2000; then
    assert_eq 0 "$(cat "$T/$w.rc")" "waiting receiver $w: exit 0 (a message)"
  else
    fail "waiting receiver $w of 2 did not get a message within 2 s of the send"
  fi
done
dups=$(cat "$T/w1.out" "$T/w2.out" 2>/dev/null | jq -r .body | sort | uniq -d)
assert_eq "" "$dups" "no message delivered to both waiting receivers"
