#!/usr/bin/env bash
# Visibility timeouts, redelivery, extend and nack.
#
# Timing: a short lease (200ms) is only ever followed by a sleep longer than it,
# never by a check that it is still running (a loaded machine may take longer than
# 200ms between two commands). That a lease is as long as asked is checked on the
# JSON instead: visible_until - last_received_at.
source "$(dirname "$0")/lib.sh" "$@"

# receive_json QUEUE [ARGS...]: receive one message as JSON into $MSG, or fail.
receive_json() {
  local queue=$1
  shift
  run "$Q" receive "$queue" --json "$@"
  MSG=$OUT
  if [[ $RC != 0 ]]; then
    fail "expected a message from: $RUN_CMD (exit $RC, stderr: $ERR)"
    MSG='{}'
  fi
}

# lease_ms: the lease of the delivery in $MSG, in milliseconds.
lease_ms() {
  jq -r 'def ms: sub("Z$"; "") | split(".") | ((.[0] + "Z") | fromdateiso8601) * 1000 + (.[1] | tonumber);
         if .visible_until and .last_received_at then (.visible_until | ms) - (.last_received_at | ms) else "none" end' <<<"$MSG"
}

# ---- a lease runs out: the message comes back with a new receipt ----------------------
assert_exit 0 "$Q" create vis
assert_exit 0 "$Q" send vis payload
id=$OUT
receive_json vis --visibility-timeout 200ms
assert_eq "$id" "$(jq -r .id <<<"$MSG")" "first delivery"
assert_eq 1 "$(jq -r .receive_count <<<"$MSG")" "first delivery: receive_count 1"
assert_eq 200 "$(lease_ms)" "receive --visibility-timeout 200ms: visible_until = received + 200ms"
r1=$(jq -r .receipt <<<"$MSG")
sleep 0.3
assert_eq 1 "$(stat_field vis visible)" "visible again once the lease ran out"
assert_eq 0 "$(stat_field vis in_flight)" "no longer in flight once the lease ran out"
receive_json vis --visibility-timeout 200ms
assert_eq "$id" "$(jq -r .id <<<"$MSG")" "redelivery: same id"
assert_eq 2 "$(jq -r .receive_count <<<"$MSG")" "redelivery: receive_count 2"
r2=$(jq -r .receipt <<<"$MSG")
[[ $r2 != "$r1" ]] || fail "redelivery reused the receipt $r1"
assert_eq "payload" "$(jq -r .body <<<"$MSG")" "redelivery: same body"
assert_exit 3 "$Q" ack vis "$r1"
assert_contains "$ERR" "stale" "the receipt of an earlier delivery is stale"
assert_exit 3 "$Q" extend vis "$r1" --by 10s
assert_exit 3 "$Q" nack vis "$r1"
assert_exit 0 "$Q" ack vis "$r2"
assert_exit 1 "$Q" receive vis

# A received message is hidden while its lease runs (the queue default, 30s).
assert_exit 0 "$Q" create hidden
assert_exit 0 "$Q" send hidden h
receive_json hidden
assert_eq 30000 "$(lease_ms)" "default lease: 30s"
assert_exit 1 "$Q" receive hidden
assert_eq "0 1" "$(stats_json hidden | jq -r '"\(.visible) \(.in_flight)"')" "hidden while leased: visible 0, in_flight 1"
assert_exit 0 "$Q" ack hidden "$(jq -r .receipt <<<"$MSG")"

# An expired lease that nobody took over: the receipt still acks (no redelivery yet).
assert_exit 0 "$Q" create late
assert_exit 0 "$Q" send late l
receive_json late --visibility-timeout 200ms
r=$(jq -r .receipt <<<"$MSG")
sleep 0.3
assert_exit 0 "$Q" ack late "$r"
assert_exit 1 "$Q" receive late

# --visibility-timeout 0s: visible again at once.
assert_exit 0 "$Q" create zero
assert_exit 0 "$Q" send zero z
id=$OUT
receive_json zero --visibility-timeout 0s
receive_json zero --visibility-timeout 0s
assert_eq "$id" "$(jq -r .id <<<"$MSG")" "0s lease: delivered again at once"
assert_eq 2 "$(jq -r .receive_count <<<"$MSG")" "0s lease: receive_count 2"
assert_exit 0 "$Q" ack zero "$(jq -r .receipt <<<"$MSG")"

# The queue's own visibility timeout applies when receive gives none.
assert_exit 0 "$Q" create short --visibility-timeout 200ms
assert_exit 0 "$Q" send short s
receive_json short
assert_eq 200 "$(lease_ms)" "queue --visibility-timeout 200ms: the lease"
sleep 0.3
receive_json short
assert_eq 2 "$(jq -r .receive_count <<<"$MSG")" "queue visibility timeout 200ms: redelivered"
assert_exit 0 "$Q" ack short "$(jq -r .receipt <<<"$MSG")"

# ---- extend keeps the message hidden and the receipt valid ---------------------------------
assert_exit 0 "$Q" create ext
assert_exit 0 "$Q" send ext long-job
receive_json ext --visibility-timeout 200ms
r=$(jq -r .receipt <<<"$MSG")
assert_exit 0 "$Q" extend ext "$r" --by 10s --json
assert_eq "$r" "$(jq -r .receipt <<<"$OUT")" "extend --json: receipt"
until=$(jq -r '.visible_until | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601' <<<"$OUT")
now=$(date +%s)
((until >= now + 8 && until <= now + 11)) || fail "extend --by 10s: visible_until $until is not about now+10s ($now)"
sleep 0.3
assert_exit 1 "$Q" receive ext
assert_eq 1 "$(stat_field ext in_flight)" "extended message still in flight after its first lease"
assert_exit 0 "$Q" extend ext "$r" --by 200ms   # heartbeat: the receipt stays valid
assert_exit 0 "$Q" ack ext "$r"
assert_exit 1 "$Q" receive ext
if nats_lacks counters; then
  assert_eq "0 0" "$(stats_json ext | jq -r '"\(.in_flight) \(.visible)"')" "acked after extend"
else
  assert_eq "0 0 1" "$(stats_json ext | jq -r '"\(.in_flight) \(.visible) \(.acked)"')" "acked after extend"
fi
# Extending may also shorten the lease.
assert_exit 0 "$Q" send ext shorten
receive_json ext
r=$(jq -r .receipt <<<"$MSG")
assert_exit 0 "$Q" extend ext "$r" --by 0s
receive_json ext
assert_eq 2 "$(jq -r .receive_count <<<"$MSG")" "extend --by 0s: delivered again at once"
assert_exit 3 "$Q" ack ext "$r"
assert_exit 3 "$Q" extend ext "$r" --by 10s
assert_exit 0 "$Q" ack ext "$(jq -r .receipt <<<"$MSG")"

# ---- nack releases at once; its receipt is spent -------------------------------------------
assert_exit 0 "$Q" create nack
assert_exit 0 "$Q" send nack retry-me
id=$OUT
receive_json nack
r1=$(jq -r .receipt <<<"$MSG")
assert_exit 0 "$Q" nack nack "$r1"
assert_eq "1 0" "$(stats_json nack | jq -r '"\(.visible) \(.in_flight)"')" "nacked message is visible at once"
assert_exit 3 "$Q" ack nack "$r1"
assert_contains "$ERR" "stale" "ack of a nacked receipt: stale"
assert_exit 3 "$Q" nack nack "$r1"
assert_exit 3 "$Q" extend nack "$r1" --by 10s
receive_json nack
assert_eq "$id" "$(jq -r .id <<<"$MSG")" "after nack: delivered again immediately"
assert_eq 2 "$(jq -r .receive_count <<<"$MSG")" "after nack: receive_count 2"
r2=$(jq -r .receipt <<<"$MSG")
[[ $r2 != "$r1" ]] || fail "delivery after nack reused the receipt"
assert_exit 3 "$Q" ack nack "$r1"
assert_exit 0 "$Q" ack nack "$r2"
nats_lacks counters || assert_eq 1 "$(stat_field nack nacked)" "nacked counter"

# nack --delay 1h: delayed, not visible, not in flight.
assert_exit 0 "$Q" create nackd
assert_exit 0 "$Q" send nackd later
receive_json nackd
r=$(jq -r .receipt <<<"$MSG")
assert_exit 0 "$Q" nack nackd "$r" --delay 1h --json
assert_eq "$r" "$(jq -r .receipt <<<"$OUT")" "nack --json: receipt"
visible_at=$(jq -r '.visible_at | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601' <<<"$OUT")
now=$(date +%s)
((visible_at >= now + 3590 && visible_at <= now + 3601)) || fail "nack --delay 1h: visible_at $visible_at is not now+1h ($now)"
s=$(stats_json nackd)
assert_eq 1 "$(jq .delayed <<<"$s")" "nack --delay 1h: stats delayed"
assert_eq 0 "$(jq .visible <<<"$s")" "nack --delay 1h: stats visible"
assert_eq 0 "$(jq .in_flight <<<"$s")" "nack --delay 1h: stats in_flight"
assert_exit 1 "$Q" receive nackd
assert_exit 0 "$Q" peek nackd --json
assert_eq "delayed" "$(jq -r .state <<<"$OUT")" "peek: nacked with delay is delayed"
assert_exit 3 "$Q" ack nackd "$r"

# nack --delay 200ms: visible_at is 200ms after the nack, and it comes back by itself.
assert_exit 0 "$Q" create nacks
assert_exit 0 "$Q" send nacks soon
receive_json nacks
t0=$(now_ms)
assert_exit 0 "$Q" nack nacks "$(jq -r .receipt <<<"$MSG")" --delay 200ms --json
t1=$(now_ms)
va=$(jq -r '.visible_at | sub("Z$"; "") | split(".") | ((.[0] + "Z") | fromdateiso8601) * 1000 + (.[1] | tonumber)' <<<"$OUT")
((va >= t0 + 200 - 5 && va <= t1 + 200 + 5)) || fail "nack --delay 200ms: visible_at $va not in [$t0+200, $t1+200]"
sleep 0.3
receive_json nacks
assert_eq "soon" "$(jq -r .body <<<"$MSG")" "nack --delay 200ms: delivered after the delay"
assert_eq 2 "$(jq -r .receive_count <<<"$MSG")" "nack --delay 200ms: second delivery"
assert_exit 0 "$Q" ack nacks "$(jq -r .receipt <<<"$MSG")"

# ---- send --delay ---------------------------------------------------------------------------
if nats_lacks delay; then
  skip_part "delayed messages (send --delay) are not on NATS yet"
else
  assert_exit 0 "$Q" create delay
  assert_exit 0 "$Q" send delay in-an-hour --delay 1h
  assert_eq "0 0 1" "$(stats_json delay | jq -r '"\(.visible) \(.in_flight) \(.delayed)"')" "send --delay 1h: delayed"
  assert_exit 1 "$Q" receive delay
  assert_exit 0 "$Q" send delay soon --delay 200ms
  sleep 0.3
  assert_eq "1 1" "$(stats_json delay | jq -r '"\(.visible) \(.delayed)"')" "send --delay 200ms: visible after the delay"
  receive_json delay
  assert_eq "soon" "$(jq -r .body <<<"$MSG")" "delayed send: delivered after its delay"
  assert_eq 1 "$(jq -r .receive_count <<<"$MSG")" "delayed send: first delivery"
  assert_exit 0 "$Q" ack delay "$(jq -r .receipt <<<"$MSG")"
  assert_exit 1 "$Q" receive delay
fi
