# Triage and inspection (issue 15): q show with the attempt history, pause and
# resume (and q work --trip), dead letters grouped by how they failed,
# destructive commands' --dry-run and confirmation, import --skip-existing, ack
# without receipts. Reading as a user who may not write the file is in
# test_ops_readonly.sh (it needs root).
source "$(dirname "$0")/lib.sh" "$@"

# ---- q show: a message that failed twice, then succeeded ------------------------------
"$Q" create jobs --max-receives 5 >/dev/null
if nats_lacks show; then
  skip_part "on NATS: q show and the attempt history are not there yet"
else
id=$("$Q" send jobs 'resize 42')
cat >"$T/handler" <<'SH'
#!/bin/bash
# Fails on the first two deliveries, looks at its own history on the third.
if ((Q_RECEIVE_COUNT < 3)); then
  echo "upstream refused request $RANDOM$RANDOM at 0x7f3a$Q_RECEIVE_COUNT" >&2
  echo "retry later" >&2
  exit 7
fi
"$SHOW_Q" -f "$Q_FILE" show "$Q_QUEUE" "$Q_MESSAGE_ID" >"$SHOW_OUT"
"$SHOW_Q" -f "$Q_FILE" show "$Q_QUEUE" "$Q_MESSAGE_ID" --json >"$SHOW_OUT.json"
SH
chmod +x "$T/handler"
export SHOW_Q=$Q SHOW_OUT=$T/show
run "$Q" work jobs --backoff-base 1ms --backoff-cap 1ms --max-messages 3 -q -- "$T/handler" --fast
assert_eq 4 "$RC" "q work: two failures, then the success (exit 4)"
cat "$T/show" >&2
j=$(<"$T/show.json")
assert_eq 3 "$(jq '.attempts | length' <<<"$j")" "q show: three attempts"
assert_eq "released released open" "$(jq -r '[.attempts[].end] | join(" ")' <<<"$j")" "how each ended"
assert_eq "7 7" "$(jq -r '[.attempts[0,1].exit_status] | join(" ")' <<<"$j")" "exit statuses"
assert_match '^upstream refused request [0-9]+ at 0x7f3a1$' "$(jq -r '.attempts[0].stderr_first_line' <<<"$j")" "first stderr line"
assert_match $'retry later$' "$(jq -r '.attempts[1].stderr_tail' <<<"$j")" "stderr tail"
assert_eq "$T/handler --fast" "$(jq -r '.attempts[2].command' <<<"$j")" "q work's command line"
assert_eq "$T/handler --fast" "$(jq -r '.attempts[0].command' <<<"$j")" "kept with an ended attempt"
assert_eq 1 "$(jq '[.attempts[].pid] | unique | length' <<<"$j")" "one q work process received it each time"
assert_eq "in_flight 3 resize 42" "$(jq -r '"\(.state) \(.receive_count) \(.body)"' <<<"$j")" "state, receives, body"
assert_contains "$(<"$T/show")" "ended: released (nack)" "text: how it ended"
assert_contains "$(<"$T/show")" "stderr| retry later" "text: the stderr tail"
assert_exit 66 "$Q" show jobs "$id"   # acked: gone with its history
assert_contains "$ERR" "no message $id" "an acked message is gone"
assert_exit 65 "$Q" show jobs nope
assert_exit 66 "$Q" show nosuch m1

# A timed-out lease is recorded by the next receive; a dead letter shows its history.
"$Q" create t --visibility-timeout 0 --max-receives 2 >/dev/null
tid=$("$Q" send t x)
"$Q" receive t >/dev/null
"$Q" receive t >/dev/null
assert_exit 1 "$Q" receive t   # dead-lettered at the third receive
assert_exit 0 "$Q" show t "$tid" --json
assert_eq "dead timed_out timed_out" "$(jq -r '[.state, .attempts[].end] | join(" ")' <<<"$OUT")" "timed out twice, then dead"
fi

# ---- pause and resume -------------------------------------------------------------------
"$Q" create p >/dev/null
"$Q" send p one -q
assert_exit 0 "$Q" pause p --for 1h --reason 'smtp relay down'
assert_contains "$OUT" "paused p until" "pause says until when"
assert_exit 1 "$Q" receive p
assert_exit 0 "$Q" send p two   # sends are still accepted
s=$(stats_json p)
assert_eq "true smtp relay down" "$(jq -r '"\(.paused) \(.pause_reason)"' <<<"$s")" "stats --json: paused, reason"
assert_match '^20[0-9-]+T' "$(jq -r .paused_until <<<"$s")" "stats --json: the end"
assert_exit 0 "$Q" stats p
assert_contains "$OUT" "p: paused until" "stats text names the pause"
assert_contains "$OUT" "smtp relay down" "stats text: the reason"
assert_exit 0 "$Q" stats --prometheus
assert_contains "$OUT" 'q_paused{file="'"$Q_FILE"'",queue="p"} 1' "prometheus: q_paused"
assert_contains "$OUT" 'q_pause_info{file="'"$Q_FILE"'",queue="p",reason="smtp relay down"} 1' "prometheus: the reason"
assert_match 'q_paused_until_seconds\{file="[^"]+",queue="p"\} [1-9]' "$OUT" "prometheus: the end"
assert_contains "$OUT" 'q_paused{file="'"$Q_FILE"'",queue="jobs"} 0' "prometheus: a queue not paused"
assert_exit 1 "$Q" check p
assert_contains "$OUT" "Q WARNING" "check: WARNING"
assert_contains "$OUT" "p: paused until" "check: names the pause"
assert_contains "$OUT" "smtp relay down" "check: the reason"
# A reason with a newline and terminal controls: escaped as stats does, one
# status line (issue 25 item 15).
"$Q" create esc >/dev/null
assert_exit 0 "$Q" pause esc --reason $'relay\nQ OK\e]0;owned\a'
run "$Q" check esc
assert_eq 1 "$RC" "check: WARNING for a paused queue"
assert_eq 1 "$(printf '%s\n' "$OUT" | wc -l)" "check: one status line"
assert_not_contains "$OUT" $'\e' "check: no ESC reaches the terminal"
assert_not_contains "$OUT" $'\a' "check: no BEL"
assert_contains "$OUT" 'relay\nQ OK' "check: the reason, escaped"
"$Q" resume esc >/dev/null
# q work idles (does not exit) while paused, and takes the messages on resume.
"$Q" work p -q -- true &
worker=$!
sleep 0.5
kill -0 "$worker" 2>/dev/null || fail "q work exited on a paused queue"
assert_eq 2 "$(stat_field p visible)" "nothing taken while paused"
assert_exit 0 "$Q" resume p
assert_eq "resumed p" "$OUT" "resume says so"
wait_for 10 bash -c "[[ \$(\"$Q\" stats p --json | jq .visible) == 0 && \$(\"$Q\" stats p --json | jq .in_flight) == 0 ]]" ||
  fail "q work did not take the messages after resume"
kill -TERM "$worker"
exit_within "$worker" 20
assert_eq 0 $? "q work stops cleanly"
assert_exit 0 "$Q" resume p
assert_eq "p was not paused" "$OUT" "resume of a queue not paused"
assert_exit 0 "$Q" check p
# A pause with --for ends by itself.
# (300 ms x Q_TEST_TIME_SCALE: under ASan the send and the receive below took
# longer than a bare 300 ms, and the receive found the pause over)
assert_exit 0 "$Q" pause p --for $((300 * ${Q_TEST_TIME_SCALE:-1}))ms
"$Q" send p three -q
assert_exit 1 "$Q" receive p
wait_for 5 bash -c "\"$Q\" receive p >/dev/null" || fail "the pause did not end after --for"
assert_exit 64 "$Q" pause p --for 0s
assert_exit 64 "$Q" pause p --for soon
assert_exit 66 "$Q" pause nosuch

# q work --trip: N failures within DUR pause the queue and exit 75.
"$Q" create trip >/dev/null
for i in 1 2 3 4 5 6; do "$Q" send trip "m$i" -q; done
run "$Q" work trip --trip 3/1m --backoff-base 10s --backoff-cap 10s -q -- sh -c 'echo down >&2; exit 1'
assert_eq 75 "$RC" "q work --trip exits 75"
s=$(stats_json trip)
assert_eq true "$(jq .paused <<<"$s")" "--trip paused the queue"
assert_match '^q work --trip 3/1m: 3 failures within 1m \(last: exit status 1\)' "$(jq -r .pause_reason <<<"$s")" "--trip's reason"
assert_eq null "$(jq .paused_until <<<"$s")" "until resumed"
# An operator's timed pause in place when --trip trips is kept, with its end and
# reason (issue 25 item 12): not replaced by "until q resume".
"$Q" create window >/dev/null
for i in 1 2 3; do "$Q" send window "w$i" -q; done
"$Q" work window -j 3 --trip 3/1m --backoff-base 10s --backoff-cap 10s -- \
  sh -c 'while [ ! -e "$0" ]; do sleep 0.05; done; exit 1' "$T/window.go" 2>"$T/window.err" &
wpid=$!
in_flight_is() { [[ $(stat_field "$1" in_flight) == "$2" ]]; }
wait_for 10 in_flight_is window 3 || fail "q work did not take the three messages"
assert_exit 0 "$Q" pause window --for 1h --reason 'relay maintenance'
until_before=$(stats_json window | jq -r .paused_until)
touch "$T/window.go"
wait "$wpid"
assert_eq 75 "$?" "q work --trip still trips (exit 75)"
s=$(stats_json window)
assert_eq "relay maintenance" "$(jq -r .pause_reason <<<"$s")" "the operator's reason is kept"
assert_eq "$until_before" "$(jq -r .paused_until <<<"$s")" "and the end of its window"
assert_contains "$(cat "$T/window.err")" "already paused until" "q work says it left the pause"
assert_exit 64 "$Q" work trip --trip 0/1m -- true
assert_exit 64 "$Q" work trip --trip 3 -- true
assert_exit 64 "$Q" work trip --trip 3/0s -- true


# ---- dead letters grouped by how they failed ---------------------------------------------
"$Q" create dl --max-receives 1 >/dev/null
for i in $(seq 1 10); do "$Q" send dl "job $i" --attr "tenant=t$((i % 2))" -q; done
cat >"$T/fail" <<'SH'
#!/bin/bash
n=$(cat)
n=${n#job }
if ((n <= 6)); then
  echo "connection to 10.0.0.$n:5432 refused after ${n}03 ms (request $(printf '%08x' $((n * 7919))))" >&2
  echo "stack line $n" >&2
  exit 1
elif ((n <= 9)); then
  echo "bad input in message $Q_MESSAGE_ID" >&2
  exit 65
else
  echo "disk full" >&2
  exit 2
fi
SH
chmod +x "$T/fail"
# Failures at the last allowed receive (max receives 1) are dead-lettered at once.
for _ in 1 2 3 4 5; do
  [[ $(stat_field dl dead) == 10 ]] && break
  "$Q" work dl --exit-when-empty --backoff-base 1ms --backoff-cap 1ms -q -- "$T/fail" 2>/dev/null
  sleep 0.05
done
assert_eq 10 "$(stat_field dl dead)" "10 dead letters"
assert_exit 0 "$Q" dlq list dl --by-reason
echo "$OUT" >&2
assert_eq 4 "$(grep -c . <<<"$OUT")" "a header and three groups"
assert_match '^6 .*exit status 1: connection to #\.#\.#\.#:# refused after # ms \(request #\) \.\.\. stack line #$' "$(sed -n 2p <<<"$OUT")" "6 alike, most first (the first and the last stderr line)"
assert_match '^3 .*exit status 65: bad input in message #$' "$(sed -n 3p <<<"$OUT")" "3 alike"
assert_match '^1 .*exit status 2: disk full$' "$(sed -n 4p <<<"$OUT")" "1"
assert_match '^COUNT +FIRST +LAST +REASON$' "$(sed -n 1p <<<"$OUT")" "columns"
assert_exit 0 "$Q" dlq list dl --by-reason --json
assert_eq "6 3 1" "$(jq -s -r 'map(.count) | join(" ")' <<<"$OUT")" "--json: counts"
assert_eq 3 "$(jq -s '[.[] | select(.first_dead_at and .last_dead_at)] | length' <<<"$OUT")" "--json: first and last"
assert_exit 0 "$Q" dlq list dl --by exit --json
assert_eq "exit status 1:6 exit status 65:3 exit status 2:1" "$(jq -s -r 'map("\(.exit):\(.count)") | join(" ")' <<<"$OUT")" "--by exit"
assert_exit 0 "$Q" dlq list dl --by attr:tenant --json
assert_eq "t1:5 t0:5" "$(jq -s -r 'map("\(.value):\(.count)") | join(" ")' <<<"$OUT")" "--by attr:KEY"
assert_exit 64 "$Q" dlq list dl --by colour
assert_exit 64 "$Q" dlq list dl --by-reason --by exit
assert_exit 0 "$Q" dlq list dl -n 1
assert_match '^ID +AGE +DEAD FOR +RECEIVES +REASON +BODY$' "$(head -1 <<<"$OUT")" "DEAD FOR column"
assert_exit 0 "$Q" dlq list dl --since 1h --json
assert_eq 10 "$(grep -c . <<<"$OUT")" "--since 1h: all"
sleep 1.2
assert_exit 0 "$Q" dlq list dl --since 1s
assert_eq "" "$OUT" "--since 1s: none (dead for more than that)"

# ---- redrive: --dry-run, counts, no match -----------------------------------------------
assert_exit 0 "$Q" redrive dl --reason 'disk full' --dry-run
assert_match '^would redrive m[0-9a-f]+$' "$OUT" "--dry-run: would redrive"
assert_contains "$ERR" "would redrive 1 dead letter of dl" "--dry-run: the count on stderr"
assert_exit 0 "$Q" redrive dl --reason 'disk full'
assert_contains "$ERR" "redrove 1 dead letter of dl" "the count on stderr"
assert_exit 1 "$Q" redrive dl --reason 'no such failure'
assert_contains "$ERR" "no dead letters of dl matched" "no match: exit 1, said on stderr"
assert_eq "" "$OUT" "no match: nothing printed"

# ---- destructive commands: --dry-run, confirmation, counts on stderr ------------------------
before=$(stats_json dl)
assert_exit 0 "$Q" purge dl --dry-run
assert_eq "would purge 1 message from dl (visible 1, in flight 0, delayed 0; 9 dead letters stay)" "$OUT" "purge --dry-run"
assert_exit 0 "$Q" dlq purge dl --dry-run
assert_eq "would purge 9 dead letters from dl" "$OUT" "dlq purge --dry-run"
assert_exit 0 "$Q" delete dl --dry-run
assert_eq "would delete queue dl (1 message, 9 dead letters)" "$OUT" "delete --dry-run"
dead_id=$("$Q" dlq list dl --json -n 1 | jq -r .id)
assert_exit 0 "$Q" dlq delete dl "$dead_id" --dry-run
assert_eq "would delete dead letter $dead_id" "$OUT" "dlq delete --dry-run"
assert_eq "$(jq -c '[.visible, .dead]' <<<"$before")" "$(stats_json dl | jq -c '[.visible, .dead]')" "--dry-run removed nothing"
# On a terminal they ask; "n" keeps everything (exit 1), "y" goes ahead.
if command -v script >/dev/null; then
  printf 'n\n' | script -qec "$(printf '%q ' "$Q" purge dl)" /dev/null >"$T/tty" 2>&1
  assert_contains "$(<"$T/tty")" "purge 1 message from dl (dead letters stay)? [y/N]" "purge asks on a terminal"
  assert_eq 1 "$(stat_field dl visible)" "answered n: nothing purged"
  printf 'y\n' | script -qec "$(printf '%q ' "$Q" dlq purge dl)" /dev/null >"$T/tty" 2>&1
  assert_contains "$(<"$T/tty")" "purged 9 dead letters from dl" "answered y: purged"
  assert_eq 0 "$(stat_field dl dead)" "dead letters gone"
  script -qec "$(printf '%q ' "$Q" purge dl -y)" /dev/null </dev/null >"$T/tty" 2>&1
  assert_not_contains "$(<"$T/tty")" "[y/N]" "-y: no question"
  assert_eq 0 "$(stat_field dl visible)" "-y: purged"
else
  missing_part "script(1) (Debian: bsdutils): confirmation on a terminal"
  "$Q" purge dl >/dev/null 2>&1
fi
# On a pipe (cron, scripts) they do not ask; the counts go to stderr.
"$Q" send dl again -q
run "$Q" purge dl </dev/null
assert_eq 0 "$RC" "purge on a pipe does not ask"
assert_eq "" "$OUT" "nothing on stdout"
assert_eq "q purge: purged 1 message from dl" "$ERR" "the count on stderr"
run "$Q" delete dl
assert_eq "q delete: deleted queue dl (0 messages, 0 dead letters)" "$ERR" "delete: the counts on stderr"

# ---- import --skip-existing ------------------------------------------------------------------
"$Q" create im >/dev/null
"$Q" send im a -q
"$Q" send im b -q
"$Q" export im >"$T/im.jsonl"
"$Q" -f "$T/other.q" create im >/dev/null
assert_exit 0 "$Q" -f "$T/other.q" import im --skip-existing <"$T/im.jsonl"
assert_eq 2 "$(grep -c . <<<"$OUT")" "first import: both"
assert_exit 0 "$Q" -f "$T/other.q" import im --skip-existing <"$T/im.jsonl"
assert_eq "" "$OUT" "second import: nothing"
assert_contains "$ERR" "skipped 2 messages already in im" "the count on stderr"
assert_eq 2 "$("$Q" -f "$T/other.q" stats im --json | jq .visible)" "no duplicates"

# ---- ack without receipts ---------------------------------------------------------------------
assert_exit 64 "$Q" ack im </dev/null
assert_contains "$ERR" "no receipts given" "empty stdin: usage error"
if command -v script >/dev/null; then
  script -qec "$(printf '%q ' "$Q" -f "$Q_FILE" ack im); echo \"rc=\$?\"" /dev/null </dev/null >"$T/tty" 2>&1
  assert_contains "$(<"$T/tty")" "rc=64" "stdin a terminal: usage error, no hang"
else
  missing_part "script(1) (Debian: bsdutils): ack with a terminal on stdin"
fi


# ---- q show: the attempt count and numbering (issue 25 item 15) ----------------------------
# File only: the text is q show's own, but this was not run against a cluster's
# attempt history.
if ! on_nats; then
# 8 ended deliveries and the one in flight: not "attempts 9 (the last 8 are kept)".
"$Q" create shown --max-receives 20 >/dev/null
"$Q" send shown x -q
for i in 1 2 3 4 5 6 7 8; do
  r=$("$Q" receive shown --json | jq -r .receipt)
  "$Q" nack shown "$r" >/dev/null || fail "nack $i"
done
id=$("$Q" receive shown --json | jq -r .id)
run "$Q" show shown "$id"
assert_contains "$OUT" "attempts        9 (only the last 8 ended ones are kept, and the one in flight)" \
  "the count line says what is kept"
# After a redrive the receive count starts again: said, not #1, #2, #1 silently.
"$Q" create again --max-receives 2 >/dev/null
"$Q" send again y -q
for i in 1 2; do
  r=$("$Q" receive again --json | jq -r .receipt)
  "$Q" nack again "$r" >/dev/null || fail "nack $i"
done
assert_exit 1 "$Q" receive again  # its third receive dead-letters it
assert_eq 1 "$(stat_field again dead)" "dead-lettered after 2 receives"
"$Q" redrive again >/dev/null
id=$("$Q" receive again --json | jq -r .id)
run "$Q" show again "$id"
assert_contains "$OUT" "#1  received" "the first delivery"
assert_contains "$OUT" "(its receive count started again: redriven or imported)" \
  "the delivery after the redrive says its count started again"
fi
