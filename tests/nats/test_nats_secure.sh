#!/usr/bin/env bash
# q on a secured NATS cluster (issue 23, item 3): a 3-node cluster with TLS (a
# CA made here with openssl), client certificates verified, and log-in
# required (a user with a password, an NKey user, a user limited to one
# namespace by scripts/nats-permissions). Checks: the `nats` CLI's variables
# (NATS_USER/NATS_PASSWORD, NATS_NKEY, NATS_CA, NATS_CERT/NATS_KEY) work with
# tls:// and nats://; a password in the location works and leaves no trace;
# refusals are one line, at once, exit 77 (wrong password, unknown CA, no
# client certificate, tls:// to a plain server, another namespace); an HTTP
# server is named as not NATS (69); unknown schemes exit 64 creating nothing;
# and no output, error, metric, export, handler environment or ps line of a
# running q work holds the password or the seed.
#   test_nats_secure.sh Q_BINARY
source "$(dirname "$0")/lib.sh"
Q=${1:?usage: test_nats_secure.sh Q_BINARY}
Q=$(cd "$(dirname "$Q")" && pwd)/$(basename "$Q")  # the test runs in its temp dir
nats_require "$Q"
if ! command -v openssl >/dev/null; then
  [[ ${CI:-} == true || ${Q_REQUIRE_ALL:-} == 1 ]] && { echo "FAIL: openssl not installed"; exit 1; }
  echo "SKIP: openssl not installed"
  exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-secure.XXXXXX")
CL=$T/c
trap '[[ -n ${ppid:-} ]] && kill "$ppid" 2>/dev/null; _nats_exit' EXIT
cd "$T" || exit 1  # a location taken for a path would make directories here
limit=$(awk -v s="$scale" 'BEGIN { print 3 * s }')  # a refusal comes back at once

# The restricted user: namespace rns, queue jobs, and nothing else.
rpw=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
{
  echo "    { user: \"qr\", password: \"$rpw\""
  "$NATS_LIB_DIR/../../scripts/nats-permissions" rns jobs
  echo "    }"
} >"$T/users.conf"
urls=$("$cluster" start --tls --verify --auth --users "$T/users.conf" "$CL" 3) ||
  { echo "FAIL: cluster start"; exit 1; }
# shellcheck source=/dev/null
source "$CL/env"
hosts=${urls#tls://}
pw=$NATS_TEST_PASSWORD
seed=$(cat "$NATS_TEST_NKEY")
[[ $urls == tls://* && -n $pw && $seed == SU* ]] || { echo "FAIL: secured cluster env: $urls"; exit 1; }

unset NATS_USER NATS_PASSWORD NATS_CREDS NATS_NKEY NATS_CA NATS_CERT NATS_KEY Q_FILE
tlsenv=(NATS_CA="$NATS_TEST_CA" NATS_CERT="$NATS_TEST_CERT" NATS_KEY="$NATS_TEST_KEY")
login=(NATS_USER=q NATS_PASSWORD="$pw")
run() { run_env "$@"; }  # (tests/nats/lib.sh)
one_line() { [[ $(printf '%s' "$ERR" | wc -l) == 0 && -n $ERR ]] || fail "$1: not one line: $ERR"; }
fast() { awk -v s="$SECS" -v l="$limit" 'BEGIN { exit !(s <= l) }' || fail "$1: took $SECS s"; }

# ---- TLS + password from the environment: the whole round ----------------------------------
loc=$urls/sec
run "${tlsenv[@]}" "${login[@]}" -- -f "$loc" create jobs
expect 0 "create on tls:// with NATS_USER/NATS_PASSWORD, NATS_CA, NATS_CERT/NATS_KEY"
run "${tlsenv[@]}" "${login[@]}" -- -f "$loc" send jobs hello
expect 0 "send"
run "${tlsenv[@]}" "${login[@]}" -- -f "$loc" receive jobs --json
expect 0 "receive"
receipt=$(jq -r .receipt <<<"$OUT")
run "${tlsenv[@]}" "${login[@]}" -- -f "$loc" ack jobs "$receipt"
expect 0 "ack"
run "${tlsenv[@]}" "${login[@]}" -- -f "$loc" stats jobs --json
expect 0 "stats"
[[ $(jq -r '"\(.visible) \(.in_flight)"' <<<"$OUT") == "0 0" ]] || fail "stats after the ack: $OUT"
# nats:// on a server that demands TLS: TLS all the same.
run "${tlsenv[@]}" "${login[@]}" -- -f "nats://$hosts/sec" stats jobs
expect 0 "nats:// to a TLS server (TLS because the server demands it)"

# ---- the NKey user ---------------------------------------------------------------------------
run "${tlsenv[@]}" NATS_NKEY="$NATS_TEST_NKEY" -- -f "$loc" send jobs by-nkey
expect 0 "send as the NKey user (NATS_NKEY)"
printf 'garbage\n' >"$T/bad.nk"
run "${tlsenv[@]}" NATS_NKEY="$T/bad.nk" -- -f "$loc" stats
expect 65 "NATS_NKEY holding no seed"
one_line "NATS_NKEY holding no seed"
run "${tlsenv[@]}" NATS_NKEY="$NATS_TEST_NKEY" "${login[@]}" -- -f "$loc" stats
expect 64 "two ways to log in"

# ---- refusals: one line, at once ---------------------------------------------------------------
run "${tlsenv[@]}" NATS_USER=q NATS_PASSWORD=wrong-pw -- -f "$loc" stats
expect 77 "wrong password"
one_line "wrong password"
fast "wrong password"
[[ $ERR == *"authorization violation"* && $ERR == *127.0.0.1:$CLIENT_1* ]] ||
  fail "wrong password: the line does not name the server and the violation: $ERR"
run "${tlsenv[@]}" -- -f "$loc" stats
expect 77 "no credentials"
run NATS_CA="$NATS_TEST_OTHER_CA" NATS_CERT="$NATS_TEST_CERT" NATS_KEY="$NATS_TEST_KEY" "${login[@]}" -- -f "$loc" stats
expect 77 "a CA that does not sign the servers' certificates"
one_line "unknown CA"
fast "unknown CA"
[[ $ERR == *TLS* && $ERR == *certificate* ]] || fail "unknown CA: no TLS problem named: $ERR"
run NATS_CA="$NATS_TEST_CA" "${login[@]}" -- -f "$loc" stats
expect 77 "no client certificate for a server that verifies clients"
one_line "no client certificate"
fast "no client certificate"
[[ $ERR == *TLS* ]] || fail "no client certificate: no TLS problem named: $ERR"
run NATS_CA="$T/none.pem" "${login[@]}" -- -f "$loc" stats
expect 66 "NATS_CA naming no file"
run "${tlsenv[@]}" NATS_CERT="$NATS_TEST_CERT" NATS_KEY= "${login[@]}" -- -f "$loc" stats
expect 64 "NATS_CERT without NATS_KEY"

# A plain server (no TLS): tls:// to it; and an HTTP server (the cluster's
# monitoring port) taken for NATS.
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nats-server -a 127.0.0.1 -p "$pport" -js -sd "$T/plain" >"$T/plain.log" 2>&1 &
ppid=$!
purls=nats://127.0.0.1:$pport
deadline=$((SECONDS + 20 * scale))
until "$Q" -f "$purls/p" list >/dev/null 2>&1 || ((SECONDS > deadline)); do sleep 0.1; done
run -- -f "tls://${purls#nats://}/p" stats
expect 77 "tls:// to a server without TLS"
one_line "tls:// to a plain server"
fast "tls:// to a plain server"
[[ $ERR == *TLS* ]] || fail "tls:// to a plain server: $ERR"
run -- -f "${purls}/p" create x
expect 0 "the plain server itself works"
run -- -f "nats://127.0.0.1:$MON_1/p" stats
expect 69 "an HTTP server on the port"
one_line "an HTTP server"
[[ $ERR != *"no NATS server answered within"* ]] || fail "an HTTP server: reported as a timeout: $ERR"

# ---- unknown schemes: usage, nothing created -----------------------------------------------------
mkdir "$T/cwd"
for bad in "tls:/q:$pw@h1,h2,h3/ns" "nat://127.0.0.1:$CLIENT_1/ns" "http://127.0.0.1:$CLIENT_1/ns" \
  "NATS://h1/ns" "nats:/h1/ns"; do
  (cd "$T/cwd" && "$Q" -f "$bad" create a >"$T/out" 2>"$T/err")
  RC=$?
  ERR=$(cat "$T/err")
  cat "$T/out" "$T/err" >>"$T/all-output"
  expect 64 "-f ${bad//$pw/PW} create a"
  one_line "-f ${bad//$pw/PW}"
  [[ $ERR == *nats://* && $ERR == *tls://* ]] || fail "${bad//$pw/PW}: the accepted forms are not named: $ERR"
  (cd "$T/cwd" && Q_FILE=$bad "$Q" create a >/dev/null 2>&1)
  [[ $? == 64 ]] || fail "Q_FILE=${bad//$pw/PW}: not a usage error"
done
[[ -z $(ls -A "$T/cwd") ]] || fail "an unknown scheme created: $(find "$T/cwd" -mindepth 1 | head -3)"
(cd "$T/cwd" && "$Q" -f "./tls:/x/q.db" create a >/dev/null 2>&1) || fail "./tls:/... is a file path"
[[ -f $T/cwd/tls:/x/q.db ]] || fail "./tls:/x/q.db was not created as a file"

# ---- the restricted user: its namespace works, another is refused ----------------------------------
rl=(NATS_USER=qr NATS_PASSWORD="$rpw")
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" create jobs --max-receives 2
expect 0 "restricted user: create in its namespace"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" send jobs r1
expect 0 "restricted user: send"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" receive jobs --json
expect 0 "restricted user: receive"
receipt=$(jq -r .receipt <<<"$OUT")
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" nack jobs "$receipt"
expect 0 "restricted user: nack"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" work jobs --exit-when-empty -q -- sh -c 'cat >/dev/null'
expect 0 "restricted user: q work"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" stats jobs --json
expect 0 "restricted user: stats"
[[ $(jq -r .visible <<<"$OUT") == 0 ]] || fail "restricted user: stats after the work: $OUT"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" list
expect 0 "restricted user: list"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" verify
expect 0 "restricted user: verify"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/other" create x
expect 77 "restricted user: another namespace"
one_line "restricted user: another namespace"
[[ $ERR == *ermission* ]] || fail "another namespace: the line does not say permissions: $ERR"
run "${tlsenv[@]}" "${rl[@]}" -- -f "$urls/rns" create other-queue
expect 77 "restricted user: a queue its permissions do not list"

# ---- no secret anywhere: the password in the location, the NKey seed ---------------------------------
ploc="tls://q:$pw@$hosts/sec"
run "${tlsenv[@]}" -- -f "$ploc" send jobs with-url-password
expect 0 "the password in the location"
run "${tlsenv[@]}" -- -f "$ploc" stats --json
expect 0 "stats --json"
run "${tlsenv[@]}" -- -f "$ploc" stats --prometheus
expect 0 "stats --prometheus"
grep -qF "file=\"tls://$hosts/sec\"" <<<"$OUT" ||
  fail "--prometheus: the location label is not the location without its user info: $(grep -m1 file= <<<"$OUT")"
run "${tlsenv[@]}" -- -f "$ploc" export jobs
expect 0 "export"
run "${tlsenv[@]}" -- -f "$ploc" check
run "${tlsenv[@]}" -- -f "$ploc" verify
expect 0 "verify"
run "${tlsenv[@]}" -- -f "tls://q:$pw@$hosts/sec" peek no-such-queue
[[ $RC != 0 && -n $ERR ]] || fail "peek of a missing queue with the password in the location: exit $RC"
run "${tlsenv[@]}" -- -f "tls://q:$pw-wrong@$hosts/sec" stats
expect 77 "a wrong password in the location"
run "${tlsenv[@]}" -- -f "tls://q:$pw@$hosts/bad_ns" stats
expect 64 "a bad namespace with the password in the location"
run "${tlsenv[@]}" NATS_NKEY="$NATS_TEST_NKEY" -- -f "$loc" stats --prometheus
expect 0 "stats as the NKey user"
(env "${tlsenv[@]}" timeout 3 "$Q" -f "$ploc" top </dev/null >>"$T/all-output" 2>&1)
# q work: its handler's environment, its own messages, and ps while it runs.
for i in 1 2 3; do env "${tlsenv[@]}" "${login[@]}" "$Q" -f "$loc" send jobs "w$i" >/dev/null; done
cat >"$T/handler.sh" <<EOS
#!/bin/sh
cat >/dev/null
env >>"$T/handler.env"
"$Q" -f "\$Q_FILE" stats jobs --json >>"$T/handler.stats" 2>&1 || echo "handler's q: exit \$?" >>"$T/handler.stats"
sleep 1
EOS
chmod +x "$T/handler.sh"
env "${tlsenv[@]}" "$Q" -f "$ploc" work jobs --exit-when-empty -- "$T/handler.sh" >"$T/work.out" 2>"$T/work.err" &
wpid=$!
deadline=$((SECONDS + 30 * scale))
while [[ ! -s $T/handler.env ]] && ((SECONDS < deadline)); do sleep 0.1; done
ps -eo args >"$T/ps"
wait "$wpid" || fail "q work with the password in the location: exit $? ($(cat "$T/work.err"))"
grep -q "^Q_FILE=tls://$hosts/sec$" "$T/handler.env" ||
  fail "the handler's Q_FILE: $(grep ^Q_FILE= "$T/handler.env")"
grep -q '"visible"' "$T/handler.stats" || fail "the handler's own q could not log in: $(cat "$T/handler.stats")"
grep -q "q work" "$T/ps" || grep -q "work jobs" "$T/ps" || fail "q work was not seen in ps"
cat "$T/work.out" "$T/work.err" >>"$T/all-output"
for stream in all-output handler.env ps; do
  [[ -s $T/$stream ]] || fail "nothing captured in $stream"
done
for stream in all-output ps; do
  grep -qF -- "$pw" "$T/$stream" && fail "the password is in $stream: $(grep -F -- "$pw" "$T/$stream" | head -2)"
  grep -qF -- "$seed" "$T/$stream" && fail "the NKey seed is in $stream"
done
grep -qF -- "$seed" "$T/handler.env" && fail "the NKey seed is in the handler's environment"
grep -v '^NATS_PASSWORD=' "$T/handler.env" | grep -qF -- "$pw" &&
  fail "the password is in the handler's environment outside NATS_PASSWORD"
grep -qx "NATS_PASSWORD=$pw" "$T/handler.env" || fail "the handler did not get NATS_PASSWORD"
grep -rqF -- "$pw" "$T/cwd" && fail "the password is in a file name"

finish "secured cluster: TLS, client certificates, password, NKey, refusals (77, fast), schemes (64), restricted user, no secret in any output"
