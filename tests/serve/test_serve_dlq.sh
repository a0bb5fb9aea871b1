#!/usr/bin/env bash
# Receiving from a queue that is another's deadLetterTargetArn, through q
# serve (curl, query protocol). In q dead letters stay with the queue they died
# in (README, "Differences from SQS"): ReceiveMessage on the target returns only
# what was sent to it, never the dead letters it counts in
# ApproximateNumberOfMessages, and receiving there leaves them dead (q dlq
# list); StartMessageMoveTask on it moves them back to their queue.
#   test_serve_dlq.sh PATH_TO_q    (q-serve beside q)
source "$(dirname "$0")/../e2e/lib.sh" "$1"
[[ -x $(dirname "$Q")/q-serve ]] || { require_all && die "no q-serve beside $Q"; skip "no q-serve beside $Q"; }
command -v curl >/dev/null || missing "curl not installed"

"$Q" serve --listen 127.0.0.1:0 --insecure-no-auth 2>"$T/serve.log" &
wait_for 20 grep -q 'q serve: .* on http://' "$T/serve.log" || die "q serve did not start: $(cat "$T/serve.log")"
EP=http://127.0.0.1:$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$T/serve.log" | head -1 | sed 's/.*://')
sqs() {  # ACTION [NAME=VALUE...]: the reply's body in $OUT, its status in $CODE
  local action=$1 args=()
  shift
  for a in "$@"; do args+=(--data-urlencode "$a"); done
  CODE=$(curl -s -o "$T/reply" -w '%{http_code}' --max-time 30 -d "Action=$action" "${args[@]}" "$EP/")
  OUT=$(cat "$T/reply")
}
bodies() { grep -o '<Body>[^<]*</Body>' <<<"$OUT" | sed 's/<[^>]*>//g' | sort | paste -sd' '; }
attr() { sqs GetQueueAttributes "QueueUrl=$1" AttributeName.1=All
  grep -o "<Name>$2</Name><Value>[^<]*" <<<"$OUT" | sed 's/.*<Value>//'; }

sqs CreateQueue QueueName=dead
assert_eq 200 "$CODE" "CreateQueue dead: $OUT"
DEAD=$EP/000000000000/dead
ARN=$(attr "$DEAD" QueueArn)
assert_eq "arn:aws:sqs:us-east-1:000000000000:dead" "$ARN" "the target's ARN"
sqs CreateQueue QueueName=work Attribute.1.Name=RedrivePolicy \
  "Attribute.1.Value={\"deadLetterTargetArn\":\"$ARN\",\"maxReceiveCount\":1}"
assert_eq 200 "$CODE" "CreateQueue work with a RedrivePolicy: $OUT"
WORK=$EP/000000000000/work
for b in poison-1 poison-2; do sqs SendMessage "QueueUrl=$WORK" "MessageBody=$b"; done
sqs ReceiveMessage "QueueUrl=$WORK" MaxNumberOfMessages=10 VisibilityTimeout=0
assert_eq "poison-1 poison-2" "$(bodies)" "the first receive of work"
# Received once with maxReceiveCount 1: the next receive dead-letters them.
sqs ReceiveMessage "QueueUrl=$WORK" MaxNumberOfMessages=10
assert_eq "" "$(bodies)" "nothing left to receive in work"
run "$Q" stats work --json
assert_eq 2 "$(jq -r .dead <<<"$OUT")" "q stats: two dead letters in work"

sqs SendMessage "QueueUrl=$DEAD" MessageBody=direct
sqs GetQueueAttributes "QueueUrl=$DEAD" AttributeName.1=ApproximateNumberOfMessages
assert_contains "$OUT" "<Value>3</Value>" "ApproximateNumberOfMessages of the target: its own 1 + the 2 dead letters of work"
sqs ReceiveMessage "QueueUrl=$DEAD" MaxNumberOfMessages=10 WaitTimeSeconds=1
assert_eq 200 "$CODE" "ReceiveMessage on the target"
assert_eq "direct" "$(bodies)" "ReceiveMessage on the target returns what was sent to it, not the dead letters"
sqs ReceiveMessage "QueueUrl=$DEAD" MaxNumberOfMessages=10
assert_eq "" "$(bodies)" "and nothing more"
run "$Q" dlq list work --json
assert_eq 2 "$(grep -c . <<<"$OUT")" "the dead letters stay dead in work (q dlq list)"
sqs GetQueueAttributes "QueueUrl=$DEAD" AttributeName.1=ApproximateNumberOfMessages AttributeName.2=ApproximateNumberOfMessagesNotVisible
assert_contains "$OUT" "<Name>ApproximateNumberOfMessages</Name><Value>2</Value>" "the target still counts them"
assert_contains "$OUT" "<Name>ApproximateNumberOfMessagesNotVisible</Name><Value>1</Value>" "and its own message in flight"

sqs StartMessageMoveTask "SourceArn=$ARN"
assert_eq 200 "$CODE" "StartMessageMoveTask from the target: $OUT"
sqs ReceiveMessage "QueueUrl=$WORK" MaxNumberOfMessages=10
assert_eq "poison-1 poison-2" "$(bodies)" "the dead letters are back in work"
run "$Q" dlq list work --json
assert_eq 0 "$(grep -c . <<<"$OUT")" "and no longer dead"

# PurgeQueue on the target removes what was sent to it, not the dead letters it
# counts: they are the source's. DeleteQueue of the source deletes them (q
# delete), and the target no longer counts them (README, differences from SQS).
sqs CreateQueue QueueName=work2 Attribute.1.Name=RedrivePolicy \
  "Attribute.1.Value={\"deadLetterTargetArn\":\"$ARN\",\"maxReceiveCount\":1}"
WORK2=$EP/000000000000/work2
sqs SendMessage "QueueUrl=$WORK2" MessageBody=poison-3
sqs ReceiveMessage "QueueUrl=$WORK2" VisibilityTimeout=0
sqs ReceiveMessage "QueueUrl=$WORK2"
sqs SendMessage "QueueUrl=$DEAD" MessageBody=direct-2
sqs PurgeQueue "QueueUrl=$DEAD"
assert_eq 200 "$CODE" "PurgeQueue on the target: $OUT"
run "$Q" stats dead --json
assert_eq "0 0" "$(jq -r '"\(.visible) \(.in_flight)"' <<<"$OUT")" "PurgeQueue emptied the target's own messages"
assert_eq 1 "$(attr "$DEAD" ApproximateNumberOfMessages)" "PurgeQueue on the target leaves the dead letter of work2 it counts"
sqs DeleteQueue "QueueUrl=$WORK2"
assert_eq 200 "$CODE" "DeleteQueue work2: $OUT"
assert_eq 0 "$(attr "$DEAD" ApproximateNumberOfMessages)" "DeleteQueue of the source deleted its dead letter"
assert_exit 66 "$Q" dlq list work2
