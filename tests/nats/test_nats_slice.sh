#!/usr/bin/env bash
# The NATS JetStream backend's first slice (issue 16) against a real 3-node
# cluster started by scripts/nats-cluster, through the static `q` (which hands
# nats:// locations to q-nats): location errors; create/config in the KV
# bucket with R3 streams; send (single, --lines, dedup); receive -n and the
# --wait long poll woken by a send; ack/extend/nack and stale receipts (exit 3)
# after a redelivery; stats exact; max depth (exit 75).
#   test_nats_slice.sh Q_BINARY
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_test slice "${1:?usage: test_nats_slice.sh Q_BINARY}"
export Q_FILE="$urls/slice"

# ---- locations -----------------------------------------------------------------
q -f "nats://127.0.0.1:$CLIENT_1" stats
expect 64 "a location without a namespace"
[[ $ERR == *"no namespace"* ]] || fail "no namespace: message was '$ERR'"
q -f "nats://127.0.0.1:$CLIENT_1/bad_ns" stats
expect 64 "a namespace with '_'"
q -f "nats://127.0.0.1:1/x" --lock-timeout 1s stats
expect 69 "no server listening"
[[ $ERR == *"no NATS server answered"* ]] || fail "unreachable: message was '$ERR'"

# ---- create, config: R3 stream, settings in the KV bucket -------------------------
q create jobs --visibility-timeout 2s
expect 0 "create"
q create jobs --visibility-timeout 2s
expect 0 "create again with the same settings"
q create jobs --visibility-timeout 5s
expect 64 "create again with other settings"
replicas=$(python3 - "$MON_1" <<'EOF'
import json, sys, urllib.request
d = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/jsz?streams=true&config=true"))
for a in d.get("account_details", []):
    for s in a.get("stream_detail", []):
        if s["name"] == "Q_slice_jobs":
            print(s["config"]["num_replicas"])
EOF
)
[[ $replicas == 3 ]] || fail "the queue's stream has '$replicas' replicas, not 3"
q list
[[ $OUT == jobs ]] || fail "list: '$OUT'"
q config jobs --max-receives 9
expect 0 "config"
max_receives=$("$Q" config jobs --json | jq -r .max_receives)
[[ $max_receives == 9 ]] || fail "config jobs --max-receives 9, then q config jobs shows max_receives '$max_receives'"
q receive nosuch
expect 66 "receive from a queue that does not exist"

# ---- send, receive, ack ------------------------------------------------------------
q send jobs hello --attr k=v
expect 0 "send"
id=$OUT
q receive jobs --json
expect 0 "receive"
[[ $(jq -r .id <<<"$OUT") == "$id" ]] || fail "received $(jq -r .id <<<"$OUT"), sent $id"
[[ $(jq -r .body <<<"$OUT") == hello ]] || fail "body: $OUT"
[[ $(jq -r .attributes.k <<<"$OUT") == v ]] || fail "attributes: $OUT"
r=$(jq -r .receipt <<<"$OUT")
[[ $(stat_field jobs in_flight) == 1 && $(stat_field jobs visible) == 0 ]] || fail "stats while in flight: $("$Q" stats jobs --json)"
q ack jobs "$r"
expect 0 "ack"
q ack jobs "$r"
expect 3 "ack of an acked receipt"
q ack jobs m1.zz
expect 65 "a malformed receipt"
[[ $(stat_field jobs visible) == 0 && $(stat_field jobs in_flight) == 0 ]] || fail "stats after ack: $("$Q" stats jobs --json)"
q receive jobs
expect 1 "receive from an empty queue"

# ---- a stale receipt after redelivery is refused (exit 3) -----------------------------
q send jobs again
q receive jobs --json
r1=$(jq -r .receipt <<<"$OUT")
sleep 2.5  # the 2s lease runs out
q receive jobs --json
expect 0 "redelivery after the lease ran out"
r2=$(jq -r .receipt <<<"$OUT")
[[ $(jq -r .receive_count <<<"$OUT") == 2 ]] || fail "redelivery's receive count: $OUT"
[[ $r2 != "$r1" ]] || fail "the redelivery reused receipt $r1"
q ack jobs "$r1"
expect 3 "ack with the receipt of the earlier delivery"
[[ $ERR == *"delivered again since"* ]] || fail "stale ack message: '$ERR'"
q extend jobs "$r1" --by 10s
expect 3 "extend with the earlier receipt"
q nack jobs "$r1"
expect 3 "nack with the earlier receipt"
[[ $(stat_field jobs in_flight) == 1 ]] || fail "the stale ack acted: $("$Q" stats jobs --json)"
# ---- extend: the lease and JetStream's timer move together --------------------------
q extend jobs "$r2" --by 6s
expect 0 "extend"
sleep 2.5
q receive jobs
expect 1 "receive while the extended lease holds"
# ---- nack: released at once, the receipt spent ----------------------------------------
q nack jobs "$r2" --reason flaky
expect 0 "nack"
q ack jobs "$r2"
expect 3 "ack after nack"
q receive jobs --json
expect 0 "receive after nack"
[[ $(jq -r .receive_count <<<"$OUT") == 3 && $(jq -r .reason <<<"$OUT") == flaky ]] ||
  fail "after nack: $OUT"
q ack jobs "$(jq -r .receipt <<<"$OUT")"
expect 0 "ack after the nack's redelivery"

# ---- batch, -n, dedup, stats ----------------------------------------------------------
q create batch
seq 1 100 | "$Q" send batch --lines >"$T/ids"
[[ $(sort -u "$T/ids" | wc -l) == 100 ]] || fail "--lines: $(wc -l <"$T/ids") ids"
[[ $(stat_field batch visible) == 100 ]] || fail "stats after 100 sends: $("$Q" stats batch --json)"
[[ $(stat_field batch oldest_age_ms) =~ ^[0-9]+$ ]] || fail "oldest_age_ms: $("$Q" stats batch --json)"
q receive batch -n 10 --json
[[ $(wc -l <<<"$OUT") == 10 ]] || fail "receive -n 10 gave $(wc -l <<<"$OUT")"
[[ $(jq -r .body <<<"$OUT" | tr '\n' ' ') == "1 2 3 4 5 6 7 8 9 10 " ]] || fail "order: $(jq -r .body <<<"$OUT" | tr '\n' ' ')"
jq -r .receipt <<<"$OUT" | "$Q" ack batch >/dev/null || fail "ack of 10 receipts from stdin"
[[ $(stat_field batch visible) == 90 && $(stat_field batch in_flight) == 0 ]] || fail "stats after acking 10: $("$Q" stats batch --json)"
q send batch x --dedup-id once --json
first=$OUT
q send batch y --dedup-id once --json
[[ $(jq -r .duplicate <<<"$OUT") == true && $(jq -r .id <<<"$OUT") == $(jq -r .id <<<"$first") ]] ||
  fail "dedup: $first then $OUT"
q purge batch
[[ $OUT == *91* || $(stat_field batch visible) == 0 ]] || fail "purge: $OUT"

# ---- max depth: exit 75, nothing sent --------------------------------------------------
q create small --max-depth 2
q send small a; q send small b
q send small c
expect 75 "a send over max depth"
[[ $(stat_field small visible) == 2 ]] || fail "max depth: $("$Q" stats small --json)"

# ---- --wait: a long poll woken by a send within milliseconds ----------------------------
q create poll
( "$Q" receive poll --wait 20s --json >"$T/poll.out"; echo $? >"$T/poll.rc"; now_ms >"$T/poll.end" ) &
sleep 1
sent=$(now_ms)
"$Q" send poll ping >/dev/null
wait
[[ $(cat "$T/poll.rc") == 0 && $(jq -r .body "$T/poll.out") == ping ]] || fail "long poll: $(cat "$T/poll.out")"
woke=$(($(cat "$T/poll.end") - sent))
((woke < 1000 * scale)) || fail "the long poll returned ${woke} ms after the send"
echo "long poll returned ${woke} ms after the send"

# ---- export (tests/nats/test_nats_transfer.sh has the rest) ----------------------------------
q export jobs
expect 0 "export"

finish "NATS slice"
