#!/usr/bin/env bash
# send --dedup-id: a repeat inside the window stores nothing and prints the first id.
source "$(dirname "$0")/lib.sh" "$@"

assert_exit 0 "$Q" create dd
assert_exit 0 "$Q" send dd first --dedup-id order-42
id=$OUT
assert_match '^m[0-9a-f]+$' "$id" "dedup send prints an id"
assert_exit 0 "$Q" send dd second --dedup-id order-42
assert_eq "$id" "$OUT" "a repeated dedup id prints the first message's id"
assert_exit 0 "$Q" send dd third --dedup-id order-42 --json
assert_eq "{\"id\":\"$id\",\"duplicate\":true}" "$OUT" "send --json marks the duplicate"

s=$(stats_json dd)
assert_eq 1 "$(jq .visible <<<"$s")" "duplicates store nothing: visible 1"
assert_eq 1 "$(jq .sent <<<"$s")" "duplicates are not counted as sent"
nats_lacks counters || assert_eq 2 "$(jq .deduplicated <<<"$s")" "deduplicated counts each repeat"

assert_exit 0 "$Q" peek dd --json
assert_eq 1 "$(grep -c . <<<"$OUT")" "peek shows one message"
assert_eq "first" "$(jq -r .body <<<"$OUT")" "the first body stands"
assert_eq "order-42" "$(jq -r .dedup_id <<<"$OUT")" "peek --json shows the dedup id"

# Another dedup id is another message; no dedup id never deduplicates.
assert_exit 0 "$Q" send dd other --dedup-id order-43
[[ $OUT != "$id" ]] || fail "a different dedup id returned the same message id"
assert_exit 0 "$Q" send dd plain
p1=$OUT
assert_exit 0 "$Q" send dd plain
[[ $OUT != "$p1" ]] || fail "two sends without a dedup id were deduplicated"
assert_eq 4 "$(stat_field dd visible)" "visible after distinct sends"

# The id stays remembered after the message is received and acked (inside the window).
assert_exit 0 "$Q" receive dd --json
assert_eq "$id" "$(jq -r .id <<<"$OUT")" "the dedup'd message is received"
assert_exit 0 "$Q" ack dd "$(jq -r .receipt <<<"$OUT")"
assert_exit 0 "$Q" send dd again --dedup-id order-42 --json
assert_eq "{\"id\":\"$id\",\"duplicate\":true}" "$OUT" "dedup id remembered after the ack"
assert_eq 3 "$(stat_field dd visible)" "repeat after ack stores nothing"

# Dedup ids are per queue.
assert_exit 0 "$Q" create dd2
assert_exit 0 "$Q" send dd2 first --dedup-id order-42
# On NATS message ids are per queue (README, Differences on NATS): the count below shows it.
on_nats || [[ $OUT != "$id" ]] || fail "dedup ids leak across queues"
assert_eq 1 "$(stat_field dd2 visible)" "same dedup id in another queue is stored"

# The window ends. (1s, so that the repeat right away is inside it even on a
# loaded machine.)
assert_exit 0 "$Q" create short --dedup-window 1s
assert_exit 0 "$Q" send short a --dedup-id k
k1=$OUT
assert_exit 0 "$Q" send short b --dedup-id k
assert_eq "$k1" "$OUT" "inside the 1s window: duplicate"
sleep 1.1
assert_exit 0 "$Q" send short c --dedup-id k --json
assert_eq false "$(jq .duplicate <<<"$OUT")" "after the window: not a duplicate"
[[ $(jq -r .id <<<"$OUT") != "$k1" ]] || fail "after the dedup window: still the old id"
assert_eq 2 "$(stat_field short visible)" "after the window: stored"

# --dedup-id does not go with batches; too long an id is bad data.
assert_exit_in 64 $'a\nb\n' "$Q" send dd --lines --dedup-id x
assert_exit 64 "$Q" send dd -0 --dedup-id x
assert_exit 65 "$Q" send dd body --dedup-id "$(printf 'x%.0s' {1..129})"
assert_exit 0 "$Q" send dd body --dedup-id "$(printf 'x%.0s' {1..128})"
