#!/usr/bin/env bash
# q on a cluster with decentralized log-in (issue 23, item 3: "one with a
# .creds/NKey user"): a 3-node cluster in operator mode with TLS
# (scripts/nats-cluster start --tls --operator: an operator, a system account
# and an account with JetStream, JWTs made by tests/nats/jwt.py), the user's
# .creds file from nsc's format in NATS_CREDS. Checks: the whole round (create,
# send, receive, ack, stats, a q work handler's own q) logs in with NATS_CREDS;
# the handler gets NATS_CREDS (a path) and a Q_FILE without secrets; a user of
# an account the operator never signed, a .creds file of garbage, one without its seed, a missing one
# and NATS_CREDS beside NATS_USER are each refused in one line with their exit
# code (77, 65, 65, 66, 64), at once; neither the seed nor the JWT of the .creds
# file appears in any output.
#   test_nats_creds.sh Q_BINARY
source "$(dirname "$0")/lib.sh"
Q=${1:?usage: test_nats_creds.sh Q_BINARY}
Q=$(cd "$(dirname "$Q")" && pwd)/$(basename "$Q")
nats_require "$Q"
command -v openssl >/dev/null || nats_missing "openssl not installed (Debian: openssl)"
T=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-creds.XXXXXX")
CL=$T/c
trap _nats_exit EXIT
limit=$(awk -v s="$scale" 'BEGIN { print 3 * s }')  # a refusal comes back at once

urls=$("$cluster" start --tls --operator "$CL" 3) || { echo "FAIL: cluster start"; exit 1; }
# shellcheck source=/dev/null
source "$CL/env"
seed=$(grep '^SU' "$NATS_TEST_CREDS")
token=$(grep '^ey' "$NATS_TEST_CREDS")
[[ $urls == tls://* && -n $seed && -n $token ]] || { echo "FAIL: operator cluster env: $urls"; exit 1; }

unset NATS_USER NATS_PASSWORD NATS_CREDS NATS_NKEY NATS_CA NATS_CERT NATS_KEY Q_FILE
export NATS_CA=$NATS_TEST_CA
loc=$urls/cr
run() { run_env "$@"; }  # (tests/nats/lib.sh)
refused() {  # RC WHAT PATTERN: the last run exited RC in one line matching PATTERN, fast
  expect "$1" "$2"
  [[ $(printf '%s' "$ERR" | wc -l) == 0 && -n $ERR ]] || fail "$2: not one line: $ERR"
  [[ $ERR == *$3* ]] || fail "$2: the error does not say '$3': $ERR"
  awk -v s="$SECS" -v l="$limit" 'BEGIN { exit !(s <= l) }' || fail "$2: took $SECS s"
}
creds=(NATS_CREDS="$NATS_TEST_CREDS")

# ---- the whole round with the .creds file --------------------------------------------------
run "${creds[@]}" -- -f "$loc" create jobs --max-receives 3
expect 0 "create with NATS_CREDS"
run "${creds[@]}" -- -f "$loc" send jobs hello
expect 0 "send with NATS_CREDS"
run "${creds[@]}" -- -f "$loc" receive jobs --json
expect 0 "receive with NATS_CREDS"
receipt=$(jq -r .receipt <<<"$OUT" 2>/dev/null)
run "${creds[@]}" -- -f "$loc" ack jobs "$receipt"
expect 0 "ack with NATS_CREDS"
run "${creds[@]}" -- -f "$loc" stats jobs --json
expect 0 "stats with NATS_CREDS"
[[ $(jq -r '"\(.visible) \(.in_flight)"' <<<"$OUT" 2>/dev/null) == "0 0" ]] || fail "stats after the ack: $OUT"
run "${creds[@]}" -- -f "$loc" stats --prometheus
expect 0 "stats --prometheus with NATS_CREDS"

# ---- a q work handler logs in the way q did ---------------------------------------------------
run "${creds[@]}" -- -f "$loc" send jobs for-the-handler
cat >"$T/handler.sh" <<EOS
#!/usr/bin/env bash
env >>"$T/handler.env"
"$Q" -f "\$Q_FILE" stats jobs --json >>"$T/handler.stats" 2>&1 || echo "handler's q: exit \$?" >>"$T/handler.stats"
EOS
chmod +x "$T/handler.sh"
run "${creds[@]}" -- -f "$loc" work jobs --exit-when-empty -- "$T/handler.sh"
expect 0 "q work with NATS_CREDS"
grep -qx "NATS_CREDS=$NATS_TEST_CREDS" "$T/handler.env" || fail "the handler did not get NATS_CREDS"
grep -qx "Q_FILE=$loc" "$T/handler.env" || fail "the handler's Q_FILE: $(grep ^Q_FILE= "$T/handler.env")"
grep -q '"visible"' "$T/handler.stats" || fail "the handler's own q could not log in: $(cat "$T/handler.stats")"

# ---- refusals: one line each, at once ---------------------------------------------------------
run NATS_CREDS="$NATS_TEST_STRANGER_CREDS" -- -f "$loc" stats jobs
refused 77 "a user of an account the operator never signed" "authorization violation"
printf 'not a creds file\n' >"$T/garbage.creds"
run NATS_CREDS="$T/garbage.creds" -- -f "$loc" stats jobs
refused 65 "a .creds file of garbage" "no user JWT"
grep -v '^SU' "$NATS_TEST_CREDS" >"$T/no-seed.creds"
run NATS_CREDS="$T/no-seed.creds" -- -f "$loc" stats jobs
refused 65 "a .creds file without its seed" "no NKey user seed"
run NATS_CREDS="$T/missing.creds" -- -f "$loc" stats jobs
refused 66 "a missing .creds file" "$T/missing.creds"
run "${creds[@]}" NATS_USER=q NATS_PASSWORD=x -- -f "$loc" stats jobs
refused 64 "NATS_CREDS beside NATS_USER" "more than one way to log in"
run -- -f "$loc" stats jobs
refused 77 "no credentials at all" "authorization violation"

# ---- no secret of the .creds file in any output -----------------------------------------------
[[ -s $T/all-output && -s $T/handler.env ]] || fail "nothing captured"
for stream in all-output handler.env handler.stats; do
  grep -qF -- "$seed" "$T/$stream" && fail "the seed of the .creds file is in $stream"
  grep -qF -- "$token" "$T/$stream" && fail "the user JWT is in $stream"
done

finish "operator-mode cluster: NATS_CREDS logs in (round, q work handler), refusals (77, 65, 65, 66, 64, 77, fast), no seed or JWT in any output"
