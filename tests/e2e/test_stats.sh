#!/usr/bin/env bash
# q stats: depth by state, oldest age and the lifetime counters, as text and JSON.
source "$(dirname "$0")/lib.sh" "$@"
nats_lacks counters && skip "on NATS: lifetime counters (received, acked, redriven, ...) are not kept there"

assert_exit 0 "$Q" create st --max-receives 1

# A fresh queue: all zero, no oldest message.
s=$(stats_json st)
assert_eq "st" "$(jq -r .queue <<<"$s")" "stats --json: queue"
for f in visible in_flight delayed dead sent received acked nacked dead_lettered redriven expired deduplicated stale_acks; do
  assert_eq 0 "$(jq ".$f" <<<"$s")" "fresh queue: $f"
  assert_eq number "$(jq -r ".$f|type" <<<"$s")" "stats --json: $f is a number"
done
assert_eq null "$(jq .oldest_age_ms <<<"$s")" "fresh queue: oldest_age_ms null"
assert_match '^[0-9-]{10}T[0-9:]{8}\.[0-9]{3}Z$' "$(jq -r .created_at <<<"$s")" "stats --json: created_at"

# Build a known state:
#   m-a: received and acked
#   m-b: received and nacked (visible again)
#   m-c: received, in flight
#   m-d: sent with --delay 1h (delayed)
#   m-e: visible
#   m-f: received once with a 0s lease, then dead-lettered by the next receive
#   dedup: one send repeated with the same dedup id
#   a stale ack: m-a's receipt acked again (exit 3)
assert_exit 0 "$Q" send st m-f
assert_exit 0 "$Q" receive st --visibility-timeout 0s
sleep 0.25   # the oldest live message is at least this old
assert_exit_in 0 $'m-a\nm-b\nm-c\n' "$Q" send st --lines
assert_exit 0 "$Q" receive st -n 4 --json   # dead-letters m-f, receives m-a m-b m-c
assert_eq 'm-a m-b m-c' "$(jq -r .body <<<"$OUT" | xargs)" "received m-a m-b m-c (m-f went to the dlq)"
mapfile -t rs < <(jq -r .receipt <<<"$OUT")
assert_exit 0 "$Q" ack st "${rs[0]}"
assert_exit 3 "$Q" ack st "${rs[0]}"
assert_exit 0 "$Q" nack st "${rs[1]}"
assert_exit 0 "$Q" send st m-d --delay 1h
assert_exit 0 "$Q" send st m-e --dedup-id e
assert_exit 0 "$Q" send st m-e --dedup-id e

s=$(stats_json st)
want='{"queue":"st","visible":2,"in_flight":1,"delayed":1,"dead":1,"sent":6,"received":4,"acked":1,"nacked":1,"dead_lettered":1,"redriven":0,"expired":0,"deduplicated":1,"stale_acks":1,"kind":"standard","paused":false}'
assert_eq "$want" "$(jq -c 'del(.oldest_age_ms, .created_at)' <<<"$s")" "stats --json fields"
age=$(jq .oldest_age_ms <<<"$s")
assert_eq number "$(jq -r '.oldest_age_ms|type' <<<"$s")" "oldest_age_ms is a number"
# m-b (sent after the 0.25 s sleep) is the oldest live message; it cannot be an hour old.
if ! [[ $age =~ ^[0-9]+$ ]] || ((age > 60000)); then
  fail "oldest_age_ms $age is not a small age"
fi
sleep 0.2
age2=$(stat_field st oldest_age_ms)
((age2 >= age + 150)) || fail "oldest_age_ms does not grow with time: $age then $age2 after 0.2 s"

# Text output: a header and one row per queue, plus the lifetime line for one queue.
assert_exit 0 "$Q" stats st
mapfile -t lines <<<"$OUT"
read -r -a head <<<"${lines[0]}"
assert_eq "QUEUE VISIBLE IN_FLIGHT DELAYED DEAD OLDEST SENT ACKED" "${head[*]}" "stats text header"
read -r -a row <<<"${lines[1]}"
assert_eq "st 2 1 1 1" "${row[*]:0:5}" "stats text row: queue visible in_flight delayed dead"
assert_match '^[0-9]+\.[0-9]s$' "${row[5]}" "stats text row: OLDEST like 0.4s"
assert_eq "6 1" "${row[*]:6:2}" "stats text row: sent acked"
assert_contains "$OUT" "lifetime: sent 6, received 4, acked 1, nacked 1, dead-lettered 1, redriven 0, expired 0, deduplicated 1, stale acks 1" \
  "stats text: lifetime counters"

# A redrive counts; counters never go down, even after purge.
assert_exit 0 "$Q" redrive st
assert_eq 1 "$(stat_field st redriven)" "redriven counter"
assert_exit 0 "$Q" purge st
s=$(stats_json st)
assert_eq '{"visible":0,"in_flight":0,"delayed":0,"dead":0,"oldest_age_ms":null,"sent":6,"received":4,"acked":1}' \
  "$(jq -c '{visible,in_flight,delayed,dead,oldest_age_ms,sent,received,acked}' <<<"$s")" \
  "after purge: empty, counters kept"

# Every queue: one JSON line each; text table with a row each and no lifetime line.
assert_exit 0 "$Q" create other
assert_exit 0 "$Q" send other x
assert_exit 0 "$Q" stats --json
assert_eq '["other","st"]' "$(jq -cs 'map(.queue)' <<<"$OUT")" "stats --json of every queue"
assert_eq 1 "$(jq -s 'map(select(.queue=="other"))[0].visible' <<<"$OUT")" "stats --json: other's visible"
assert_exit 0 "$Q" stats
assert_eq 3 "$(grep -c . <<<"$OUT")" "stats text of every queue: header and two rows"
assert_not_contains "$OUT" "lifetime" "stats of every queue: no lifetime line"

# stats is read-only: it does not change the file (a file's bytes; on NATS
# there is no file to compare).
if ! on_nats; then
  cp "$Q_FILE" "$T/before.q"
  assert_exit 0 "$Q" stats
  assert_exit 0 "$Q" stats st --json
  cmp -s "$T/before.q" "$Q_FILE" || fail "q stats changed the queue file"
fi
