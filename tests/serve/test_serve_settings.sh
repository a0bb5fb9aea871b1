#!/usr/bin/env bash
# The settings SQS has and q's queue config lacks (the RedrivePolicy's target,
# ReceiveMessageWaitTimeSeconds) live as one JSON doc in the queue
# q-serve.settings (cli/serve/service.cpp):
# - two q serve processes on one file changing settings at once lose neither's
#   update (each change is a read-modify-write under the doc's lease);
# - the doc outlives the queue's retention (365 days, the longest q allows):
#   q serve writes it again when it is older than 30 days (libfaketime moves
#   q-serve's clock; the new doc's sent_at shows it). On a file an expired doc
#   goes only at the next write to that queue, on NATS at the stream's max age,
#   so the check is that it is written again.
#   test_serve_settings.sh PATH_TO_q    (q-serve beside q)
source "$(dirname "$0")/../e2e/lib.sh" "$1"
[[ -x $(dirname "$Q")/q-serve ]] || { require_all && die "no q-serve beside $Q"; skip "no q-serve beside $Q"; }
command -v curl >/dev/null || missing "curl not installed"

start() {  # NAME [ENV...]: q serve in the background, its endpoint in EP_NAME
  local name=$1
  shift
  # Gone first, here: the background job's own truncation can come after the
  # wait below has read the last server's "on http://" (its closed port).
  rm -f "$T/$name.log"
  env "$@" "$Q" serve --listen 127.0.0.1:0 --insecure-no-auth 2>"$T/$name.log" &
  eval "PID_$name=$!"
  wait_for 20 grep -q 'q serve: .* on http://' "$T/$name.log" || die "q serve $name did not start: $(cat "$T/$name.log")"
  eval "EP_$name=http://127.0.0.1:$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$T/$name.log" | head -1 | sed 's/.*://')"
}
stop() { local pid="PID_$1"; kill -TERM "${!pid}"; wait "${!pid}"; }
sqs() {  # ENDPOINT ACTION [NAME=VALUE...]: the reply's body in $OUT, its status in $CODE
  local ep=$1 action=$2 args=() reply=$T/reply.$BASHPID  # one per background job
  shift 2
  for a in "$@"; do args+=(--data-urlencode "$a"); done
  CODE=$(curl -s -o "$reply" -w '%{http_code}' --max-time 60 -d "Action=$action" "${args[@]}" "$ep/")
  OUT=$(cat "$reply")
}
wait_attr() {  # ENDPOINT QUEUE: its ReceiveMessageWaitTimeSeconds
  sqs "$1" GetQueueAttributes "QueueUrl=$1/000000000000/$2" AttributeName.1=ReceiveMessageWaitTimeSeconds
  grep -o '<Value>[^<]*' <<<"$OUT" | sed 's/<Value>//'
}

# 1. Two servers on one file, 40 settings changes at once, half through each.
start a
start b
N=40
for ((i = 0; i < N; i++)); do sqs "$EP_a" CreateQueue "QueueName=s$i"; done
assert_eq 200 "$CODE" "CreateQueue: $OUT"
for round in 1 2; do
  rm -f "$T/refused"
  for ((i = 0; i < N; i++)); do
    ep=$EP_a
    ((i % 2)) && ep=$EP_b
    (sqs "$ep" SetQueueAttributes "QueueUrl=$ep/000000000000/s$i" \
      Attribute.1.Name=ReceiveMessageWaitTimeSeconds "Attribute.1.Value=$(((i + round) % 20 + 1))"
     [[ $CODE == 200 ]] || echo "s$i: $CODE $OUT" >>"$T/refused") &
  done
  wait_pids=$(jobs -p | grep -v -e "^$PID_a\$" -e "^$PID_b\$")
  for p in $wait_pids; do wait "$p"; done
  lost=()
  for ((i = 0; i < N; i++)); do
    got=$(wait_attr "$EP_a" "s$i")
    [[ $got == $(((i + round) % 20 + 1)) ]] || lost+=("s$i=$got")
  done
  assert_eq "" "$(cat "$T/refused" 2>/dev/null)" "round $round: every change answered 200"
  assert_eq "" "${lost[*]}" "round $round: every change of the two servers is kept"
done
run "$Q" peek q-serve.settings --json
assert_eq 1 "$(grep -c . <<<"$OUT")" "one settings doc stands"
stop a
stop b

# 2. The doc outlives the queue's retention while q serve runs now and then.
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
if [[ -z $FAKETIME_LIB ]]; then
  missing_part "libfaketime (Debian: libfaketime)"
else
  # In an ASan build libfaketime comes before ASan's runtime, which ASan
  # refuses unless told the order is meant.
  later() {
    start c LD_PRELOAD="$FAKETIME_LIB" FAKETIME="+$1d" FAKETIME_DONT_FAKE_MONOTONIC=1 \
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  }
  setting_is_kept() {  # WHEN: s1's setting read through c, c's log on a failure
    assert_eq 4 "$(wait_attr "$EP_c" s1)" "the setting, $1" ||
      echo "    q serve's log: $(cat "$T/c.log")" >&2
  }
  later 0
  setting_is_kept now
  stop c
  later 200   # the doc is older than 30 days: written again
  setting_is_kept "200 days on"
  stop c
  run "$Q" peek q-serve.settings --json
  sent=$(tail -n 1 <<<"$OUT" | jq -r .sent_at)
  [[ $sent > $(date -u -d '+150 days' +%Y-%m-%dT%H:%M:%S) ]] ||
    fail "q serve 200 days on wrote the doc again (its sent_at: $sent)"
  later 500   # 500 days after the first doc, 300 after the second
  setting_is_kept "500 days on: more than the 365-day retention"
  stop c
fi

run "$Q" verify
assert_eq 0 "$RC" "q verify: $OUT $ERR"
