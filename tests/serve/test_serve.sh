#!/usr/bin/env bash
# q serve against the SQS clients nobody here wrote: Debian's aws CLI (query
# protocol), boto3 under Debian's python3 (query), npm's @aws-sdk/client-sqs
# under node (JSON), and a newer pip boto3 (JSON) where one is installed (not
# required: no Debian package has it). Then the q CLI
# reads the same file and agrees with what the endpoint said.
#   test_serve.sh PATH_TO_q NPM_DIR    (q-serve beside q; NPM_DIR: where
#   @aws-sdk/client-sqs is installed, or is installed from npm on first use)
source "$(dirname "$0")/../e2e/lib.sh" "$1"
HERE=$(cd "$(dirname "$0")" && pwd)
NPM_DIR=${2:-${Q_SERVE_NPM_DIR:-$T/npm}}
[[ $NPM_DIR == /* ]] || NPM_DIR=$PWD/$NPM_DIR
strict() { [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]]; }
missing() {
  if strict; then die "$1 (CI=true or Q_REQUIRE_ALL=1: a missing client fails)"; fi
  skip_part "$1"
}

[[ -x $(dirname "$Q")/q-serve ]] || { strict && die "no q-serve beside $Q"; skip "no q-serve beside $Q (libcpp-httplib-dev missing at build time)"; }

cat >"$T/credentials" <<'CREDS'
[default]
aws_access_key_id = AKIAQSERVETEST
aws_secret_access_key = q-serve-test-secret
CREDS
export AWS_SHARED_CREDENTIALS_FILE=$T/credentials AWS_CONFIG_FILE=$T/aws-config
printf '[default]\nregion = us-east-1\n' >"$AWS_CONFIG_FILE"

"$Q" serve --listen 127.0.0.1:0 --credentials "$T/credentials" 2>"$T/serve.log" &
SERVE_PID=$!
port_of() { grep -oE 'on https?://127\.0\.0\.1:[0-9]+' "$T/serve.log" | head -1 | sed 's/.*://'; }
wait_for 20 grep -q 'q serve: .* on http://' "$T/serve.log" || die "q serve did not start: $(cat "$T/serve.log")"
PORT=$(port_of)
EP=http://127.0.0.1:$PORT
echo "q serve on $EP"

# Bad flags: one line naming the flag, exit 64, nothing served.
assert_exit 64 "$Q" serve --listen 127.0.0.1:0
assert_contains "$ERR" "--credentials" "no credentials: says which flag"
assert_exit 64 "$Q" serve --listen 10.1.2.3:0 --insecure-no-auth
assert_contains "$ERR" "loopback" "--insecure-no-auth off loopback is refused"
assert_exit 64 "$Q" serve --listen nowhere --insecure-no-auth

# An unsigned request, and a signature made with a wrong secret.
run curl -s -o "$T/body" -w '%{http_code}' -d 'Action=ListQueues' "$EP/"
assert_eq 403 "$OUT" "an unsigned request: 403"
assert_contains "$(cat "$T/body")" "MissingAuthenticationToken" "unsigned: MissingAuthenticationToken"

# The aws CLI (Debian's, query protocol) through the basic actions.
AWS=/usr/bin/aws
if [[ -x $AWS ]]; then
  aws_() { "$AWS" --endpoint-url "$EP" sqs "$@" --output json; }
  run aws_ create-queue --queue-name cli-jobs --attributes VisibilityTimeout=45
  assert_eq 0 "$RC" "aws sqs create-queue: $ERR"
  URL=$(jq -r .QueueUrl <<<"$OUT")
  assert_eq "$EP/000000000000/cli-jobs" "$URL" "the queue URL"
  run aws_ send-message --queue-url "$URL" --message-body 'resize photo 7' \
    --message-attributes '{"user":{"DataType":"String","StringValue":"ann"}}'
  assert_eq 0 "$RC" "aws sqs send-message: $ERR"
  CLI_ID=$(jq -r .MessageId <<<"$OUT")
  assert_eq "$(printf 'resize photo 7' | md5sum | cut -d' ' -f1)" "$(jq -r .MD5OfMessageBody <<<"$OUT")" "MD5OfMessageBody"
  run aws_ get-queue-attributes --queue-url "$URL" --attribute-names All
  assert_eq 1 "$(jq -r .Attributes.ApproximateNumberOfMessages <<<"$OUT")" "ApproximateNumberOfMessages"
  assert_eq 45 "$(jq -r .Attributes.VisibilityTimeout <<<"$OUT")" "VisibilityTimeout"
  # q's CLI on the same file agrees.
  run "$Q" stats cli-jobs --json
  assert_eq 1 "$(jq -r .visible <<<"$OUT")" "q stats sees the message sent through the endpoint"
  run "$Q" show cli-jobs "$CLI_ID" --json
  assert_contains "$OUT" '"user"' "q show has its attribute"
  assert_contains "$OUT" 'resize photo 7' "q show has its body"
  run aws_ receive-message --queue-url "$URL" --message-attribute-names All --attribute-names All
  assert_eq "$CLI_ID" "$(jq -r '.Messages[0].MessageId' <<<"$OUT")" "aws sqs receive-message"
  assert_eq ann "$(jq -r '.Messages[0].MessageAttributes.user.StringValue' <<<"$OUT")" "its attribute"
  HANDLE=$(jq -r '.Messages[0].ReceiptHandle' <<<"$OUT")
  run "$Q" stats cli-jobs --json
  assert_eq 1 "$(jq -r .in_flight <<<"$OUT")" "q stats: in flight"
  run aws_ delete-message --queue-url "$URL" --receipt-handle "$HANDLE"
  assert_eq 0 "$RC" "aws sqs delete-message: $ERR"
  run "$Q" stats cli-jobs --json
  assert_eq "0 1" "$(jq -r '"\(.in_flight) \(.acked)"' <<<"$OUT")" "q stats: acked"
  # A message sent by q send is received through the endpoint.
  "$Q" send cli-jobs 'from the shell' >/dev/null
  run aws_ receive-message --queue-url "$URL"
  assert_eq 'from the shell' "$(jq -r '.Messages[0].Body' <<<"$OUT")" "q send -> ReceiveMessage"
  # A long poll (20 s) woken by a q send from another process. Unwoken, it
  # would answer after 20 s, empty. (If the aws CLI starts slower than the
  # pause, the send comes first and the poll finds it at once: that passes too.)
  aws_ receive-message --queue-url "$URL" --wait-time-seconds 20 >"$T/lp.json" 2>"$T/lp.err" &
  lp_pid=$!
  sleep 2
  t0=$(now_ms)
  "$Q" send cli-jobs 'wake up' >/dev/null
  wait "$lp_pid"
  waited=$(($(now_ms) - t0))
  assert_eq 'wake up' "$(jq -r '.Messages[0].Body' "$T/lp.json")" "a long poll gets a q send from the shell: $(cat "$T/lp.err")"
  lp_limit=$((5000 * ${Q_TEST_TIME_SCALE:-1}))
  ((lp_limit < 15000)) || lp_limit=15000 # under the poll's own 20 s
  ((waited < lp_limit)) ||
    fail "the long poll answered ${waited} ms after q send (its wait is 20 s): q send did not wake it"
  run aws_ delete-message --queue-url "$URL" --receipt-handle "$(jq -r '.Messages[0].ReceiptHandle' "$T/lp.json")"
  assert_eq 0 "$RC" "delete the woken poll's message: $ERR"
  # A body q send stored that SQS cannot carry (a byte that is not UTF-8, a
  # control character) reaches a client as text with U+FFFD in their place and
  # that text's MD5, which botocore checks; in the JSON protocol too (curl's
  # own SigV4). Before, the JSON reply failed (500) and the message stayed in
  # flight, to fail again at every delivery.
  printf 'ab\xffc\x01d\n' | "$Q" send cli-jobs --lines >/dev/null
  want=$(printf 'ab\xef\xbf\xbdc\xef\xbf\xbdd')
  run aws_ receive-message --queue-url "$URL" --visibility-timeout 0
  assert_eq 0 "$RC" "aws sqs receive-message of a body that is not text: $ERR"
  assert_eq "$want" "$(jq -r '.Messages[0].Body' <<<"$OUT")" "query protocol: U+FFFD in place of the bytes"
  run curl -s --aws-sigv4 aws:amz:us-east-1:sqs --user AKIAQSERVETEST:q-serve-test-secret \
    -H 'X-Amz-Target: AmazonSQS.ReceiveMessage' -H 'Content-Type: application/x-amz-json-1.0' \
    -d "{\"QueueUrl\":\"$URL\"}" -w '\n%{http_code}' "$EP/"
  assert_eq 200 "$(tail -n1 <<<"$OUT")" "JSON ReceiveMessage of a body that is not text: $OUT"
  reply=$(sed '$d' <<<"$OUT")
  assert_eq "$want" "$(jq -r '.Messages[0].Body' <<<"$reply")" "JSON protocol: U+FFFD in place of the bytes"
  assert_eq "$(printf '%s' "$want" | md5sum | cut -d' ' -f1)" "$(jq -r '.Messages[0].MD5OfBody' <<<"$reply")" \
    "MD5OfBody is the delivered text's"
  run aws_ delete-message --queue-url "$URL" --receipt-handle "$(jq -r '.Messages[0].ReceiptHandle' <<<"$reply")"
  assert_eq 0 "$RC" "delete it: $ERR"
  run aws_ list-queues
  assert_contains "$OUT" "$URL" "aws sqs list-queues"
  run aws_ get-queue-url --queue-name no-such-queue
  assert_eq 254 "$RC" "a missing queue fails"
  assert_contains "$ERR" "NonExistentQueue" "named as SQS names it"
  run env AWS_SECRET_ACCESS_KEY=wrong AWS_ACCESS_KEY_ID=AKIAQSERVETEST "$AWS" --endpoint-url "$EP" sqs list-queues
  assert_contains "$ERR" "SignatureDoesNotMatch" "aws CLI with a wrong secret is refused"
  # A client clock 20 minutes behind (libfaketime): outside SigV4's 15 minutes.
  FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
  if [[ -n $FAKETIME_LIB ]]; then
    run env LD_PRELOAD="$FAKETIME_LIB" FAKETIME=-1200 FAKETIME_DONT_FAKE_MONOTONIC=1 \
      "$AWS" --endpoint-url "$EP" sqs list-queues
    assert_contains "$ERR" "RequestExpired" "aws CLI with its clock 20 min behind: RequestExpired"
    run env LD_PRELOAD="$FAKETIME_LIB" FAKETIME=-600 FAKETIME_DONT_FAKE_MONOTONIC=1 \
      "$AWS" --endpoint-url "$EP" sqs list-queues
    assert_eq 0 "$RC" "10 min behind is within the window: $ERR"
  else
    missing "libfaketime (Debian: libfaketime)"
  fi
else
  missing "no Debian aws CLI (/usr/bin/aws, package awscli)"
fi

# boto3 with the query protocol (Debian's) and with JSON (a newer pip one).
py_run() {  # PYTHON PREFIX
  run "$1" "$HERE/sqs_client.py" "$EP" AKIAQSERVETEST q-serve-test-secret "$2"
  assert_eq 0 "$RC" "boto3 under $1: $OUT $ERR"
  [[ $RC == 0 ]] || echo "$OUT"
  echo "$OUT" | grep -E '^(boto3|note)'
}
if /usr/bin/python3 -c 'import boto3' 2>/dev/null; then
  py_run /usr/bin/python3 pyq
  # The poison messages stay dead in q (botocore 1.29 has no StartMessageMoveTask).
  run "$Q" dlq list pyq-signups --json
  assert_eq 12 "$(grep -c . <<<"$OUT")" "q dlq list: the DLQ the endpoint reported"
  # The two DeleteMessage calls with a stale handle succeeded on the wire and
  # deleted nothing; q counts them.
  run "$Q" stats pyq-attrs --json
  assert_eq 2 "$(jq .stale_acks <<<"$OUT")" "q stats: stale_acks counts the stale handles' DeleteMessage"
else
  missing "no boto3 for /usr/bin/python3 (package python3-boto3)"
fi
JSON_PY=""
for py in $(type -ap python3) /root/.pyenv/versions/*/bin/python3; do
  [[ -x $py ]] || continue
  if "$py" -c 'import botocore,sys; v=tuple(map(int,botocore.__version__.split(".")[:2])); sys.exit(v < (1,31))' 2>/dev/null; then
    JSON_PY=$py
    break
  fi
done
if [[ -n $JSON_PY ]]; then
  py_run "$JSON_PY" pyj
  run "$Q" stats pyj-signups --json
  assert_eq "12 0" "$(jq -r '"\(.visible) \(.dead)"' <<<"$OUT")" "q stats: the redriven messages"
else
  # Not required: no Debian package has a botocore that speaks JSON (Debian 12's
  # is 1.29), PyPI is not always reachable, and the Node SDK below is the
  # required JSON client.
  echo "note: no python3 with botocore >= 1.31 (AWS JSON 1.0; pip install boto3): the boto3 JSON run is left out; the Node SDK covers the JSON protocol" >&2
fi

# npm's @aws-sdk/client-sqs (JSON).
# Pinned: 3.967.0 is the last 3.x whose engines allow Debian 12's Node 18 as
# well as Node 20 (3.1000.0 and later need Node >= 20). serve_clients and
# serve_clients_nats share NPM_DIR and ctest runs them at once, so the
# install is done under a lock on NPM_DIR.lock: the second waits for the first
# and then finds the package installed.
SDK_VERSION=3.967.0
sdk_json=$NPM_DIR/node_modules/@aws-sdk/client-sqs/package.json
sdk_ok() { [[ $(jq -r .version "$sdk_json" 2>/dev/null) == "$SDK_VERSION" ]]; }
if command -v node >/dev/null && command -v npm >/dev/null; then
  mkdir -p "$NPM_DIR"
  (
    flock -w 240 9 || exit 1
    # A package.json of its own, so npm installs here, not in a parent's.
    [[ -f $NPM_DIR/package.json ]] || echo '{"private": true}' >"$NPM_DIR/package.json"
    sdk_ok || (cd "$NPM_DIR" && npm install --no-audit --no-fund --silent \
                 "@aws-sdk/client-sqs@$SDK_VERSION" >"$T/npm.log" 2>&1)
  ) 9>"$NPM_DIR.lock"
  if sdk_ok; then
    run env NODE_PATH="$NPM_DIR/node_modules" node "$HERE/sqs_client.mjs" "$EP" AKIAQSERVETEST q-serve-test-secret nd
    assert_eq 0 "$RC" "node @aws-sdk/client-sqs: $OUT $ERR"
    run "$Q" stats nd-signups --json
    assert_eq "12 0" "$(jq -r '"\(.visible) \(.dead)"' <<<"$OUT")" "q stats: the redriven messages (node)"
  else
    missing "npm could not install @aws-sdk/client-sqs@$SDK_VERSION into $NPM_DIR: $(tail -5 "$T/npm.log" 2>/dev/null)"
  fi
else
  missing "no node/npm"
fi

run "$Q" verify
assert_eq 0 "$RC" "q verify after it all: $OUT $ERR"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID"
assert_eq 0 "$?" "q serve stops on SIGTERM with 0"
assert_contains "$(cat "$T/serve.log")" "stopping (SIGTERM)" "and says so"
