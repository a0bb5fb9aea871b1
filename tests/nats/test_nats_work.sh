#!/usr/bin/env bash
# q work on the NATS backend (issue 16) against a real 3-node cluster: a
# drain with -j 4 runs every message once; idempotency keys (ack_done,
# is_done: done records in the bucket) skip a repeat; heartbeats (extend)
# keep a slow command's message from going to another consumer; a waiting
# q work is woken by a send (the watch: a core NATS subscription), not by
# its 1 s poll; --exit-when-empty leaves delayed messages (next_delivery);
# and on a FIFO queue q work -j 4 never runs two messages of one group at once.
#   test_nats_work.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_test work "${1:?usage: test_nats_work.sh Q_BINARY}"
export Q_FILE="$urls/work" T

# ---- a drain with -j 4: every message run once ---------------------------------------
"$Q" create jobs --visibility-timeout 5s >/dev/null
for i in $(seq 1 20); do "$Q" send jobs "m$i" --attr "key=k$i" >/dev/null; done
cat >"$T/run.sh" <<'EOS'
#!/bin/sh
body=$(cat)
echo "$body" >>"$T/ran"
EOS
chmod +x "$T/run.sh"
"$Q" work jobs -j 4 --exit-when-empty -q --idempotency-key key -- "$T/run.sh" ||
  fail "q work drain: exit $?"
[[ $(sort "$T/ran" | uniq | wc -l) == 20 && $(wc -l <"$T/ran") == 20 ]] ||
  fail "ran $(wc -l <"$T/ran") commands for 20 messages: $(sort "$T/ran" | uniq -d | tr '\n' ' ')"
[[ $(counts jobs) == "0 0 0" ]] || fail "after the drain: $(counts jobs)"

# ---- idempotency keys: a repeat of a done key is acked without running -------------------
: >"$T/ran"
"$Q" send jobs again1 --attr key=k1 >/dev/null
"$Q" send jobs again2 --attr key=k2 >/dev/null
"$Q" send jobs fresh --attr key=k21 >/dev/null
"$Q" work jobs --exit-when-empty -q --idempotency-key key -- "$T/run.sh" || fail "q work repeat: exit $?"
[[ $(cat "$T/ran") == fresh ]] || fail "with done keys k1 and k2, ran: $(tr '\n' ' ' <"$T/ran")"
[[ $(counts jobs) == "0 0 0" ]] || fail "skipped repeats are acked: $(counts jobs)"

# ---- heartbeats: a command longer than the lease keeps its message -------------------------
: >"$T/ran"
"$Q" create slow --visibility-timeout 1s >/dev/null
"$Q" send slow long >/dev/null
cat >"$T/slow.sh" <<'EOS'
#!/bin/sh
cat >>"$T/ran"
echo >>"$T/ran"
sleep 3.5
EOS
chmod +x "$T/slow.sh"
"$Q" work slow -q --visibility-timeout 1s --exit-when-empty -- "$T/slow.sh" &
worker=$!
sleep 2
if out=$("$Q" receive slow --json); then fail "another consumer got the message under a heartbeat: $out"; fi
wait "$worker" || fail "q work with heartbeats: exit $?"
[[ $(grep -c long "$T/ran") == 1 ]] || fail "the slow command ran $(grep -c long "$T/ran") times"
[[ $(counts slow) == "0 0 0" ]] || fail "after the slow run: $(counts slow)"

# ---- --exit-when-empty leaves a delayed message (next_delivery) ---------------------------
"$Q" send slow later --delay 1m >/dev/null
start=$(now_ms)
"$Q" work slow -q --exit-when-empty -- "$T/run.sh" || fail "q work with only a delayed message: exit $?"
((($(now_ms) - start) < 5000 * scale)) || fail "q work --exit-when-empty waited for a delayed message"
[[ $(counts slow) == "0 0 1" ]] || fail "the delayed message: $(counts slow)"

# ---- the watch: a waiting q work is woken by a send ----------------------------------------
"$Q" create idle >/dev/null
: >"$T/ran"
cat >"$T/stamp.sh" <<'EOS'
#!/bin/sh
cat >/dev/null
date +%s%3N >>"$T/ran"
EOS
chmod +x "$T/stamp.sh"
"$Q" work idle -q -- "$T/stamp.sh" &
worker=$!
sleep 2
# Woken by the watch, the command starts some 25 ms after the send began (the
# send's own connection included); a deaf watch leaves q work to its 1 s poll
# (median ~800 ms), which a 1 s limit on the median let pass. So most trials
# (5 of 7) must start within WATCH_MS (200 ms, times Q_TEST_TIME_SCALE): a
# 1 s poll makes that about 1 time in 5 per trial, 5 of 7 about 1 run in 200.
WATCH_MS=$((200 * scale))
lat=() fast=0
for i in 1 2 3 4 5 6 7; do
  n=$(wc -l <"$T/ran")
  sent=$(now_ms)
  "$Q" send idle "w$i" >/dev/null
  deadline=$((sent + 5000 * scale))
  while (($(wc -l <"$T/ran") == n)) && (($(now_ms) < deadline)); do sleep 0.02; done
  lat+=($(($(tail -1 "$T/ran") - sent)))
  ((${lat[-1]} < WATCH_MS)) && fast=$((fast + 1))
  sleep 0.$((RANDOM % 9 + 1))
done
kill -TERM "$worker"
wait "$worker"
median=$(printf '%s\n' "${lat[@]}" | sort -n | sed -n 4p)
echo "q work started the command ${lat[*]} ms after each send (median ${median} ms; $fast of 7 under ${WATCH_MS} ms; without a watch it polls each 1000 ms)"
((fast >= 5)) || fail "q work started the command within ${WATCH_MS} ms of a send only $fast times of 7 (${lat[*]} ms): the watch did not wake it"

# ---- a queue's shared --rate: two q work processes together keep to it -------------------
# n starts at 5/s (no burst below 10/s) shared by both take at least n-1
# intervals from the first to the last; each process on a budget of its own
# would take half that. The stamps are the commands' own: on a loaded machine
# fork and exec delay some by hundreds of ms, and a fixed window (16 starts in
# >= 2.9 s) failed 1 run in 4. So the limit follows the starts made: the span
# must reach 3/4 of the shared minimum, (n-1) * 150 ms, which passes up to
# ~1 s of stamp delay and still fails a rate that is not shared (~(n/2-1) *
# 200 ms; seen failing so, with RateBudget::key made per process).
"$Q" create rated --rate 5/s >/dev/null
for i in $(seq 1 20); do "$Q" send rated "r$i" >/dev/null; done
: >"$T/ran"
"$Q" work rated -j 4 --exit-when-empty -q -- "$T/stamp.sh" &
w1=$!
"$Q" work rated -j 4 --exit-when-empty -q -- "$T/stamp.sh" &
w2=$!
wait "$w1" || fail "rated q work 1: exit $?"
wait "$w2" || fail "rated q work 2: exit $?"
n=$(wc -l <"$T/ran")
[[ $n == 20 ]] || fail "rated: ran $n of 20"
span=$(($(sort -n "$T/ran" | tail -1) - $(sort -n "$T/ran" | head -1)))
((span >= (n - 1) * 150)) ||
  fail "$n starts at a shared 5/s took only ${span} ms (two consumers together; limit $(((n - 1) * 150)) ms)"
echo "$n starts by two q work processes at --rate 5/s spanned ${span} ms (shared: at least $(((n - 1) * 200)), limit $(((n - 1) * 150)))"

# ---- FIFO: q work -j 4 never runs two messages of one group at once -------------------------
"$Q" create orders --fifo >/dev/null
for i in 1 2 3 4; do
  for g in a b; do "$Q" send orders --group "$g" "$g$i" >/dev/null; done
done
cat >"$T/one.sh" <<'EOS'
#!/bin/sh
body=$(cat)
group=${body%?}
if ! mkdir "$T/running-$group" 2>/dev/null; then echo "overlap in $group" >>"$T/overlaps"; fi
sleep 0.1
echo "$body" >>"$T/work-order"
rmdir "$T/running-$group"
EOS
chmod +x "$T/one.sh"
"$Q" work orders -j 4 --exit-when-empty -q -- "$T/one.sh" || fail "q work on a FIFO queue: exit $?"
[[ ! -e $T/overlaps ]] || fail "two messages of one group ran at once: $(cat "$T/overlaps")"
[[ $(grep a "$T/work-order" | tr '\n' ' ') == "a1 a2 a3 a4 " ]] || fail "group a: $(grep a "$T/work-order" | tr '\n' ' ')"
[[ $(grep b "$T/work-order" | tr '\n' ' ') == "b1 b2 b3 b4 " ]] || fail "group b: $(grep b "$T/work-order" | tr '\n' ' ')"

finish "NATS q work"
