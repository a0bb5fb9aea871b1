# Operations: top, stats --watch/--prometheus, check, backup, verify,
# export/import, dead-letter tooling, all while other processes use the queue.
source "$(dirname "$0")/lib.sh" "$@"

"$Q" create emails --max-receives 1 || die "create"

# Background traffic for the whole test: a producer and a consumer.
(
  while :; do "$Q" send emails "traffic" >/dev/null 2>&1; sleep 0.05; done
) &
traffic_send=$!
(
  while :; do
    r=$("$Q" receive emails --json 2>/dev/null | jq -r .receipt)
    [[ -n $r && $r != null ]] && "$Q" ack emails "$r" 2>/dev/null
    sleep 0.05
  done
) &
traffic_ack=$!
stop_traffic() { kill "$traffic_send" "$traffic_ack" 2>/dev/null; wait "$traffic_send" "$traffic_ack" 2>/dev/null; }

# ---- dead letters with reasons -------------------------------------------------------
"$Q" create mail --max-receives 1 || die "create mail"
for reason in "smtp 550 user unknown" "smtp 550 user unknown" "smtp 451 try later"; do
  "$Q" send mail "to someone ($reason)" >/dev/null
  r=$("$Q" receive mail --json | jq -r .receipt)
  "$Q" nack mail "$r" --reason "$reason"
done
"$Q" receive mail -n 10 >/dev/null   # moves all three to the dead-letter queue
assert_eq 3 "$(stat_field mail dead)" "three dead letters"

run "$Q" dlq list mail --by-reason
# Grouped with numbers masked but status codes kept, most first: COUNT FIRST LAST REASON.
assert_eq $'2 smtp 550 user unknown\n1 smtp 451 try later' "$(tail -n +2 <<<"$OUT" | awk '{ $2 = $3 = $4 = $5 = ""; print }' | tr -s ' ')" "summary of reasons with counts"
run "$Q" dlq list mail --reason '^smtp 451' --json
assert_eq 1 "$(grep -c . <<<"$OUT")" "--reason filters by regex"
assert_eq "smtp 451 try later" "$(jq -r .reason <<<"$OUT")" "the matching one"
id451=$(jq -r .id <<<"$OUT")
run "$Q" dlq list mail --since 1h
assert_eq 4 "$(grep -c . <<<"$OUT")" "--since 1h keeps all (header + 3)"
sleep 0.3
run "$Q" dlq list mail --since 200ms
assert_eq "" "$OUT" "--since 200ms keeps none of the older ones"
assert_exit 64 "$Q" dlq list mail --reason '(unclosed'
assert_contains "$ERR" "--reason" "a bad regex names the flag"

run "$Q" dlq show mail "$id451"
assert_eq "to someone (smtp 451 try later)" "$OUT" "dlq show prints the body as sent"
run "$Q" dlq show mail "$id451" --json
assert_eq "dead" "$(jq -r .state <<<"$OUT")" "--json: the whole record"
assert_exit 66 "$Q" dlq show mail m999
assert_exit 65 "$Q" dlq show mail not-an-id

# redrive only the temporary failure, to another queue
"$Q" create retry || die "create retry"
run "$Q" redrive mail --reason 451 --to retry
assert_eq "$id451" "$OUT" "redrive --reason --to moves the matching one"
assert_eq 1 "$(stat_field retry visible)" "it is in the other queue"
assert_eq 2 "$(stat_field mail dead)" "the others stay dead"

# trickle the rest back at 4/s: two take about a quarter second or more
start=$(now_ms)
run "$Q" redrive mail --rate 4/s
elapsed=$(($(now_ms) - start))
assert_eq 2 "$(grep -c . <<<"$OUT")" "both moved"
((elapsed >= 200)) || fail "--rate 4/s moved two in ${elapsed} ms"

# delete chosen dead letters
"$Q" purge mail >/dev/null  # the two redriven ones
"$Q" send mail "bad one" >/dev/null
r=$("$Q" receive mail --json | jq -r .receipt)
"$Q" nack mail "$r" --reason "poison"
"$Q" receive mail >/dev/null || true  # max receives reached: dead-lettered
dead_id=$("$Q" dlq list mail --json | jq -r 'select(.reason=="poison") | .id')
[[ -n $dead_id ]] || die "no poison dead letter"
assert_exit 66 "$Q" dlq delete mail "$dead_id" m999
assert_contains "$OUT" "deleted dead letter $dead_id" "prints what it removed"
assert_contains "$ERR" "no dead letter m999" "names the missing one"
assert_exit 66 "$Q" dlq show mail "$dead_id"

# ---- check: the Nagios convention ---------------------------------------------------------
assert_exit 0 "$Q" check retry --max-dead 0 --max-age 1h
assert_match '^Q OK - retry: depth 1, dead 0, oldest [0-9.]+s \| ' "$OUT" "OK status line with perfdata"
assert_contains "$OUT" "'retry_dead'=0;;0;0" "perfdata: dead with its threshold"
"$Q" create sick --max-receives 1 || die "create sick"
"$Q" send sick x >/dev/null
"$Q" nack sick "$("$Q" receive sick --json | jq -r .receipt)"
"$Q" receive sick >/dev/null
assert_exit 2 "$Q" check sick --max-dead 0
assert_contains "$OUT" "Q CRITICAL - sick: dead letters 1 (max 0)" "critical on a dead letter"
assert_exit 1 "$Q" check sick --max-dead 0,5
assert_contains "$OUT" "Q WARNING" "warning between the thresholds"
"$Q" send sick waiting >/dev/null
sleep 0.3
assert_exit 2 "$Q" check sick --max-age 100ms
assert_contains "$OUT" "oldest message" "critical on the oldest message's age"
assert_exit 2 "$Q" check sick --min-rate 5/s --sample 300ms
assert_contains "$OUT" "drain rate 0.00/s (min 5/s)" "nothing drains while a message waits"
assert_contains "$OUT" "'sick_out_rate'=0.000;;5:;0" "a minimum threshold in perfdata range syntax"
assert_exit 3 "$Q" check sick --min-rate 5/s --sample 2s -t 1s
assert_contains "$OUT" "must be shorter than -t/--timeout" "--sample must fit in --timeout"
# -t/--timeout fires: the plugin is stopped (SIGSTOP) during its rate sample
# past its deadline; when it runs again the pending alarm answers UNKNOWN. The
# real timer keeps counting while the process is stopped.
"$Q" check sick --min-rate 5/s --sample 1900ms -t 2s >"$T/check_timeout.out" 2>&1 &
check_pid=$!
alarm_caught() {  # the SIGALRM handler is installed (bit 14 of SigCgt); the timer follows it
  local mask
  mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$check_pid/status" 2>/dev/null) || return 1
  [[ -n $mask ]] && (((16#$mask >> 13) & 1))
}
wait_for 10 alarm_caught || fail "q check never installed its -t/--timeout alarm"
sleep 0.2
kill -STOP "$check_pid" 2>/dev/null || fail "q check ended before it could be stopped"
sleep 2.3
kill -CONT "$check_pid" 2>/dev/null
wait "$check_pid"
check_rc=$?
assert_eq 3 "$check_rc" "q check past its -t/--timeout exits 3"
assert_contains "$(cat "$T/check_timeout.out")" "Q UNKNOWN - timed out after 2s (-t/--timeout)" \
  "the timeout is UNKNOWN with its reason on stdout"
assert_exit 3 "$Q" check nosuch
assert_contains "$OUT" "Q UNKNOWN" "unknown queue: UNKNOWN"
assert_exit 3 "$Q" -f "$T/missing.q" check
# Monitoring plugins answer a bad threshold with UNKNOWN, not a usage code.
assert_exit 3 "$Q" check --max-age soon
assert_contains "$OUT" "Q UNKNOWN - --max-age 'soon'" "the bad threshold is named"

# ---- metrics ------------------------------------------------------------------------------
run "$Q" stats --prometheus
assert_contains "$OUT" "# TYPE q_messages gauge" "gauge family"
assert_contains "$OUT" "q_messages{file=\"$Q_FILE\",queue=\"sick\",state=\"dead\"} 1" "dead gauge, with the file label"
assert_contains "$OUT" "# TYPE q_sent_total counter" "counters end in _total"
assert_match 'q_oldest_message_age_seconds\{file="[^"]+",queue="sick"\} [0-9]+\.[0-9]{3}' "$OUT" "age in seconds"
# Two files with the same queue names do not clash: every series names its file.
other=$T/other.q
"$Q" -f "$other" create sick >/dev/null
run "$Q" -f "$other" stats --prometheus
assert_contains "$OUT" "q_messages{file=\"$other\",queue=\"sick\",state=\"dead\"} 0" "the other file's series"
mkdir -p "$T/textfile"
assert_exit 0 "$Q" stats --prometheus --output "$T/textfile/q.prom"
assert_contains "$(cat "$T/textfile/q.prom")" ',queue="retry",state="visible"}' "written to the file"
assert_eq "q.prom" "$(ls "$T/textfile")" "no temporary file left behind"
# A missing directory is 66, as for q backup.
assert_exit 66 "$Q" stats --prometheus --output "$T/no/such/dir/q.prom"

watch_s=$((3 * ${Q_TEST_TIME_SCALE:-1}))  # ASan's start-up takes a second of its own
run timeout "$watch_s" "$Q" stats emails --watch --interval 300ms
lines=$(grep -c 'emails visible=' <<<"$OUT")
((lines >= 3)) || fail "--watch printed $lines lines in $watch_s s at 300 ms"
assert_match 'in=[0-9.]+/s out=[0-9.]+/s empty_in=' "$OUT" "--watch shows rates and time to empty"

# ---- backup, verify, export/import while traffic runs ----------------------------------------
if nats_lacks backup; then
  skip_part "backup, verify, export/import are not on NATS yet"
  stop_traffic
else
  assert_exit 0 "$Q" verify
  assert_contains "$OUT" "consistent" "a healthy file under load verifies"
  assert_exit 0 "$Q" backup "$T/backup.q"
  assert_exit 0 "$Q" -f "$T/backup.q" verify
  assert_exit 0 "$Q" -f "$T/backup.q" stats retry
  assert_exit 64 "$Q" backup "$Q_FILE"

  if on_nats; then
    # A message redriven --to another queue keeps its id, and ids are per queue
    # on NATS: retry's own third send is m3 too, and an import takes two lines
    # with one id for one message (README, Differences on NATS). Without it:
    "$Q" purge retry >/dev/null 2>&1
    "$Q" send retry plain >/dev/null
  fi
  "$Q" send retry --attr k=v "$(printf 'line1\nline2')" >/dev/null
  printf 'bin\x00\xff' | "$Q" send retry >/dev/null
  run "$Q" export retry
  printf '%s\n' "$OUT" >"$T/export.jsonl"
  assert_eq 3 "$(grep -c . "$T/export.jsonl")" "every message of the queue"
  "$Q" -f "$T/other.q" import retry --create <"$T/export.jsonl" >/dev/null || fail "import"
  "$Q" -f "$T/other.q" export retry >"$T/export2.jsonl"
  assert_eq "$(jq -c '{id,body,body_base64,attributes,receive_count,sent_at,state}' "$T/export.jsonl")" \
    "$(jq -c '{id,body,body_base64,attributes,receive_count,sent_at,state}' "$T/export2.jsonl")" \
    "export, import, export: nothing lost"
  before=$(cksum <"$T/other.q")
  assert_exit_in 65 '{"id":"m1","body":"x"}
  not json' "$Q" -f "$T/other.q" import retry
  assert_contains "$ERR" "line 2" "a bad line is named"
  assert_eq "$before" "$(cksum <"$T/other.q")" "a failed import leaves the file as it was"

  stop_traffic
  assert_exit 0 "$Q" verify
fi

# ---- q top in a real terminal ----------------------------------------------------------------
if command -v tmux >/dev/null; then
  sock=$T/tmux
  # Poll the screen for a state (no fixed sleeps: top redraws every second, and
  # a loaded machine may take longer).
  screen() { tmux -S "$sock" capture-pane -p; }
  screen_has() { [[ $(screen) == *"$1"* ]]; }
  screen_matches() { [[ $(screen) =~ $1 ]]; }
  long_name=billing-events-from-the-payment-gateway
  "$Q" create "$long_name" >/dev/null || die "create $long_name"
  tmux -S "$sock" new-session -d -x 80 -y 24 "env Q_FILE=$Q_FILE PS1='READY$ ' bash --norc --noprofile"
  wait_for 10 screen_has 'READY$' || fail "the shell in tmux did not start"
  tmux -S "$sock" send-keys "$Q top" Enter
  wait_for 10 screen_matches 'sick +[0-9]+ +[0-9]+ +[0-9]+ +1 ' || true
  screen1=$(screen)
  assert_contains "$screen1" "QUEUE" "top shows its header"
  assert_contains "$screen1" "retry" "top lists the queues"
  assert_match 'QUEUE +VISIBLE +IN FLIGHT +DELAYED +DEAD +IN/s +OUT/s +DEPTH +OLDEST +TO EMPTY' \
    "$screen1" "top's columns have full names"
  assert_contains "$screen1" "$long_name" "a queue name too long for its column is shown whole"
  assert_match 'sick +[0-9]+ +[0-9]+ +[0-9]+ +1 ' "$screen1" "top shows the dead letter of sick"
  for i in $(seq 1 30); do "$Q" send retry "burst $i" >/dev/null; done
  wait_for 10 screen_matches 'retry +3[0-9] ' || true
  screen2=$(screen)
  [[ $screen1 != "$screen2" ]] || fail "top did not update"
  assert_match 'retry +3[0-9] ' "$screen2" "top shows the new depth"
  while IFS= read -r line; do
    width=$(LC_ALL=C.UTF-8 bash -c 'printf %s "${#1}"' _ "$line")
    ((width <= 80)) || fail "a line $width columns wide: $line"
  done <<<"$screen2"
  tmux -S "$sock" send-keys q
  wait_for 10 screen_has 'READY$' || true
  after=$(screen)
  assert_contains "$after" "READY$" "q quits and the shell prompt is back"
  assert_not_contains "$after" "QUEUE" "the terminal is restored (alternate screen left)"
  tmux -S "$sock" send-keys "NO_COLOR=1 $Q top" Enter
  wait_for 10 screen_has QUEUE || fail "top (NO_COLOR) did not start"
  tmux -S "$sock" send-keys C-c
  wait_for 10 eval '! screen_has QUEUE' || true
  assert_contains "$(screen)" "READY$" "Ctrl-C quits too"
  tmux -S "$sock" kill-server
else
  fail "tmux is needed for the q top test"
fi
assert_exit 64 "$Q" top
assert_contains "$ERR" "stats --watch" "top without a terminal says what to use"
