#!/usr/bin/env bash
# q serve's group commit: concurrent SendMessage and DeleteMessage requests
# share commits, and nothing changes for a client: every message sent is
# stored once and deleted once, each reply names its own message, and a
# shared commit that fails (a full queue) gives each request its own answer.
# With --no-group-commit every request commits alone (the counts at the stop
# tell the two apart, so this test fails when requests stop sharing commits).
#   test_serve_group_commit.sh PATH_TO_q    (q-serve beside q)
source "$(dirname "$0")/../e2e/lib.sh" "$1"
strict() { [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]]; }
[[ -x $(dirname "$Q")/q-serve ]] || { strict && die "no q-serve beside $Q"; skip "no q-serve beside $Q"; }
command -v python3 >/dev/null || { strict && die "no python3"; skip "no python3"; }

start() {  # LOG ARGS...: starts q serve, sets PORT and SERVE_PID
  local log=$1
  shift
  "$Q" serve --listen 127.0.0.1:0 --insecure-no-auth "$@" 2>"$log" &
  SERVE_PID=$!
  wait_for 20 grep -q 'q serve: .* on http' "$log" || die "q serve did not start: $(cat "$log")"
  PORT=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$log" | head -1 | sed 's/.*://')
}
stop() {  # LOG: stops q serve; sets REQUESTS and COMMITS from its last line
  kill -TERM "$SERVE_PID"
  wait "$SERVE_PID" || fail "q serve exited $? at SIGTERM"
  read -r REQUESTS COMMITS < <(sed -nE 's/.*; ([0-9]+) sends and deletes in ([0-9]+) commits.*/\1 \2/p' "$1")
}

# CLIENTS threads, each on its own keep-alive connection, send PER messages
# (bodies c-i), then as many threads receive and delete until the queue is
# empty (not with a fifth argument, "send-only"). Prints what it saw as JSON.
cat >"$T/load.py" <<'EOF'
import http.client, json, sys, threading
port, queue, clients, per = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
url = f"http://127.0.0.1:{port}/000000000000/{queue}"
def call(conn, action, body):
    conn.request("POST", "/", json.dumps(body), {"X-Amz-Target": "AmazonSQS." + action,
                 "Content-Type": "application/x-amz-json-1.0"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"{}")
lock = threading.Lock()
sent, refused, received, deleted, errors = {}, [], [], 0, []
def producer(c):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(per):
        body = f"{c}-{i}"
        status, out = call(conn, "SendMessage", {"QueueUrl": url, "MessageBody": body})
        with lock:
            if status == 200: sent[out["MessageId"]] = body
            elif "OverLimit" in json.dumps(out): refused.append(body)
            else: errors.append((status, out))
def consumer():
    global deleted
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while True:
        status, out = call(conn, "ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 1})
        msgs = out.get("Messages", [])
        if status != 200 or not msgs: return
        m = msgs[0]
        status, out = call(conn, "DeleteMessage", {"QueueUrl": url, "ReceiptHandle": m["ReceiptHandle"]})
        with lock:
            received.append((m["MessageId"], m["Body"]))
            if status == 200: deleted += 1
            else: errors.append((status, out))
for role in (producer,) if sys.argv[5:] == ["send-only"] else (producer, consumer):
    ts = [threading.Thread(target=role, args=(c,) if role is producer else ()) for c in range(clients)]
    for t in ts: t.start()
    for t in ts: t.join()
print(json.dumps({"sent": len(sent), "distinct_bodies": len(set(sent.values())),
                  "refused": len(refused), "received": len(received),
                  "received_match": all(sent.get(i) == b for i, b in received),
                  "distinct_received": len(set(i for i, _ in received)),
                  "deleted": deleted, "errors": errors[:3]}))
EOF

# ---- group commit on (the default): 24 clients x 20 sends, then drained ----
export Q_FILE=$T/gc.q
"$Q" create jobs >/dev/null || die "create"
start "$T/on.log"
run python3 "$T/load.py" "$PORT" jobs 24 20
echo "group commit on: $OUT"
assert_eq 480 "$(jq .sent <<<"$OUT")" "on: every send answered 200"
assert_eq 480 "$(jq .distinct_bodies <<<"$OUT")" "on: each reply names its own message"
assert_eq 480 "$(jq .distinct_received <<<"$OUT")" "on: every message received once"
assert_eq true "$(jq .received_match <<<"$OUT")" "on: each id came back with its own body"
assert_eq 480 "$(jq .deleted <<<"$OUT")" "on: every delete answered 200"
assert_eq "[]" "$(jq -c .errors <<<"$OUT")" "on: no other errors"
stop "$T/on.log"
echo "group commit on: $REQUESTS sends and deletes in $COMMITS commits"
assert_eq 960 "$REQUESTS" "on: 480 sends and 480 deletes counted"
((COMMITS < REQUESTS)) || fail "on: concurrent requests shared no commit ($COMMITS commits for $REQUESTS)"
run "$Q" stats jobs --json
assert_eq 480 "$(jq -r .sent <<<"$OUT")" "on: q stats counts 480 sent"
assert_eq 480 "$(jq -r .acked <<<"$OUT")" "on: and 480 acked"
assert_eq 0 "$(jq -r .visible <<<"$OUT")" "on: nothing left"

# ---- a shared commit that fails: a queue of depth 30, 12 clients x 5 sends --
# The shared send is refused as a whole (full); each is then tried alone:
# exactly 30 stored, the rest refused with OverLimit, none twice.
"$Q" create small --max-depth 30 >/dev/null || die "create small"
start "$T/full.log"
run python3 "$T/load.py" "$PORT" small 12 5 send-only
echo "full queue: $OUT"
assert_eq 30 "$(jq .sent <<<"$OUT")" "full: exactly the depth stored"
assert_eq 30 "$(jq .refused <<<"$OUT")" "full: the rest refused with OverLimit"
assert_eq 30 "$(jq .distinct_bodies <<<"$OUT")" "full: none stored twice"
assert_eq "[]" "$(jq -c .errors <<<"$OUT")" "full: no other errors"
stop "$T/full.log"
run "$Q" stats small --json
assert_eq 30 "$(jq -r .visible <<<"$OUT")" "full: q stats sees the 30"

# ---- --no-group-commit: one commit per request ----------------------------
export Q_FILE=$T/alone.q
"$Q" create jobs >/dev/null || die "create"
start "$T/off.log" --no-group-commit
run python3 "$T/load.py" "$PORT" jobs 8 10
assert_eq 80 "$(jq .deleted <<<"$OUT")" "off: every message sent and deleted"
stop "$T/off.log"
assert_eq "160 160" "$REQUESTS $COMMITS" "off: a commit per request"
