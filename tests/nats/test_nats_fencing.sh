#!/usr/bin/env bash
# Fencing under contention: consumers with a 1 s lease that take 0-2 s to ack
# race each other's redeliveries. Every message must be acked successfully
# exactly once, and by its LAST delivery (after a good ack nothing is delivered
# again, and an ack of an earlier delivery once a later one exists is stale):
# every other ack is refused as stale (exit 3); the queue ends empty. Without
# the receipt check a late holder's ack would win (JetStream has no fencing),
# which the last-delivery check catches (verified by disabling the check).
#   test_nats_fencing.sh Q_BINARY [MESSAGES] [CONSUMERS]
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_test fence "${1:?usage: test_nats_fencing.sh Q_BINARY [MESSAGES] [CONSUMERS]}"
messages=${2:-40}
consumers=${3:-4}
export Q_FILE="$urls/fence"
# Never dead-lettered (max receives 0): every message must end acked.
"$Q" create race --visibility-timeout 1s --max-receives 0 || { echo "FAIL: create"; exit 1; }
seq 1 "$messages" | "$Q" send race --lines >/dev/null || { echo "FAIL: send"; exit 1; }

consumer() {  # N: receive, hold 0-2 s, ack; log "ID EXIT" per ack
  RANDOM=$1
  local idle=0 out id receipt
  while ((idle < 3)); do
    out=$("$Q" receive race --wait 1s --json 2>/dev/null) || { idle=$((idle + 1)); continue; }
    idle=0
    id=$(jq -r .id <<<"$out")
    receipt=$(jq -r .receipt <<<"$out")
    echo "$id $receipt $(jq -r .receive_count <<<"$out")" >>"$T/recv.$1"
    sleep "$((RANDOM % 20 / 10)).$((RANDOM % 10))"
    "$Q" ack race "$receipt" >/dev/null 2>&1
    echo "$id $? $receipt" >>"$T/acks.$1"
  done
}
for ((c = 1; c <= consumers; c++)); do consumer "$c" & done
wait
cat "$T"/acks.* >"$T/acks"
cat "$T"/recv.* >"$T/recv"
# The receipt of each message's last delivery, and the receipt acked for it.
not_last=$(join <(sort -k1,1 -k3,3n "$T/recv" | awk '{last[$1] = $2} END {for (i in last) print i, last[i]}' | sort) \
                <(awk '$2 == 0 {print $1, $3}' "$T/acks" | sort) | awk '$2 != $3' | wc -l)

done_ids=$(awk '$2 == 0 {print $1}' "$T/acks" | sort)
unique=$(uniq <<<"$done_ids" | grep -c . || true)
twice=$(uniq -d <<<"$done_ids" | grep -c . || true)
stale=$(awk '$2 == 3' "$T/acks" | wc -l)
other=$(awk '$2 != 0 && $2 != 3' "$T/acks" | wc -l)
echo "acks: $(wc -l <"$T/acks") attempts, $unique messages acked, $stale refused as stale, $twice acked twice, $other other failures"
((unique == messages)) || fail "$unique of $messages messages acked"
((twice == 0)) || fail "$twice messages acked by two deliveries: $(uniq -d <<<"$done_ids" | head -3 | tr '\n' ' ')"
((not_last == 0)) || fail "$not_last messages acked by a delivery that was not their last (a stale receipt acted)"
((other == 0)) || fail "$other acks failed otherwise: $(awk '$2 != 0 && $2 != 3' "$T/acks" | head -3 | tr '\n' ' ')"
# Holds of 0-2 s against a 1 s lease: about half the acks come after their
# lease ran out, and some of those after a redelivery. None refused as stale
# means the fence was never tested (or never acts): that is no pass.
((stale > 0)) || fail "no ack was refused as stale: the late acks (holds up to 2 s, lease 1 s) all went through, or none came late; the fence was not tested"
stats=$("$Q" stats race --json)
[[ $(jq -r '.visible + .in_flight + .delayed' <<<"$stats") == 0 ]] || fail "queue not empty: $stats"
finish "fencing under contention"
