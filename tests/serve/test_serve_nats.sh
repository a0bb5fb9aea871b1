#!/usr/bin/env bash
# q serve on a 3-node NATS cluster (issue 28): the same real clients as
# serve_clients (test_serve.sh: the aws CLI, Debian's boto3, npm's
# @aws-sdk/client-sqs, then q stats / q dlq list / q show on the same
# queues) against `q serve -f nats://...`; then a SIGTERM while requests are
# in flight: each is answered (a long poll with no messages, a send that is
# then in the stream), q serve exits 0 and says so, and no new connection is
# taken.
#   test_serve_nats.sh PATH_TO_q NPM_DIR    (q-serve and q-nats beside q)
source "$(dirname "$0")/../nats/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
[[ -x $(dirname "$1")/q-serve ]] || nats_missing "no q-serve beside $1 (libcpp-httplib-dev missing at build time)"
command -v curl >/dev/null || nats_missing "curl not installed (Debian: curl)"
nats_test serve "$1"
NPM_DIR=${2:-$T/npm}
[[ $NPM_DIR == /* ]] || NPM_DIR=$PWD/$NPM_DIR

# 1. The clients (test_serve.sh with its location on the cluster: its Q_FILE
# is a namespace of its own there, and q serve serves that).
Q_TEST_LOCATION=$urls/serve bash "$HERE/test_serve.sh" "$Q" "$NPM_DIR"
rc=$?
((rc == 0)) || fail "the real clients against q serve on nats:// (test_serve.sh exit $rc)"

# 2. SIGTERM with requests in flight.
export Q_FILE=$urls/stop
"$Q" serve --listen 127.0.0.1:0 --insecure-no-auth 2>"$T/serve.log" &
pid=$!
up() { grep -q 'q serve: .* on http://' "$T/serve.log"; }
limit=$((20 * scale))
for ((i = 0; i < limit * 50; i++)); do up && break; sleep 0.02; done
up || { fail "q serve on nats:// did not start: $(cat "$T/serve.log")"; finish x; }
port=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$T/serve.log" | head -1 | sed 's/.*://')
ep=http://127.0.0.1:$port
post() { curl -s -o "$1" -w '%{http_code}' --max-time $((30 * scale)) -d "$2" "$ep/"; }
for name in jobs idle; do
  [[ $(post "$T/c" "Action=CreateQueue&QueueName=$name") == 200 ]] || fail "CreateQueue on nats://: $(cat "$T/c")"
done
url=$ep/000000000000/jobs
# A 20 s long poll on an empty queue, and a keep-alive connection that is
# idle after a send.
start_ms=$(now_ms)
post "$T/poll" "Action=ReceiveMessage&QueueUrl=$ep/000000000000/idle&WaitTimeSeconds=20" >"$T/poll.code" &
poll=$!
exec 3<>"/dev/tcp/127.0.0.1/$port"
body="Action=SendMessage&MessageBody=x&QueueUrl=$url"
printf 'POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s' \
  ${#body} "$body" >&3
read -r -t $((10 * scale)) status <&3
[[ $status == *200* ]] || fail "a send on the keep-alive connection: $status"
# The long poll is waiting in q serve (its receive found nothing yet).
sleep 0.3
stop_ms=$(now_ms)
kill -TERM "$pid"
wait "$poll"
took=$(($(now_ms) - start_ms))
[[ $(cat "$T/poll.code") == 200 ]] || fail "the long poll in flight is answered: $(cat "$T/poll.code") $(cat "$T/poll")"
((took < 10000 * scale)) || fail "the long poll is answered at the stop, not at its 20 s: ${took} ms"
grep -q '<ReceiveMessageResult' "$T/poll" || fail "with an empty ReceiveMessageResult: $(cat "$T/poll")"
wait "$pid"
code=$?
took=$(($(now_ms) - stop_ms))
[[ $code == 0 ]] || fail "q serve on nats:// stops on SIGTERM with 0 (man q-serve), not $code"
grep -q 'stopping (SIGTERM)' "$T/serve.log" || fail "and says so: $(cat "$T/serve.log")"
# The idle keep-alive connection is closed, not waited out (its 30 s).
((took < 5000 * scale)) || fail "q serve exits soon after SIGTERM with an idle keep-alive connection open: ${took} ms"
timeout $((5 * scale)) cat <&3 >/dev/null || fail "the idle keep-alive connection is closed (EOF after the reply)"
curl -s -o /dev/null --max-time 5 -d 'Action=ListQueues' "$ep/" && fail "a connection after the stop is taken"
exec 3>&-
q stats jobs --json
expect 0 "q stats after the stop"
[[ $(jq -r .visible <<<"$OUT") == 1 ]] || fail "the send answered before the stop is in the stream: $OUT"
finish "serve on a 3-node cluster: the real clients, and a clean SIGTERM"
