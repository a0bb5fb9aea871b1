#!/usr/bin/env bash
# create, send (BODY, stdin, --lines, -0), receive (text and --json), ack.
source "$(dirname "$0")/lib.sh" "$@"

ID_RE='^m[1-9a-f][0-9a-f]*$'
RFC3339_MS_RE='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'

# ---- create -------------------------------------------------------------------
assert_exit 0 "$Q" create jobs
on_nats || [[ -f $Q_FILE ]] || fail "q create did not make the queue file $Q_FILE"
assert_exit 0 "$Q" create jobs   # the same settings again: fine
assert_exit 0 "$Q" list
assert_eq "jobs" "$OUT" "q list after create"

# ---- send BODY prints an id -------------------------------------------------------
assert_exit 0 "$Q" send jobs hello
assert_match "$ID_RE" "$OUT" "q send prints a message id"
id_hello=$OUT
assert_eq "" "$ERR" "q send prints nothing on stderr"

assert_exit 0 "$Q" send jobs world
assert_match "$ID_RE" "$OUT" "second send prints an id"
[[ $OUT != "$id_hello" ]] || fail "two sends printed the same id $OUT"

assert_exit 0 "$Q" send jobs --json '{"not":"parsed"}'
assert_eq "false" "$(jq -r .duplicate <<<"$OUT")" "send --json: duplicate false"
assert_match "$ID_RE" "$(jq -r .id <<<"$OUT")" "send --json: id"
assert_exit 0 "$Q" send jobs -q quiet
assert_eq "" "$OUT" "send -q prints nothing"

# Receive them in order (FIFO for equal visibility times).
assert_exit 0 "$Q" receive jobs -n 10 --json
assert_eq 4 "$(grep -c . <<<"$OUT")" "receive -n 10 returns the 4 messages, one JSON line each"
assert_eq "$id_hello" "$(head -n1 <<<"$OUT" | jq -r .id)" "oldest message first"
assert_eq $'hello\nworld\n{"not":"parsed"}\nquiet' "$(jq -r .body <<<"$OUT")" "bodies in send order"
assert_exit 0 "$Q" ack jobs $(jq -r .receipt <<<"$OUT")

# ---- --lines ----------------------------------------------------------------------
assert_exit 0 "$Q" create lines
run_in $'a\nb\nc' "$Q" send lines --lines
assert_eq 0 "$RC" "send --lines exit"
assert_eq 3 "$(grep -c . <<<"$OUT")" "printf 'a\\nb\\nc' | send --lines: 3 ids (last unterminated line counts)"
assert_eq 3 "$(sort -u <<<"$OUT" | grep -c .)" "send --lines: 3 distinct ids"
while read -r id; do assert_match "$ID_RE" "$id" "send --lines id"; done <<<"$OUT"
assert_exit 0 "$Q" receive lines -n 10 --json
assert_eq $'a\nb\nc' "$(jq -r .body <<<"$OUT")" "--lines bodies without their newline"
assert_exit 0 "$Q" ack lines $(jq -r .receipt <<<"$OUT")

run_in $'a\n' "$Q" send lines --lines
assert_eq 1 "$(grep -c . <<<"$OUT")" "printf 'a\\n' | send --lines: 1 message, not 2"
assert_exit 0 "$Q" receive lines -n 10 --json
assert_eq 1 "$(grep -c . <<<"$OUT")" "one message after 'a\\n' --lines"
assert_eq "a" "$(jq -r .body <<<"$OUT")" "--lines body 'a'"
assert_exit 0 "$Q" ack lines "$(jq -r .receipt <<<"$OUT")"

# An empty line in the middle is a message (an empty body).
run_in $'x\n\ny\n' "$Q" send lines --lines
assert_eq 3 "$(wc -l <"$T/out")" "printf 'x\\n\\ny\\n' | send --lines: 3 messages (the empty line too)"
assert_exit 0 "$Q" purge lines

# ---- -0 / --null ------------------------------------------------------------------
printf 'one\0two\nlines\0three' | "$Q" send lines -0 >"$T/ids" 2>"$T/err"
assert_eq 0 "$?" "send -0 exit"
assert_eq 3 "$(wc -l <"$T/ids")" "send -0: 3 NUL-separated records (last unterminated)"
printf 'four\0' | "$Q" send lines --null >>"$T/ids"
assert_eq 4 "$(wc -l <"$T/ids")" "send --null 'four\\0': 1 record"
assert_exit 0 "$Q" receive lines -n 10 --json
assert_eq 4 "$(grep -c . <<<"$OUT")" "4 messages from -0/--null"
assert_eq '["one","two\nlines","three","four"]' "$(jq -cs 'map(.body)' <<<"$OUT")" \
  "-0 bodies keep their newlines"
assert_exit 0 "$Q" ack lines $(jq -r .receipt <<<"$OUT")

# ---- stdin verbatim --------------------------------------------------------------
printf 'hello\n' | "$Q" send jobs >/dev/null || fail "printf 'hello\\n' | q send failed"
printf 'two\nlines\n\n' | "$Q" send jobs - >/dev/null || fail "q send jobs - failed"
assert_exit 0 "$Q" receive jobs --json
jq -j .body <<<"$OUT" >"$T/body1"
printf 'hello\n' >"$T/want1"
cmp -s "$T/want1" "$T/body1" || fail "stdin body not verbatim: want 'hello\\n', got $(od -c "$T/body1" | head -n2)"
assert_eq '"hello\n"' "$(jq -c .body <<<"$OUT")" "JSON body keeps the trailing newline"
r1=$(jq -r .receipt <<<"$OUT")
assert_exit 0 "$Q" receive jobs --json
assert_eq '"two\nlines\n\n"' "$(jq -c .body <<<"$OUT")" "send - keeps every trailing newline"
r2=$(jq -r .receipt <<<"$OUT")
assert_exit 0 "$Q" ack jobs "$r1" "$r2"

# An empty body from stdin is a message with an empty body.
: | "$Q" send jobs >/dev/null || fail "empty stdin send failed"
assert_exit 0 "$Q" receive jobs --json
assert_eq '""' "$(jq -c .body <<<"$OUT")" "empty stdin: empty body"
assert_exit 0 "$Q" ack jobs "$(jq -r .receipt <<<"$OUT")"

# ---- binary bodies ------------------------------------------------------------------
printf '\xff\xfe\x00\x01bin\n\tx\\' >"$T/binary"
"$Q" send jobs <"$T/binary" >/dev/null || fail "binary send failed"
"$Q" send jobs <"$T/binary" >/dev/null || fail "binary send failed"
assert_exit 0 "$Q" receive jobs --json
assert_eq "null" "$(jq -r .body <<<"$OUT")" "non-UTF-8 body: no 'body' field in JSON"
jq -r .body_base64 <<<"$OUT" | base64 -d >"$T/binary.out" 2>/dev/null
cmp -s "$T/binary" "$T/binary.out" ||
  fail "body_base64 does not decode to the bytes sent: $(od -An -tx1 "$T/binary.out" | head -n2)"
assert_exit 0 "$Q" ack jobs "$(jq -r .receipt <<<"$OUT")"

assert_exit 0 "$Q" receive jobs
assert_eq 1 "$(wc -l <"$T/out")" "text receive of a binary body is exactly one line"
IFS=$'\t' read -r f_id f_receipt f_count f_body <"$T/out"
assert_match "$ID_RE" "$f_id" "text receive: ID column"
assert_match "^$f_id\.[0-9a-f]{16}$" "$f_receipt" "text receive: RECEIPT column"
assert_eq 1 "$f_count" "text receive: RECEIVE_COUNT column"
assert_eq '\xff\xfe\x00\x01bin\n\tx\\' "$f_body" "text receive: body escaped"
assert_eq 4 "$(awk -F'\t' '{print NF}' "$T/out")" "text receive: 4 tab-separated fields"
assert_exit 0 "$Q" ack jobs "$f_receipt"

# Valid UTF-8 stays as it is, in JSON and in text.
assert_exit 0 "$Q" send jobs 'grüße ✓'
assert_exit 0 "$Q" receive jobs
assert_eq 'grüße ✓' "$(cut -f4 <<<"$OUT")" "UTF-8 body unescaped in text"
assert_exit 0 "$Q" ack jobs "$(cut -f2 <<<"$OUT")"

# ---- receive --json fields --------------------------------------------------------------
before=$(date +%s)
assert_exit 0 "$Q" send jobs payload --attr k=v --attr x=y=z --attr 'sp ace=a b'
id=$OUT
after=$(date +%s)
assert_exit 0 "$Q" receive jobs --json
msg=$OUT
assert_eq 1 "$(grep -c . <<<"$msg")" "receive: one JSON line"
jq -e . <<<"$msg" >/dev/null || fail "receive --json is not valid JSON: $msg"
assert_eq "$id" "$(jq -r .id <<<"$msg")" "json id is the id send printed"
assert_match "^$id\.[0-9a-f]{16}$" "$(jq -r .receipt <<<"$msg")" "json receipt: ID.16hex"
assert_eq "payload" "$(jq -r .body <<<"$msg")" "json body"
assert_eq 1 "$(jq -r .receive_count <<<"$msg")" "json receive_count"
assert_eq number "$(jq -r '.receive_count|type' <<<"$msg")" "receive_count is a number"
sent_at=$(jq -r .sent_at <<<"$msg")
assert_match "$RFC3339_MS_RE" "$sent_at" "sent_at is RFC 3339 UTC with milliseconds"
sent_s=$(jq -r '.sent_at | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601' <<<"$msg")
if ! ((sent_s >= before - 1 && sent_s <= after + 1)); then
  fail "sent_at $sent_at is not the time of the send ($before..$after)"
fi
assert_eq '{"k":"v","x":"y=z","sp ace":"a b"}' "$(jq -c .attributes <<<"$msg")" \
  "attributes object from --attr k=v (value may contain '=')"
receipt=$(jq -r .receipt <<<"$msg")

# Peek shows it in flight without counting a receive.
assert_exit 0 "$Q" peek jobs --json
assert_eq "in_flight" "$(jq -r .state <<<"$OUT")" "peek: state of a received message"
assert_eq 1 "$(jq -r .receive_count <<<"$OUT")" "peek does not count a receive"
assert_eq null "$(jq -r .receipt <<<"$OUT")" "peek shows no receipt"

# ---- ack --------------------------------------------------------------------------------
assert_exit 0 "$Q" ack jobs "$receipt"
assert_eq "" "$ERR" "ack prints nothing on stderr"
assert_exit 3 "$Q" ack jobs "$receipt"
assert_contains "$ERR" "stale" "second ack of a receipt: stderr says stale"
assert_exit 1 "$Q" receive jobs
assert_eq "" "$OUT" "empty receive prints nothing"

# Several receipts, one of them stale: exit 3, the others acked.
run_in $'s1\ns2\ns3\n' "$Q" send jobs --lines
assert_exit 0 "$Q" receive jobs -n 3 --json
mapfile -t rs < <(jq -r .receipt <<<"$OUT")
assert_eq 3 "${#rs[@]}" "3 receipts"
assert_exit 0 "$Q" ack jobs "${rs[1]}"
assert_exit 3 "$Q" ack jobs "${rs[0]}" "${rs[1]}" "${rs[2]}"
assert_contains "$ERR" "${rs[1]}" "stderr names the stale receipt"
assert_not_contains "$ERR" "${rs[0]}" "stderr does not complain about a good receipt"
assert_exit 0 "$Q" stats jobs --json
assert_eq 0 "$(jq .in_flight <<<"$OUT")" "good receipts of a partly stale ack were acked (in_flight)"
assert_eq 0 "$(jq .visible <<<"$OUT")" "good receipts of a partly stale ack were acked (visible)"
acked_before=$(jq .acked <<<"$OUT")
assert_exit 3 "$Q" ack jobs "${rs[0]}"
assert_exit 3 "$Q" ack jobs "${rs[2]}"

# Receipts from stdin, one a line (blank lines ignored).
run_in $'t1\nt2\n' "$Q" send jobs --lines
assert_exit 0 "$Q" receive jobs -n 2 --json
receipts=$(jq -r .receipt <<<"$OUT")
assert_exit_in 0 "$receipts"$'\n\n' "$Q" ack jobs
assert_exit 0 "$Q" stats jobs --json
nats_lacks counters || assert_eq $((acked_before + 2)) "$(jq .acked <<<"$OUT")" "ack from stdin acked both"
assert_eq 0 "$(jq .in_flight <<<"$OUT")" "ack from stdin: nothing in flight"

# Malformed receipts: 65, and the good ones of the same call are still acked.
assert_exit 65 "$Q" ack jobs not-a-receipt
assert_contains "$ERR" "malformed" "malformed receipt: stderr says malformed"
assert_exit 65 "$Q" ack jobs m1.zz
assert_exit 65 "$Q" ack jobs m1.0000000000000000
assert_exit 0 "$Q" send jobs good
assert_exit 0 "$Q" receive jobs --json
good=$(jq -r .receipt <<<"$OUT")
assert_exit 65 "$Q" ack jobs "$good" garbage
assert_exit 3 "$Q" ack jobs "$good"   # it was acked by the call above
# Malformed beats stale.
assert_exit 65 "$Q" ack jobs "$good" garbage

# A receipt of one queue does not ack a message of another.
assert_exit 0 "$Q" create other
assert_exit 0 "$Q" send jobs mine
assert_exit 0 "$Q" receive jobs --json
mine=$(jq -r .receipt <<<"$OUT")
run "$Q" ack other "$mine"
[[ $RC != 0 ]] || fail "ack on the wrong queue succeeded: $RUN_CMD"
assert_exit 0 "$Q" ack jobs "$mine"
