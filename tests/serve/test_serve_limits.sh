#!/usr/bin/env bash
# q serve's bounds, with curl: a body over --max-request-size is refused with
# 413 before it is read, a connection beyond --max-connections gets 503 at
# once, a client that stalls half-way through a request, or trickles it a byte
# at a time, is cut off after the read timeout, a flood of connections gets 503 without a thread each, and
# --tls-cert/--tls-key serve HTTPS.
#   test_serve_limits.sh PATH_TO_q    (q-serve beside q)
source "$(dirname "$0")/../e2e/lib.sh" "$1"
strict() { [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]]; }
[[ -x $(dirname "$Q")/q-serve ]] || { strict && die "no q-serve beside $Q"; skip "no q-serve beside $Q"; }
for tool in curl openssl; do
  command -v $tool >/dev/null || { strict && die "no $tool"; skip "no $tool"; }
done

start() {  # LOG ARGS...: starts q serve, sets PORT
  local log=$1
  shift
  "$Q" serve --listen 127.0.0.1:0 "$@" 2>"$log" &
  SERVE_PID=$!  # q-serve itself: q execs it
  wait_for 20 grep -q 'q serve: .* on http' "$log" || die "q serve did not start: $(cat "$log")"
  PORT=$(grep -oE 'on https?://127\.0\.0\.1:[0-9]+' "$log" | head -1 | sed 's/.*://')
}

start "$T/a.log" --insecure-no-auth --max-connections 1 --max-request-size 300000
assert_contains "$(cat "$T/a.log")" "WARNING: --insecure-no-auth" "no auth is said loudly"
EP=http://127.0.0.1:$PORT
run curl -s -o "$T/body" -w '%{http_code}' -d 'Action=CreateQueue&QueueName=jobs' "$EP/"
assert_eq 200 "$OUT" "CreateQueue without auth on loopback"
assert_contains "$(cat "$T/body")" "<QueueUrl>$EP/000000000000/jobs</QueueUrl>" "its QueueUrl"

# 413 before the body is read: curl announces 400000 bytes and the server
# answers without waiting for them.
head -c 400000 /dev/zero | tr '\0' a >"$T/big"
run curl -s -o /dev/null -w '%{http_code}' -H 'Expect:' --data-binary @"$T/big" "$EP/"
assert_eq 413 "$OUT" "a body over --max-request-size: 413"
run "$Q" stats jobs --json
assert_eq 0 "$(jq -r .sent <<<"$OUT")" "and nothing was sent"

# One connection held open (keep-alive, idle) takes the only thread: the next is 503.
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 17\r\n\r\nAction=ListQueues' >&3
read -r -t 10 status <&3
assert_contains "$status" "200" "the held connection is served"
run curl -s -o "$T/body" -w '%{http_code}' --max-time 10 -d 'Action=ListQueues' "$EP/"
assert_eq 503 "$OUT" "a connection beyond --max-connections: 503"
assert_contains "$(cat "$T/body")" "ServiceUnavailable" "with SQS's code"
exec 3>&-
wait_for 15 bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' -d Action=ListQueues $EP/) == 200 ]]" ||
  fail "served again once the held connection closed"

# Slow clients: half a request (headers that never end, a body shorter than
# its Content-Length) is answered 400 at the read timeout (10 s, man q-serve);
# cpp-httplib then keeps the connection for the keep-alive timeout, within
# --max-connections. Others are served meanwhile.
start "$T/s.log" --insecure-no-auth --max-connections 3
EP=http://127.0.0.1:$PORT
slow_start=$(now_ms)
exec 4<>"/dev/tcp/127.0.0.1/$PORT" 5<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST / HTTP/1.1\r\nHost: x\r\nContent-Ty' >&4
printf 'POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nAction=List' >&5
run curl -s -o /dev/null -w '%{http_code}' --max-time 5 -d 'Action=ListQueues' "$EP/"
assert_eq 200 "$OUT" "served beside two stalled clients"
limit=$((20 * ${Q_TEST_TIME_SCALE:-1}))
for fd in 4 5; do
  read -r -t "$limit" status <&$fd
  assert_contains "$status" "400" "a client stalled in its $([[ $fd == 4 ]] && echo headers || echo body) is answered 400"
done
took=$(($(now_ms) - slow_start))
((took >= 9000)) || fail "answered at the read timeout (10 s), not before: ${took} ms"
((took < 10000 + 5000 * ${Q_TEST_TIME_SCALE:-1})) || fail "answered at the read timeout (10 s): ${took} ms"
exec 4>&- 5>&-
run curl -s -o /dev/null -w '%{http_code}' --max-time 5 -d 'Action=ListQueues' "$EP/"
assert_eq 200 "$OUT" "served after the stalled clients are gone"
# A client trickling a byte every 2 s never waits 10 s for one read, yet is cut
# off 10 s into its request: the read timeout is for the whole request.
exec 4<>"/dev/tcp/127.0.0.1/$PORT"
slow_start=$(now_ms)
(printf 'POST / HTTP/1.1\r\nHost: x\r\nX-Slow: ' >&4
 for _ in $(seq 30); do sleep 2; printf 'x' >&4 || exit 0; done) 2>/dev/null &
trickler=$!
status=""
read -r -t "$((30 * ${Q_TEST_TIME_SCALE:-1}))" status <&4
took=$(($(now_ms) - slow_start))
assert_contains "$status" "400" "a client trickling its headers is answered 400"
((took < 10000 + 5000 * ${Q_TEST_TIME_SCALE:-1})) || fail "cut off at the read timeout (10 s) in all, not per read: ${took} ms"
kill "$trickler" 2>/dev/null
wait "$trickler" 2>/dev/null
exec 4>&-

# A flood: 3 connections held idle take the 3 threads; 60 more at once all
# get 503 from the one refusing thread, and no thread is made for them.
pid=$SERVE_PID
for fd in 6 7 8; do
  eval "exec $fd<>/dev/tcp/127.0.0.1/$PORT"
  printf 'POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 17\r\n\r\nAction=ListQueues' >&$fd
  read -r -t 10 status <&$fd
  assert_contains "$status" "200" "held connection $fd is served"
done
threads_before=$(ls "/proc/$pid/task" | wc -l)
curls=()
for i in $(seq 60); do
  curl -s -o /dev/null -w '%{http_code}\n' --max-time 20 -d 'Action=ListQueues' "$EP/" >>"$T/flood" &
  curls+=($!)
done
max_threads=0
running() { local p; for p in "${curls[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while running; do
  n=$(ls "/proc/$pid/task" 2>/dev/null | wc -l)
  ((n > max_threads)) && max_threads=$n
  sleep 0.05
done
assert_eq 60 "$(grep -c '^503$' "$T/flood")" "60 connections beyond --max-connections: all 503 ($(sort "$T/flood" | uniq -c | tr '\n' ' '))"
((max_threads <= threads_before)) || fail "no thread per refused connection: $threads_before threads before, $max_threads during the flood"
echo "flood: $threads_before threads before, at most $max_threads during 60 refused connections"
exec 6>&- 7>&- 8>&-
wait_for 15 bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' -d Action=ListQueues $EP/) == 200 ]]" ||
  fail "served again after the flood"

# HTTPS.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" -days 1 \
  -subj /CN=127.0.0.1 >/dev/null 2>&1 || die "openssl req failed"
start "$T/b.log" --insecure-no-auth --tls-cert "$T/cert.pem" --tls-key "$T/key.pem"
run curl -s -k -o "$T/body" -w '%{http_code}' -d 'Action=ListQueues' "https://127.0.0.1:$PORT/"
assert_eq 200 "$OUT" "HTTPS with --tls-cert/--tls-key"
assert_contains "$(cat "$T/body")" "https://127.0.0.1:$PORT/000000000000/jobs" "https queue URLs"
assert_exit 64 "$Q" serve --listen 127.0.0.1:0 --insecure-no-auth --tls-cert "$T/cert.pem"
assert_contains "$ERR" "--tls-key" "a certificate without its key names the flag"

# A port in use is refused, also when that is another q serve of this user
# (cpp-httplib's default SO_REUSEPORT let the second one bind and take half
# of the connections).
start "$T/p.log" --insecure-no-auth
assert_exit 69 timeout 20 "$Q" serve --listen "127.0.0.1:$PORT" --insecure-no-auth
assert_contains "$ERR" "cannot listen there" "a second q serve on the same port: said"

# Replies are not held back by Nagle's algorithm (a reply is more than one
# write: with it on, each request on a keep-alive connection waited some 40 ms
# for the client's delayed ACK). Seen as the socket option on the accepted
# connection, not as a time.
if command -v strace >/dev/null; then
  # LeakSanitizer cannot run under ptrace: in an ASan build its exit report
  # would be a fatal error (test_files.sh does the same).
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -qq -e trace=setsockopt -o "$T/nodelay" "$Q" serve --listen 127.0.0.1:0 \
    --insecure-no-auth 2>"$T/n.log" &
  tracer=$!
  wait_for 20 grep -q 'q serve: .* on http' "$T/n.log" || die "q serve under strace did not start"
  PORT=$(grep -oE 'on https?://127\.0\.0\.1:[0-9]+' "$T/n.log" | head -1 | sed 's/.*://')
  run curl -s -o /dev/null -w '%{http_code}' -d 'Action=ListQueues' "http://127.0.0.1:$PORT/"
  assert_eq 200 "$OUT" "served under strace"
  # The traced q serve first (strace's child), so strace ends with it and
  # leaves nothing running.
  pkill -TERM -P "$tracer" 2>/dev/null
  wait "$tracer" 2>/dev/null
  assert_contains "$(cat "$T/nodelay")" "TCP_NODELAY, [1]" "accepted connections have TCP_NODELAY"
else
  missing_part "strace (to see the socket options)"
fi
