# Issue 27, "on call, q tells the truth": triage that tells causes apart, and
# dlq delete with the selection redrive has. (q work's counts against the
# queue's counters are in test_work.sh.)
source "$(dirname "$0")/lib.sh" "$@"

# ---- three causes behind one log line: three groups ----------------------------------
# The issue's example: every run logs "connecting to ..." first; the error is
# the last line. Two of the causes differ only in their SMTP codes.
"$Q" create mail --max-receives 1 >/dev/null || die "create mail"
for i in $(seq 1 9); do "$Q" send mail "$i" -q || die "send"; done
cat >"$T/deliver" <<'SH'
#!/bin/bash
n=$(cat)
echo "connecting to mx$((n % 2)).example.com (attempt $Q_RECEIVE_COUNT)" >&2
case $((n % 3)) in
  0) echo "smtp 451 4.2.0 mailbox busy" >&2; exit 1 ;;
  1) echo "smtp 550 5.2.0 mailbox busy" >&2; exit 65 ;;
  2) echo "connection refused by 10.0.0.$n:25 after ${n}17 ms" >&2; exit 1 ;;
esac
SH
chmod +x "$T/deliver"
for _ in 1 2 3; do
  [[ $(stat_field mail dead) == 9 ]] && break
  "$Q" work mail --exit-when-empty --backoff-base 1ms --backoff-cap 1ms -q -- "$T/deliver" 2>/dev/null
done
assert_eq 9 "$(stat_field mail dead)" "nine dead letters"
assert_exit 0 "$Q" dlq list mail --by-reason --json
groups=$(jq -r '"\(.count) \(.reason)"' <<<"$OUT" | sort)
echo "$groups" >&2
assert_eq 3 "$(grep -c . <<<"$groups")" "three causes, three groups"
assert_contains "$groups" "3 exit status 1: connecting to mx#.example.com (attempt #) ... smtp 451 4.2.0 mailbox busy" \
  "temporary: status codes kept, the error line decides"
assert_contains "$groups" "3 exit status 65: connecting to mx#.example.com (attempt #) ... smtp 550 5.2.0 mailbox busy" \
  "permanent: its own group"
assert_contains "$groups" "3 exit status 1: connecting to mx#.example.com (attempt #) ... connection refused by #.#.#.#:# after # ms" \
  "addresses, ports and times masked"

# ---- whole reasons in a pipe ----------------------------------------------------------
long=$(printf 'upstream said: %s' "$(printf 'x%.0s' $(seq 1 150))")
"$Q" create long --max-receives 1 >/dev/null
"$Q" send long body -q
r=$("$Q" receive long --json | jq -r .receipt)
"$Q" nack long "$r" --reason "$long"
"$Q" receive long >/dev/null 2>&1   # the receive that dead-letters it
assert_eq 1 "$(stat_field long dead)" "one dead letter"
assert_exit 0 "$Q" dlq list long
assert_contains "$OUT" "$long" "dlq list in a pipe: the whole reason"
assert_exit 0 "$Q" dlq list long --by-reason
assert_contains "$OUT" "$long" "--by-reason in a pipe: the whole reason"
assert_exit 0 "$Q" dlq list long --wide
assert_contains "$OUT" "$long" "--wide"

# ---- dlq delete: --reason, --since, -n, --dry-run and ids on stdin ----------------------
assert_exit 0 "$Q" dlq delete mail --reason '^exit status 65: ' --dry-run
assert_eq 3 "$(grep -c '^would delete dead letter m' <<<"$OUT")" "--dry-run: the three permanent ones"
assert_contains "$ERR" "would delete 3 dead letters of mail" "--dry-run: the count on stderr"
assert_eq 9 "$(stat_field mail dead)" "--dry-run deleted nothing"
redrive_ids=$("$Q" redrive mail --reason '^exit status 65: ' --dry-run | sed 's/^would redrive //')
assert_eq "$redrive_ids" "$(sed 's/^would delete dead letter //' <<<"$OUT")" "the same selection as redrive"
assert_exit 0 "$Q" dlq delete mail --reason '^exit status 65: '
assert_eq 3 "$(grep -c '^deleted dead letter m' <<<"$OUT")" "--reason: deleted the three"
assert_contains "$ERR" "deleted 3 dead letters of mail" "the count on stderr"
assert_eq 6 "$(stat_field mail dead)" "six left"
assert_exit 1 "$Q" dlq delete mail --reason 'no such failure'
assert_contains "$ERR" "no dead letters of mail matched" "no match: exit 1, said"
assert_exit 0 "$Q" dlq delete mail --since 1h -n 2
assert_eq 2 "$(grep -c '^deleted dead letter m' <<<"$OUT")" "--since with -n 2: two"
assert_eq 4 "$(stat_field mail dead)" "four left"
assert_exit 0 "$Q" dlq delete mail < <("$Q" dlq list mail --json | jq -r .id | head -3)
assert_eq 3 "$(grep -c '^deleted dead letter m' <<<"$OUT")" "ids on stdin, one a line"
assert_eq 1 "$(stat_field mail dead)" "one left"
assert_exit 64 "$Q" dlq delete mail </dev/null
assert_contains "$ERR" "no ids given" "empty stdin: a usage error"
assert_exit 64 "$Q" dlq delete mail --reason '(unclosed'
assert_contains "$ERR" "--reason" "a bad regex names the flag"
assert_eq 1 "$(stat_field mail dead)" "refused: nothing deleted"


# ---- the usual mistakes get help ---------------------------------------------------------
"$Q" create jobs >/dev/null || die "create jobs"
assert_exit 64 "$Q" recieve jobs
assert_eq "q: unknown command 'recieve'; did you mean 'receive'? (see 'q --help')" "$ERR" "a command: did you mean"
assert_exit 66 "$Q" receive job
assert_contains "$ERR" "queue job: no such queue; did you mean jobs? (else create it with 'q create job')" \
  "a queue: similar names before create"
assert_exit 66 "$Q" receive zzz
assert_contains "$ERR" "(create it with 'q create zzz')" "nothing similar: create"
assert_exit 64 "$Q" dlq ls jobs
assert_contains "$ERR" "unknown command 'dlq ls'; did you mean 'dlq list'?" "a subcommand: did you mean"
assert_exit 64 "$Q" create other --vissibility-timeout 5s
assert_contains "$ERR" "unknown option '--vissibility-timeout'; did you mean '--visibility-timeout'?" "an option: did you mean"
assert_exit 64 "$Q" receive jobs extra
assert_contains "$ERR" "unexpected argument 'extra'" "an extra argument, in q's words"
assert_exit 64 "$Q" dlq show jobs
assert_contains "$ERR" "q dlq show: missing ID (see 'q dlq show --help')" "a missing positional, in q's words"
assert_exit 64 "$Q" dlq list jobs -n many
assert_contains "$ERR" "--max 'many': " "a bad number names the flag and what was typed"
assert_exit 64 "$Q" dlq list jobs -n 0
assert_contains "$ERR" "'0': must be from 1 to" "a number out of range"
assert_exit 64 "$Q" extend jobs m1.0123456789abcdef
assert_contains "$ERR" "missing --by" "a missing option"
for err_run in "recieve jobs" "dlq ls jobs" "create other --vissibility-timeout 5s" "receive jobs extra" \
  "dlq show jobs" "dlq list jobs -n many" "extend jobs m1.0123456789abcdef" "create x --max-size 10X"; do
  read -ra words <<<"$err_run"
  run "$Q" "${words[@]}"
  for leak in "Could not convert" "was not expected" "were not expected" "is required" "A subcommand"; do
    [[ $ERR == *"$leak"* ]] && fail "q $err_run: CLI11's words leak: $ERR"
  done
done
# No doubled prefixes.
assert_exit 64 "$Q" ack jobs </dev/null
assert_eq "q ack: no receipts given: standard input was empty" "$ERR" "ack: one prefix"
assert_exit 1 "$Q" redrive jobs
assert_not_contains "$ERR" "redrive: redrive:" "redrive: one prefix"
assert_exit 1 "$Q" dlq delete jobs --reason x
assert_not_contains "$ERR" "dlq delete: dlq delete:" "dlq delete: one prefix"

# ---- sizes with units, fractional durations, local times -------------------------------------
# (5M, not 10M: a cluster holds at most its max_payload less 64 KiB, 8 MB in
# scripts/nats-cluster, and refuses more with 64.)
"$Q" create s1 --max-size 5M >/dev/null || fail "create s1 --max-size 5M"
assert_exit 0 "$Q" config s1 --json
assert_eq 5242880 "$(jq .max_size <<<"$OUT")" "5M: binary"
"$Q" create s2 --max-size 5MB >/dev/null || fail "create s2 --max-size 5MB"
assert_exit 0 "$Q" config s2 --json
assert_eq 5000000 "$(jq .max_size <<<"$OUT")" "5MB: decimal"
"$Q" create s3 --max-size 1MiB --visibility-timeout 1.5s >/dev/null || fail "create s3"
assert_exit 0 "$Q" config s3 --json
assert_eq 1048576 "$(jq .max_size <<<"$OUT")" "1MiB"
assert_eq 1500 "$(jq .visibility_timeout_ms <<<"$OUT")" "1.5s"
assert_exit 0 "$Q" config s3 --visibility-timeout 30sec --json
assert_eq 30000 "$(jq .visibility_timeout_ms <<<"$OUT")" "30sec"
assert_exit 64 "$Q" create s4 --max-size 10X
assert_contains "$ERR" "--max-size '10X': not a size" "a bad size names the flag"
assert_contains "$ERR" "10MiB" "and the forms"
assert_exit 64 "$Q" create s4 --visibility-timeout 1.0005s
assert_contains "$ERR" "--visibility-timeout '1.0005s': not a duration" "finer than a millisecond: refused"
assert_exit 66 "$Q" stats s4
# Tomorrow's date: a past --at is due at once (visible_at would be the send's
# own time), and one further ahead than the retention (4 days) is refused.
day=$(TZ=UTC date -d '+1 day' +%F)
id=$(TZ=UTC "$Q" send jobs --at "$day 20:00" later) || fail "send --at with a space"
assert_exit 0 "$Q" show jobs "$id" --json
assert_eq "${day}T20:00:00.000Z" "$(jq -r .visible_at <<<"$OUT")" "--at '$day 20:00' in TZ=UTC"
day=$(TZ=JST-9 date -d '+1 day' +%F)
id=$(TZ=JST-9 "$Q" send jobs --at "$day 20:00" tokyo) || fail "send --at local time"
assert_exit 0 "$Q" show jobs "$id" --json
assert_eq "${day}T11:00:00.000Z" "$(jq -r .visible_at <<<"$OUT")" "--at in local time (TZ=JST-9)"
assert_exit 64 "$Q" send jobs --at '2026-02-30 20:00' x
assert_contains "$ERR" "'2026-11-30 08:00' in local time" "a bad time names the forms"

# ---- q work: a shell line as the command -------------------------------------------------
assert_exit 64 "$Q" work jobs -- 'cat | wc -c'
assert_contains "$ERR" "no shell is used: try -- sh -c 'cat | wc -c'" "the shell hint"

# ---- receive on a paused queue says so ----------------------------------------------------
"$Q" create held >/dev/null
"$Q" send held one -q
"$Q" pause held --for 1h --reason 'relay down' >/dev/null
assert_exit 1 "$Q" receive held
assert_eq "" "$OUT" "nothing received"
assert_match "^q receive: queue held is paused until [0-9-]+T[0-9:.]+Z: relay down; nothing was received \('q resume held' ends it\)$" "$ERR" \
  "paused: said on stderr with the end and the reason"
"$Q" resume held >/dev/null
"$Q" pause held >/dev/null
assert_exit 1 "$Q" receive held
assert_contains "$ERR" "queue held is paused until resumed;" "until resumed"
"$Q" resume held >/dev/null
assert_exit 0 "$Q" receive held
"$Q" create empty >/dev/null
assert_exit 1 "$Q" receive empty
assert_eq "" "$ERR" "an empty queue: nothing said, as before"

# ---- import -q, and its progress only on a terminal -------------------------------------------
"$Q" create imp >/dev/null
for i in 1 2 3; do printf '{"body":"b%s"}\n' "$i"; done >"$T/imp.jsonl"
assert_exit 0 "$Q" import imp <"$T/imp.jsonl"
assert_eq 3 "$(grep -c '^m' <<<"$OUT")" "the ids, one a line"
assert_eq "" "$ERR" "in a pipe: no progress"
assert_exit 0 "$Q" import imp -q <"$T/imp.jsonl"
assert_eq "" "$OUT" "-q: no ids"
assert_eq "" "$ERR" "-q: nothing on stderr"
assert_eq 6 "$(stat_field imp visible)" "both imported"
if command -v script >/dev/null; then
  script -qec "$(printf '%q ' "$Q" -f "$Q_FILE" import imp -q) <$(printf '%q' "$T/imp.jsonl")" /dev/null </dev/null >"$T/tty" 2>&1
  assert_contains "$(<"$T/tty")" "q import imp: imported 3 messages" "on a terminal: the progress line"
else
  [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]] && fail "no script(1) for the terminal part"
  skip_part "import progress on a terminal: no script(1)"
fi

# ---- redrive: redriven messages are "in"; a trickle shows progress and stops cleanly ----------
"$Q" create rd --max-receives 1 >/dev/null
for i in $(seq 1 40); do "$Q" send rd "r$i" -q; done
assert_exit 4 "$Q" work rd --exit-when-empty -q -- /bin/false
assert_eq 40 "$(stat_field rd dead)" "40 dead letters"
"$Q" stats rd --watch --interval 500ms >"$T/watch" 2>&1 &
watch=$!
wait_for 10 grep -q ' rd visible=' "$T/watch" || fail "stats --watch printed nothing: $(cat "$T/watch")"
"$Q" redrive rd --max 20 >/dev/null 2>&1
wait_for 10 grep -Eq ' rd visible=20 .* in=[1-9][0-9.]*/s' "$T/watch" ||
  fail "stats --watch: the redriven messages are not counted in: $(cat "$T/watch")"
kill -TERM "$watch"
wait "$watch"
moved_some() { (($(stat_field rd dead) <= 17)); }
"$Q" redrive rd --rate 20/s >"$T/rd.out" 2>"$T/rd.err" &
rd=$!
wait_for 10 moved_some || fail "the trickle did not start"
kill -TERM "$rd"
rc=0
wait "$rd" || rc=$?
assert_eq 4 "$rc" "a trickle stopped by SIGTERM: exit 4 (partial)"
left=$(stat_field rd dead)
assert_eq "q redrive: stopped: redrove $((20 - left)) of 20 dead letters of rd; $left left" "$(<"$T/rd.err")" \
  "how far it got, and what is left"
assert_eq $((20 - left)) "$(grep -c . "$T/rd.out")" "the ids moved were printed"
if command -v script >/dev/null; then
  script -qec "$(printf '%q ' "$Q" -f "$Q_FILE" redrive rd --rate 200/s)" /dev/null </dev/null >"$T/tty" 2>&1
  assert_contains "$(<"$T/tty")" "q redrive rd: moved $left of $left | " "on a terminal: moved of total"
  assert_match "[0-9.]+/s \| done in " "$(<"$T/tty")" "the rate and the time left"
  assert_eq 0 "$(stat_field rd dead)" "all moved"
else
  [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]] && fail "no script(1) for the terminal part"
  skip_part "redrive progress on a terminal: no script(1)"
fi
