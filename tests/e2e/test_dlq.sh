#!/usr/bin/env bash
# Dead letters (max receives), dlq list/purge, redrive, purge, delete, list.
source "$(dirname "$0")/lib.sh" "$@"

# receipt_of: receive one message of QUEUE; prints its receipt (records a failure if none).
receipt_of() {
  local out
  out=$("$Q" receive "$@" --json) || { fail "q receive $* --json: exit $?"; return; }
  jq -r .receipt <<<"$out"
}

assert_exit 0 "$Q" create mail --max-receives 2
assert_exit 0 "$Q" send mail 'to: bob' --attr prio=high
id=$OUT

# Two failed deliveries with a reason; the third receive dead-letters it.
r=$(receipt_of mail)
assert_exit 0 "$Q" nack mail "$r" --reason 'smtp 451'
r=$(receipt_of mail)
assert_exit 0 "$Q" nack mail "$r" --reason 'smtp 451'
assert_exit 1 "$Q" receive mail
assert_eq "" "$OUT" "receive after max receives: nothing"
assert_exit 1 "$Q" receive mail

s=$(stats_json mail)
assert_eq 1 "$(jq .dead <<<"$s")" "stats: dead 1"
assert_eq 0 "$(jq .visible <<<"$s")" "stats: visible 0 after dead-lettering"
if nats_lacks counters; then
  skip_part "lifetime counters (dead_lettered, nacked, received, redriven) are not kept on NATS"
else
  assert_eq 1 "$(jq .dead_lettered <<<"$s")" "stats: dead_lettered 1"
  assert_eq 2 "$(jq .nacked <<<"$s")" "stats: nacked 2"
  assert_eq 2 "$(jq .received <<<"$s")" "stats: received 2"
fi

assert_exit 0 "$Q" dlq list mail --json
assert_eq 1 "$(grep -c . <<<"$OUT")" "dlq list --json: one dead letter"
assert_eq "$id" "$(jq -r .id <<<"$OUT")" "dlq list: id"
assert_eq "smtp 451" "$(jq -r .reason <<<"$OUT")" "dlq list: the nack reason"
assert_eq 2 "$(jq -r .receive_count <<<"$OUT")" "dlq list: receive_count 2"
assert_eq "to: bob" "$(jq -r .body <<<"$OUT")" "dlq list: body"
assert_eq "dead" "$(jq -r .state <<<"$OUT")" "dlq list: state"
assert_eq '{"prio":"high"}' "$(jq -c .attributes <<<"$OUT")" "dlq list: attributes"
assert_match '^[0-9-]{10}T[0-9:]{8}\.[0-9]{3}Z$' "$(jq -r .dead_at <<<"$OUT")" "dlq list: dead_at"

assert_exit 0 "$Q" dlq list mail
assert_contains "$OUT" "smtp 451" "dlq list (text) shows the reason"
assert_contains "$OUT" "$id" "dlq list (text) shows the id"
assert_contains "$OUT" "to: bob" "dlq list (text) shows the body"
assert_eq 2 "$(grep -c . <<<"$OUT")" "dlq list (text): a header and one row"

# redrive --dry-run lists, moves nothing.
assert_exit 0 "$Q" redrive mail --dry-run
assert_eq "would redrive $id" "$OUT" "redrive --dry-run prints the id"
assert_eq 1 "$(stat_field mail dead)" "redrive --dry-run: still dead"
nats_lacks counters || assert_eq 0 "$(stat_field mail redriven)" "redrive --dry-run: redriven 0"
assert_exit 1 "$Q" receive mail
assert_exit 0 "$Q" dlq list mail --json
assert_eq "$id" "$(jq -r .id <<<"$OUT")" "redrive --dry-run: still in the dlq"

# redrive moves it back: same id, receive count starts again.
assert_exit 0 "$Q" redrive mail
assert_eq "$id" "$OUT" "redrive prints the id moved"
s=$(stats_json mail)
assert_eq 0 "$(jq .dead <<<"$s")" "after redrive: dead 0"
assert_eq 1 "$(jq .visible <<<"$s")" "after redrive: visible 1"
nats_lacks counters || assert_eq 1 "$(jq .redriven <<<"$s")" "after redrive: redriven 1"
assert_exit 0 "$Q" dlq list mail
assert_eq "" "$OUT" "after redrive: dlq list empty"
assert_exit 1 "$Q" redrive mail
assert_eq "" "$OUT" "second redrive moves nothing"
assert_contains "$ERR" "no dead letters of mail to move" "second redrive says so (exit 1, like grep)"
assert_exit 0 "$Q" receive mail --json
assert_eq "$id" "$(jq -r .id <<<"$OUT")" "redriven message keeps its id"
assert_eq 1 "$(jq -r .receive_count <<<"$OUT")" "redriven message: receive_count restarts at 1"
assert_eq "to: bob" "$(jq -r .body <<<"$OUT")" "redriven message: body"
assert_eq '{"prio":"high"}' "$(jq -c .attributes <<<"$OUT")" "redriven message: attributes"
assert_exit 0 "$Q" ack mail "$(jq -r .receipt <<<"$OUT")"

# Without a nack reason, the dead letter says why.
assert_exit 0 "$Q" send mail ignored
id2=$OUT
receipt_of mail --visibility-timeout 0s >/dev/null
receipt_of mail --visibility-timeout 0s >/dev/null
assert_exit 1 "$Q" receive mail
assert_exit 0 "$Q" dlq list mail --json
assert_eq "$id2" "$(jq -r .id <<<"$OUT")" "lease expiries dead-letter too"
assert_contains "$(jq -r .reason <<<"$OUT")" "2 receives" "default dead-letter reason names the receives"

# redrive --id and --max.
assert_exit 0 "$Q" send mail third
id3=$OUT
receipt_of mail --visibility-timeout 0s >/dev/null
receipt_of mail --visibility-timeout 0s >/dev/null
assert_exit 1 "$Q" receive mail
assert_eq 2 "$(stat_field mail dead)" "two dead letters"
assert_exit 0 "$Q" redrive mail --max 1 --dry-run
assert_eq "would redrive $id2" "$OUT" "redrive --max 1: the oldest"
assert_exit 0 "$Q" redrive mail --id "$id3"
assert_eq "$id3" "$OUT" "redrive --id moves that one"
assert_exit 0 "$Q" dlq list mail --json
assert_eq "$id2" "$(jq -r .id <<<"$OUT")" "redrive --id left the other"
assert_exit 66 "$Q" redrive mail --id "$id3"   # no longer a dead letter
assert_exit 65 "$Q" redrive mail --id not-an-id

# dlq purge prints what it removed and keeps live messages.
assert_exit 0 "$Q" dlq purge mail
assert_eq "q dlq purge: purged 1 dead letter from mail" "$ERR" "dlq purge output"
assert_exit 0 "$Q" dlq list mail
assert_eq "" "$OUT" "dlq list after purge"
s=$(stats_json mail)
assert_eq 0 "$(jq .dead <<<"$s")" "dlq purge: dead 0"
assert_eq 1 "$(jq .visible <<<"$s")" "dlq purge keeps the live message"
assert_exit 0 "$Q" dlq purge mail
assert_eq "q dlq purge: purged 0 dead letters from mail" "$ERR" "dlq purge of an empty dlq"

# ---- purge: every live message, not the dead letters ----------------------------------
assert_exit 0 "$Q" create work --max-receives 1
assert_exit 0 "$Q" send work dead-one
receipt_of work --visibility-timeout 0s >/dev/null
assert_exit 1 "$Q" receive work   # dead-letters it
run_in $'v1\nv2\nv3\n' "$Q" send work --lines
if nats_lacks delay; then
  skip_part "delayed messages (send --delay) are not on NATS yet"
  assert_exit 0 "$Q" send work not-delayed
  receipt_of work >/dev/null   # one in flight
  s=$(stats_json work)
  assert_eq "3 1 0 1" "$(jq -r '"\(.visible) \(.in_flight) \(.delayed) \(.dead)"' <<<"$s")" "before purge: visible in_flight delayed dead"
else
  assert_exit 0 "$Q" send work delayed --delay 1h
  receipt_of work >/dev/null   # one in flight
  s=$(stats_json work)
  assert_eq "2 1 1 1" "$(jq -r '"\(.visible) \(.in_flight) \(.delayed) \(.dead)"' <<<"$s")" "before purge: visible in_flight delayed dead"
fi
assert_exit 0 "$Q" purge work
assert_eq "q purge: purged 4 messages from work" "$ERR" "purge output"
s=$(stats_json work)
assert_eq "0 0 0 1" "$(jq -r '"\(.visible) \(.in_flight) \(.delayed) \(.dead)"' <<<"$s")" "after purge: only the dead letter is left"
assert_exit 1 "$Q" receive work
assert_exit 0 "$Q" peek work
assert_eq "" "$OUT" "peek after purge"

# ---- list and delete --------------------------------------------------------------------
assert_exit 0 "$Q" create zeta
assert_exit 0 "$Q" list
assert_eq $'mail\nwork\nzeta' "$OUT" "list: one name a line, sorted"
assert_exit 0 "$Q" list --json
assert_eq '["mail","work","zeta"]' "$(jq -cs 'map(.queue)' <<<"$OUT")" "list --json"
assert_exit 0 "$Q" send work w1
assert_exit 0 "$Q" delete work
assert_eq "q delete: deleted queue work (1 message, 1 dead letter)" "$ERR" "delete output"
assert_exit 0 "$Q" list
assert_eq $'mail\nzeta' "$OUT" "list after delete"
assert_exit 66 "$Q" stats work
assert_exit 66 "$Q" send work again
assert_exit 66 "$Q" delete work
# A new queue of the same name starts empty.
assert_exit 0 "$Q" create work
s=$(stats_json work)
assert_eq "0 0 0 0 0" "$(jq -r '"\(.visible) \(.in_flight) \(.delayed) \(.dead) \(.sent)"' <<<"$s")" "re-created queue is empty"
assert_exit 0 "$Q" dlq list work
assert_eq "" "$OUT" "re-created queue has no dead letters"
# The other queues are untouched.
assert_eq 1 "$(stat_field mail visible)" "delete of one queue keeps the others"
