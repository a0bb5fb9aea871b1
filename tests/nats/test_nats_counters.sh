#!/usr/bin/env bash
# Lifetime counters on nats:// (nats/counters.*) stay exact across kill -9 of
# q processes mid-operation and across concurrent consumers in several
# processes. Three consumers receive and ack (1 s leases, max receives 3)
# while a killer sends SIGKILL to their q processes at random moments (in a
# receive, an ack, or between); then a drain without kills that also nacks,
# dead letters redriven and acked. What the counters must say is worked out
# from what the processes saw, not from q's own numbers:
#   sent = messages sent, deduplicated = repeats sent with a used dedup id,
#   acked = messages (each ends acked exactly once, kill or not),
#   received = per message, the receive count of the delivery that ended its
#     life (acked: its last delivery seen; dead: the dead letter's count;
#     a killed receive is in the next receive count), summed,
#   nacked = nacks that succeeded (only in the phase without kills),
#   dead_lettered = redriven = dead letters moved back.
# And while the kills go on, no counter ever goes down.
#   test_nats_counters.sh Q_BINARY [MESSAGES]
# Skipped (77) without nats-server or q-nats (a failure under CI=true or Q_REQUIRE_ALL=1).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../scripts/nats-cluster
Q=${1:?usage: test_nats_counters.sh Q_BINARY [MESSAGES]}
messages=${2:-60}
source "$here/lib.sh"   # nats_require; this test's own harness follows
nats_require "$Q"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
dir=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-counters.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; "$cluster" stop "$dir/c" >/dev/null 2>&1; rm -rf "$dir"' EXIT
urls=$("$cluster" start "$dir/c" 3) || { echo "FAIL: cluster start"; exit 1; }
export Q_FILE="$urls/counters"
qn=cnt$$  # the killer finds the consumers' q processes by it
"$Q" create "$qn" --visibility-timeout 1s --max-receives 3 --dedup-window 10m ||
  { echo "FAIL: create"; exit 1; }
seq 1 "$messages" | "$Q" send "$qn" --lines >/dev/null || { echo "FAIL: send"; exit 1; }
# Repeats: the first send of each id counts as sent, the second as deduplicated.
for i in 1 2 3; do
  "$Q" send "$qn" "dup $i" --dedup-id "d$i" >/dev/null || fail "send dup $i"
  "$Q" send "$qn" "dup $i again" --dedup-id "d$i" >/dev/null || fail "repeat dup $i"
done
sent=$((messages + 3))
# Documented difference (README, Differences on NATS): messages past their
# retention leave by the stream's age limit and `expired` stays 0.
"$Q" create exp --retention 1m >/dev/null || fail "create exp"
"$Q" send exp old >/dev/null || fail "send exp"
exp_sent=$SECONDS

# A consumer: receive, then ack (or, one time in five, leave it to time out).
# Only the q process is killed; this loop logs what it saw:
#   R ID COUNT RECEIPT    a delivery seen
#   A ID EXIT RECEIPT     an ack and how it ended (137: killed)
consumer() {
  RANDOM=$1
  local out id receipt count
  while [[ ! -e $dir/stop ]]; do
    out=$("$Q" receive "$qn" --wait 500ms --json 2>/dev/null) || continue
    [[ -n $out ]] || continue
    id=$(jq -r .id <<<"$out")
    receipt=$(jq -r .receipt <<<"$out")
    count=$(jq -r .receive_count <<<"$out")
    echo "R $id $count $receipt" >>"$dir/log.$1"
    ((RANDOM % 5 == 0)) && continue
    ("$Q" ack "$qn" "$receipt" >/dev/null 2>&1)
    echo "A $id $? $receipt" >>"$dir/log.$1"
  done
}
for c in 1 2 3; do consumer "$c" & pids[c]=$!; done
# The killer: SIGKILL to a random q process of the consumers, every 0.1-0.3 s.
for ((k = 0; k < 30; k++)); do
  sleep "0.$((RANDOM % 3 + 1))"
  victim=$(pgrep -f "(receive|ack) $qn " | shuf -n 1)
  [[ -n $victim ]] && kill -9 "$victim" 2>/dev/null && echo "$victim" >>"$dir/kills"
done &
killer=$!
# Counters never go down.
last=""
watch_until=$((SECONDS + 8))
while ((SECONDS < watch_until)); do
  now=$("$Q" stats "$qn" --json 2>/dev/null | jq -c '[.sent,.received,.acked,.nacked,.dead_lettered,.redriven,.deduplicated]')
  if [[ -n $last && -n $now ]]; then
    jq -e --argjson a "$last" --argjson b "$now" '[range(0; 7)] | all($a[.] <= $b[.])' >/dev/null ||
      fail "a counter went down: $last then $now"
  fi
  [[ -n $now ]] && last=$now
  sleep 0.3
done
wait "$killer"
touch "$dir/stop"
wait "${pids[@]}" 2>/dev/null
kills=$(cat "$dir/kills" 2>/dev/null | grep -c .)

# The drain, without kills: nack each message's first delivery here once,
# ack the rest, until the queue is empty.
declare -A nacked_once
nacks=0
idle=0
while ((idle < 3)); do
  out=$("$Q" receive "$qn" --wait 1500ms --json 2>/dev/null) || { idle=$((idle + 1)); continue; }
  idle=0
  id=$(jq -r .id <<<"$out")
  receipt=$(jq -r .receipt <<<"$out")
  echo "R $id $(jq -r .receive_count <<<"$out") $receipt" >>"$dir/log.drain"
  if [[ -z ${nacked_once[$id]:-} ]]; then
    nacked_once[$id]=1
    "$Q" nack "$qn" "$receipt" >/dev/null 2>&1 && nacks=$((nacks + 1))
    continue
  fi
  "$Q" ack "$qn" "$receipt" >/dev/null 2>&1
  echo "A $id $? $receipt" >>"$dir/log.drain"
done
cat "$dir"/log.* >"$dir/log"

# Dead letters: their receive counts, then all moved back and acked.
"$Q" dlq list "$qn" --json >"$dir/dead" || fail "dlq list"
dead=$(grep -c . "$dir/dead")
dead_receives=$(jq -s 'map(.receive_count) | add // 0' "$dir/dead")
moved=$("$Q" redrive "$qn" 2>/dev/null | grep -c .)
after=0
while out=$("$Q" receive "$qn" --json 2>/dev/null); do
  "$Q" ack "$qn" "$(jq -r .receipt <<<"$out")" >/dev/null || fail "ack after redrive"
  after=$((after + 1))
done
((after == dead)) || fail "$after messages came back from $dead dead letters"

# Per message: the receive count of its last delivery seen, the highest
# (before the redrive; a dead letter's life ends with its dead-letter count
# instead).
acked_receives=$(awk '$1 == "R" && $3 > last[$2] {last[$2] = $3} END {s = 0; for (i in last) s += last[i]; print s}' \
  <(grep -v -F -f <(jq -r .id "$dir/dead" | sed 's/.*/ & /') "$dir/log"))
# Dead letters: they were delivered in their first life too; that life's
# receives are the dead letter's count. A dead letter's id seen in the log
# only belongs to that life.
want_received=$((acked_receives + dead_receives + after))

s=$("$Q" stats "$qn" --json) || fail "stats"
echo "kills $kills, nacks $nacks, dead letters $dead, stats: $(jq -c '{sent,received,acked,nacked,dead_lettered,redriven,deduplicated}' <<<"$s")"
check() {  # FIELD WANT
  local got
  got=$(jq ".$1" <<<"$s")
  [[ $got == "$2" ]] || fail "$1: $got, want $2"
}
check sent "$sent"
check deduplicated 3
check acked "$sent"
check received "$want_received"
check nacked "$nacks"
check dead_lettered "$dead"
check redriven "$moved"
check visible 0
check in_flight 0
check dead 0
sleep $((exp_sent + 64 - SECONDS > 0 ? exp_sent + 64 - SECONDS : 0))
e=$("$Q" stats exp --json) || fail "stats exp"
[[ $(jq -c '[.visible, .sent, .expired]' <<<"$e") == "[0,1,0]" ]] ||
  fail "past retention: $(jq -c '{visible, sent, expired}' <<<"$e"), want visible 0, sent 1, expired 0 (the documented difference)"
((kills > 0)) || fail "no q process was killed (the test did not test)"
echo "counters: $fails failures"
((fails == 0))
