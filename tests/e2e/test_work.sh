# q work: the consumer runner, with real processes and short timeouts.
source "$(dirname "$0")/lib.sh" "$@"

"$Q" create jobs --visibility-timeout 1s --max-receives 10 || die "create"

# ---- what the command gets ------------------------------------------------------
cat >"$T/show.sh" <<'EOF'
#!/bin/sh
{
  printf 'args=%s|%s\n' "$1" "$2"
  printf 'queue=%s id=%s count=%s\n' "$Q_QUEUE" "$Q_MESSAGE_ID" "$Q_RECEIVE_COUNT"
  printf 'receipt=%s\nsent=%s\nattr=%s\nfile=%s\n' "$Q_RECEIPT" "$Q_SENT_AT" "$Q_ATTR_MY_KEY" "$Q_FILE"
  printf 'body='; cat; printf '|\n'
} >>"$OUT_LOG"
EOF
chmod +x "$T/show.sh"
export OUT_LOG=$T/show.log
id=$(printf 'line one\nline two\n' | "$Q" send jobs --attr my-key=v1) || die "send"
assert_exit 0 "$Q" work jobs --exit-when-empty -q -- "$T/show.sh" '{}' 'a b'
log=$(<"$OUT_LOG")
assert_contains "$log" "args={}|a b" "arguments pass as given, {} is not special"
assert_contains "$log" "queue=jobs id=$id count=1" "Q_QUEUE, Q_MESSAGE_ID, Q_RECEIVE_COUNT"
assert_match "receipt=$id\.[0-9a-f]{16}" "$log" "Q_RECEIPT"
assert_match "sent=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z" "$log" "Q_SENT_AT"
assert_contains "$log" "attr=v1" "attribute my-key as Q_ATTR_MY_KEY"
assert_contains "$log" "file=$Q_FILE" "Q_FILE"
assert_contains "$log" $'body=line one\nline two\n|' "body on stdin, verbatim"
assert_eq 0 "$(stat_field jobs visible)" "acked after exit 0"
nats_lacks counters || assert_eq 1 "$(stat_field jobs acked)" "acked after exit 0"

# ---- failing twice, then succeeding: retried with backoff, then acked -------------
cat >"$T/flaky.sh" <<'EOF'
#!/bin/sh
date +%s%3N >>"$T/flaky.times"
if [ "$Q_RECEIVE_COUNT" -lt 3 ]; then echo "smtp 451 try $Q_RECEIVE_COUNT" >&2; exit 3; fi
EOF
chmod +x "$T/flaky.sh"
export T
"$Q" send jobs flaky >/dev/null
assert_exit 4 "$Q" work jobs --backoff-base 300ms --max-messages 3 -- "$T/flaky.sh"
assert_contains "$ERR" "smtp 451 try 1" "the command's stderr passes through"
assert_contains "$ERR" "failed (exit status 3)" "failures are noted"
assert_eq 3 "$(wc -l <"$T/flaky.times")" "three attempts"
mapfile -t times <"$T/flaky.times"
gap1=$((times[1] - times[0]))
gap2=$((times[2] - times[1]))
# Full jitter: the n-th retry waits up to base * 2^(n-1) (300 ms, then 600 ms).
((gap1 <= 300 + 400)) || fail "first retry after ${gap1} ms, over its 300 ms ceiling"
((gap2 <= 600 + 400)) || fail "second retry after ${gap2} ms, over its 600 ms ceiling"
if nats_lacks counters; then
  skip_part "lifetime counters (acked, nacked, ...) are not kept on NATS"
else
  assert_eq 2 "$(stat_field jobs acked)" "acked once it succeeded"
  assert_eq 2 "$(stat_field jobs nacked)" "two releases"
fi

# ---- exit 65 dead-letters at once, with the reason ----------------------------------
"$Q" send jobs poison >/dev/null
assert_exit 4 "$Q" work jobs --exit-when-empty -q -- sh -c 'echo "cannot parse order" >&2; exit 65'
run "$Q" dlq list jobs --json
assert_eq 1 "$(jq -r .receive_count <<<"$OUT")" "dead-lettered on the first try"
assert_contains "$(jq -r .reason <<<"$OUT")" "exit status 65: cannot parse order" "reason: status and stderr"
"$Q" dlq purge jobs >/dev/null

# ---- the last allowed receive: dead-lettered there, logged and counted as such ----
# (Issue 27: each final failure was logged "retry in 3ms", the summary said 0
# dead-lettered and the messages sat visible at their receive limit.) The
# summary's counts are what the queue's counters moved by during the run.
"$Q" create spent --max-receives 2 || die "create spent"
for i in 1 2 3 4 5 6 7 8 9; do "$Q" send spent "m$i" >/dev/null || die "send"; done
before=$(stats_json spent)
# -n 18: nine messages, two receives each; not --exit-when-empty, which may end
# the run while a release waits out its backoff (it drains what is visible).
assert_exit 4 "$Q" work spent -j 3 --backoff-base 10ms --backoff-cap 20ms -n 18 -- /bin/false
after=$(stats_json spent)
summary=$(grep '^q work spent: ' <<<"$ERR")
assert_match '^q work spent: 0 done, 9 failed, 9 dead-lettered, 0 skipped repeats in ' "$summary" \
  "nine failed releases, then nine dead letters at the second receive"
assert_eq 9 "$(grep -c 'retry in' <<<"$ERR")" "only the first failures are logged as retries"
assert_eq 9 "$(grep -c 'dead-lettered: receive 2 was the last allowed' <<<"$ERR")" \
  "each final failure is logged as a dead letter"
moved() { echo $(($(jq ".$1" <<<"$after") - $(jq ".$1" <<<"$before"))); }
[[ $summary =~ ([0-9]+)\ done,\ ([0-9]+)\ failed,\ ([0-9]+)\ dead-lettered ]] || fail "summary: $summary"
assert_eq "${BASH_REMATCH[1]}" "$(moved acked)" "done = the acked counter's move"
assert_eq "${BASH_REMATCH[2]}" "$(moved nacked)" "failed = the nacked counter's move"
assert_eq "${BASH_REMATCH[3]}" "$(moved dead_lettered)" "dead-lettered = the dead_lettered counter's move"
assert_eq 0 "$(jq '.visible + .delayed + .in_flight' <<<"$after")" "none left at its receive limit"
assert_eq 9 "$(jq .dead <<<"$after")" "all nine in the dead letters"
"$Q" delete spent --yes >/dev/null || die "delete spent"

# ---- a signal is a failure; --timeout kills ---------------------------------------
"$Q" send jobs slowpoke >/dev/null
start=$(now_ms)
assert_exit 4 "$Q" work jobs --timeout 300ms --kill-after 200ms --max-messages 1 -q -- sh -c 'trap "" TERM; sleep 5'
elapsed=$(($(now_ms) - start))
# Under ASan (Q_TEST_TIME_SCALE) up to 4.5 s: still under the command's 5 s.
kill_limit=$((3000 * ${Q_TEST_TIME_SCALE:-1} < 4500 ? 3000 * ${Q_TEST_TIME_SCALE:-1} : 4500))
((elapsed < kill_limit)) || fail "a command past --timeout was not killed (took ${elapsed} ms)"
run "$Q" dlq list jobs --json
assert_eq "" "$OUT" "a timeout is a failure to retry, not a dead letter"
# (One stats read: the release has a 0-1 s jittered delay, so the message moves
# from delayed to visible at any moment; two separate reads, visible first, then
# delayed, could see it in neither, the "ASan flake".)
assert_eq 1 "$(stats_json jobs | jq '.visible + .delayed')" "released for a retry"
"$Q" purge jobs >/dev/null

# ---- heartbeat: a command outliving the visibility timeout runs once -----------------
: >"$T/runs"
"$Q" send jobs long >/dev/null
"$Q" work jobs --max-messages 1 -q -- sh -c 'echo A >>"$T/runs"; sleep 2.5' &
a=$!
sleep 0.3
timeout -s INT 3 "$Q" work jobs -q -- sh -c 'echo B >>"$T/runs"'
wait $a || fail "the first runner failed"
assert_eq "A" "$(cat "$T/runs")" "the message ran once, the heartbeat kept the lease"
assert_eq 0 "$(($(stat_field jobs visible) + $(stat_field jobs in_flight)))" "and was acked"
"$Q" purge jobs >/dev/null

# ---- a runner killed with SIGKILL: the message comes back to another runner ----------
: >"$T/runs"
"$Q" send jobs orphan >/dev/null
"$Q" work jobs -q -- sh -c 'echo "first $Q_RECEIVE_COUNT" >>"$T/runs"; exec sleep 30' &
victim=$!
for _ in $(seq 50); do [[ -s $T/runs ]] && break; sleep 0.1; done
kill -KILL $victim
wait $victim 2>/dev/null
start=$(now_ms)
assert_exit 0 "$Q" work jobs --max-messages 1 -q -- sh -c 'echo "second $Q_RECEIVE_COUNT" >>"$T/runs"'
assert_eq $'first 1\nsecond 2' "$(cat "$T/runs")" "redelivered to the next runner"
(($(now_ms) - start < 5000)) || fail "redelivery took too long"

# ---- SIGTERM: running commands finish, the rest are released at once ------------------
for i in 1 2 3; do "$Q" send jobs "stop-$i" >/dev/null; done
: >"$T/runs"
"$Q" work jobs --grace 5s -q -- sh -c 'echo "start $Q_MESSAGE_ID" >>"$T/runs"; sleep 0.6; echo "end" >>"$T/runs"' &
w=$!
for _ in $(seq 50); do [[ -s $T/runs ]] && break; sleep 0.05; done
kill -TERM $w
wait $w
assert_eq 0 $? "graceful stop exits 0"
assert_eq "start end" "$(awk '{print $1}' "$T/runs" | tr '\n' ' ' | sed 's/ $//')" "the running command finished, no new one started"
assert_eq 2 "$(stat_field jobs visible)" "the others are still visible"
assert_eq 0 "$(stat_field jobs in_flight)" "nothing left in flight"

# Past --grace the unfinished are released at once (not after the timeout).
"$Q" config jobs --visibility-timeout 1m >/dev/null
"$Q" purge jobs >/dev/null
"$Q" send jobs stubborn >/dev/null
: >"$T/runs"
"$Q" work jobs --grace 300ms -q -- sh -c 'echo started >>"$T/runs"; sleep 20' &
w=$!
for _ in $(seq 50); do [[ -s $T/runs ]] && break; sleep 0.05; done
kill -TERM $w
wait $w
assert_eq 0 $? "exit 0 after releasing"
assert_eq 1 "$(stat_field jobs visible)" "released: visible again at once"
# SIGINT (Ctrl-C) stops the same way, on a file and on NATS.
: >"$T/runs"
"$Q" work jobs --grace 300ms -q -- sh -c 'echo started >>"$T/runs"; sleep 20' &
w=$!
for _ in $(seq 50); do [[ -s $T/runs ]] && break; sleep 0.05; done
kill -INT $w
wait $w
assert_eq 0 $? "exit 0 after releasing (SIGINT)"
assert_eq 1 "$(stat_field jobs visible)" "released at SIGINT: visible again at once"
"$Q" config jobs --visibility-timeout 1s >/dev/null
"$Q" purge jobs >/dev/null

# ---- idempotency keys ----------------------------------------------------------------
if nats_lacks idempotency; then
  skip_part "idempotency keys of q work are not on NATS yet"
else
  : >"$T/runs"
  "$Q" send jobs --attr order=A1 "first A1" >/dev/null
  assert_exit 0 "$Q" work jobs --idempotency-key order --exit-when-empty -q -- sh -c 'cat >>"$T/runs"; echo >>"$T/runs"'
  "$Q" send jobs --attr order=A1 "repeat A1" >/dev/null
  "$Q" send jobs --attr order=B2 "B2" >/dev/null
  assert_exit 0 "$Q" work jobs --idempotency-key order --exit-when-empty -- sh -c 'cat >>"$T/runs"; echo >>"$T/runs"'
  assert_contains "$ERR" "1 skipped repeats" "the repeat is counted as skipped"
  assert_eq $'first A1\nB2' "$(cat "$T/runs")" "a repeated key is acked without running"
  assert_eq 0 "$(stat_field jobs visible)" "the repeat was acked"
fi

# ---- cron mode and usage errors --------------------------------------------------------
assert_exit 0 "$Q" work jobs --exit-when-empty -q -- true
for i in 1 2 3; do "$Q" send jobs "m$i" >/dev/null; done
assert_exit 0 "$Q" work jobs --max-messages 2 -q -- true
assert_eq 1 "$(stat_field jobs visible)" "--max-messages stops after N"
assert_exit 64 "$Q" work jobs -- no-such-command-anywhere
assert_contains "$ERR" "no-such-command-anywhere" "names the missing command"
assert_exit 64 "$Q" work jobs
assert_exit 66 "$Q" work nosuchqueue -- true

# ---- a shared --rate holds for all runners together -------------------------------------
"$Q" create limited --rate 20/s --visibility-timeout 30s || die "create limited"
seq 200 | "$Q" send limited --lines -q
: >"$T/starts"
pids=()
for r in $(seq 10); do
  "$Q" work limited -j 4 -q -- sh -c 'date +%s%3N >>"$T/starts"' &
  pids+=($!)
done
# Until 40 starts (2 s at 20/s), not a fixed time: under ASan or at load the
# runners take seconds to begin.
starts() { (($(wc -l <"$T/starts") >= 40)); }
wait_for 30 starts || true
kill -TERM "${pids[@]}"
wait "${pids[@]}"
n=$(wc -l <"$T/starts")
((n >= 30)) || die "only $n starts in $((30 * ${Q_TEST_TIME_SCALE:-1})) s at 20/s"
# The stamps are the commands' own: on a loaded machine fork and exec bunch
# some (26 in one second was seen on a file at load 10). So the limits
# follow the starts made, with room for that: over the whole span at most
# 1.25 x 20/s + the burst of 3, and no second over twice the rate. Ten
# runners not sharing the rate would start 200/s.
span=$(($(sort -n "$T/starts" | tail -1) - $(sort -n "$T/starts" | head -1)))
((n * 1000 <= 25 * span + 3000)) || fail "$n starts in $span ms under a shared 20/s limit"
max=$(sort -n "$T/starts" | awk '{ t[NR] = $1 } END {
  best = 0; j = 1
  for (i = 1; i <= NR; i++) { while (t[i] - t[j] >= 1000) j++; if (i - j + 1 > best) best = i - j + 1 }
  print best }')
((max <= 43)) || fail "$max starts within one second under a shared 20/s limit"
echo "rate: $n starts in $span ms, at most $max in any second" >&2

# ---- a rate change resets the shared budget, on every backend ----------------------------
# Issue 23 item 4: on NATS the hour's wait earned at 1/h held back starts at
# 200/s (the reset lived in the file's code only). Five messages at 200/s
# take a few ms; the limit only catches a wait that was not reset.
"$Q" create slowrate --rate 1/h || die "create slowrate"
seq 6 | "$Q" send slowrate --lines -q
assert_exit 0 "$Q" work slowrate -n 1 -q -- true
assert_exit 0 "$Q" config slowrate --rate 200/s
started=$(now_ms)
assert_exit 0 timeout $((20 * ${Q_TEST_TIME_SCALE:-1})) "$Q" work slowrate --exit-when-empty -q -- true
echo "rate change: 5 starts $(($(now_ms) - started)) ms after 1/h became 200/s" >&2
assert_eq 0 "$(stat_field slowrate visible)" "200/s after 1/h: every message started"
