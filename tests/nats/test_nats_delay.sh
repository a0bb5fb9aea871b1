#!/usr/bin/env bash
# Delayed messages on the NATS backend (issue 16; JetStream 2.9 has no
# scheduled publish): send --delay/--at and the queue's delay against a real
# 3-node cluster. Stats count them delayed, exactly; a receive passes them
# over (and still gets what is visible behind them); a --wait receive gets
# one when it comes due, woken by JetStream's timer, not by polling; a
# delay beyond the retention is refused (65); the receive count starts at 1.
#   test_nats_delay.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_test delay "${1:?usage: test_nats_delay.sh Q_BINARY}"
export Q_FILE="$urls/delay"

# ---- --delay: delayed, passed over, the message behind it delivered ------------------
q create jobs --visibility-timeout 5s
q send jobs later --delay 3s
expect 0 "send --delay"
sent_later=$(now_ms)
[[ $(counts jobs) == "0 0 1" ]] || fail "stats after a delayed send: $(counts jobs) (visible in_flight delayed)"
q receive jobs
expect 1 "receive while the only message is delayed"
q send jobs now
q receive jobs --json
expect 0 "receive of the visible message behind a delayed one"
[[ $(jq -r .body <<<"$OUT") == now ]] || fail "received '$OUT', expected 'now'"
"$Q" ack jobs "$(jq -r .receipt <<<"$OUT")" || fail "ack of 'now'"
[[ $(counts jobs) == "0 0 1" ]] || fail "stats: the pass-over changed the delayed message: $(counts jobs)"
# A --wait receive started now gets it when it comes due (JetStream's timer,
# re-armed by the pass-over), not earlier, and not much later.
q receive jobs --wait 20s --json
got=$(now_ms)
expect 0 "receive --wait of the delayed message"
[[ $(jq -r .body <<<"$OUT") == later ]] || fail "received '$OUT', expected 'later'"
[[ $(jq -r .receive_count <<<"$OUT") == 1 ]] || fail "a delayed message's first receive count: $OUT"
late=$((got - sent_later))
((late >= 2900)) || fail "delivered ${late} ms after a 3s-delayed send"
((late < 3000 + 2000 * scale)) || fail "delivered only ${late} ms after a 3s-delayed send"
echo "a 3s-delayed message was received ${late} ms after its send"
[[ $(counts jobs) == "0 1 0" ]] || fail "stats once received: $(counts jobs)"
"$Q" ack jobs "$(jq -r .receipt <<<"$OUT")" || fail "ack of 'later'"

# ---- --at ------------------------------------------------------------------------------
at=$(($(date +%s) + 3))
q send jobs at-msg --at "@$at"
expect 0 "send --at"
[[ $(counts jobs) == "0 0 1" ]] || fail "stats after send --at: $(counts jobs)"
q receive jobs --wait 20s --json
got=$(now_ms)
[[ $(jq -r .body <<<"$OUT") == at-msg ]] || fail "--at: received '$OUT'"
((got >= at * 1000 - 100)) || fail "--at: received $((at * 1000 - got)) ms before its time"
"$Q" ack jobs "$(jq -r .receipt <<<"$OUT")" || fail "ack of at-msg"
q send jobs past --at "@$(($(date +%s) - 60))"
[[ $(counts jobs) == "1 0 0" ]] || fail "an --at in the past is visible at once: $(counts jobs)"
q receive jobs --json
"$Q" ack jobs "$(jq -r .receipt <<<"$OUT")" || fail "ack of past"

# ---- the queue's delay, overridden by --delay 0; a batch -----------------------------------
q create slow --delay 2s
seq 1 50 | "$Q" send slow --lines >/dev/null || fail "send --lines to a delayed queue"
q send slow urgent --delay 0
[[ $(counts slow) == "1 0 50" ]] || fail "queue delay: $(counts slow), expected '1 0 50'"
q receive slow -n 10 --json
[[ $(jq -r .body <<<"$OUT") == urgent ]] || fail "receive -n 10 from a delayed queue: '$OUT'"
"$Q" ack slow "$(jq -r .receipt <<<"$OUT")" >/dev/null || fail "ack of urgent"
deadline=$(($(now_ms) + 2500 + 2000 * scale))
while [[ $(counts slow) != "50 0 0" ]] && (($(now_ms) < deadline)); do sleep 0.2; done
[[ $(counts slow) == "50 0 0" ]] || fail "the batch did not come due: $(counts slow)"
n=0
while :; do
  out=$("$Q" receive slow -n 20 --json) || break
  n=$((n + $(wc -l <<<"$out")))
  jq -r .receipt <<<"$out" | "$Q" ack slow >/dev/null || fail "ack of the batch"
done
[[ $n == 50 ]] || fail "received $n of the 50 delayed messages"

# ---- refusals ------------------------------------------------------------------------------
q create short --retention 1m
q send short x --delay 2m
expect 65 "a delay beyond the retention"
[[ $ERR == *retention* ]] || fail "the refusal names the retention: '$ERR'"
[[ $(counts short) == "0 0 0" ]] || fail "a refused delayed send stored something: $(counts short)"

# ---- nack --delay keeps counting as delayed (the same lease rule) --------------------------
q send jobs retry
q receive jobs --json
q nack jobs "$(jq -r .receipt <<<"$OUT")" --delay 3s
[[ $(counts jobs) == "0 0 1" ]] || fail "stats after nack --delay: $(counts jobs)"

finish "NATS delays"
