#!/usr/bin/env bash
# Issue 23 item 4 and issue 25 item 3: the message size limit is a capability
# of the cluster. On servers with NATS's default max_payload (1 MB), a queue's
# default max size is what the cluster holds, a larger one is refused naming
# max_payload, and a body of exactly the max size is sent, received, and
# dead-lettered after its max receives with long reasons (the dead-letter copy
# adds them and the attempt history: it used to exceed max_payload and fail
# every receive that met it, for ever), while the other messages are received.
# Usage: test_nats_size.sh PATH_TO_q
source "$(dirname "$0")/lib.sh"
export NATS_MAX_PAYLOAD=1MB
nats_test size "$1"
export Q_FILE="$urls/size"

q create jobs --max-receives 2 --visibility-timeout 2s
expect 0 "create with the default max size"
max=$("$Q" config jobs --json | jq -r .max_size)
((max > 512 * 1024 && max < 1048576)) ||
  fail "default max size on a 1 MB cluster is $max, not what it holds (under 1048576)"
q create wide --max-size 1048576
expect 64 "create --max-size over what the cluster holds"
[[ $ERR == *"--max-size 1048576: over the $max bytes"*"max_payload is 1048576 bytes"* ]] ||
  fail "the refusal names the limit and max_payload: $ERR"
q config jobs --max-size $((max + 1))
expect 64 "config --max-size over what the cluster holds"
q create wide --max-size "$max"
expect 0 "create --max-size at what the cluster holds"

# A body of exactly the max size, with 40000 bytes of attributes (JetStream
# takes 64 KiB of headers), first; three small ones after it.
head -c "$max" /dev/zero | tr '\0' x >"$T/body"
q send jobs --attr who=size --attr "note=$(head -c 40000 /dev/zero | tr '\0' a)" <"$T/body"
expect 0 "a body of exactly the default max size"
big=$OUT
cp "$T/body" "$T/over" && printf x >>"$T/over"
q send jobs <"$T/over"
expect 65 "one byte over the max size"
[[ $ERR == *"over the queue's max size of $max bytes"* ]] || fail "the size refusal's words: $ERR"
for i in 1 2 3; do "$Q" send jobs "small $i" >/dev/null || fail "send small $i"; done

# The longest reason, of characters JSON escapes.
reason=$(head -c 4096 /dev/zero | tr '\0' '\001')
for n in 1 2; do
  q receive jobs --json
  expect 0 "receive $n of the big one"
  [[ $(jq -r .id <<<"$OUT") == "$big" ]] || fail "receive $n: not the big one first: ${OUT:0:80}"
  jq -j .body <<<"$OUT" | cmp -s - "$T/body" || fail "receive $n: the body came back changed"
  q nack jobs "$(jq -r .receipt <<<"$OUT")" --reason "$reason"
  expect 0 "nack $n with a $((${#reason})) byte reason"
done
# Its receives are used up: the next receive moves it to the dead letters
# and hands out the small ones.
got=""
for i in 1 2 3; do
  q receive jobs --wait 5s --json
  expect 0 "receive of small $i after the big one's receives ran out"
  got+="$(jq -r .body <<<"$OUT");"
  "$Q" ack jobs "$(jq -r .receipt <<<"$OUT")" >/dev/null 2>&1 || fail "ack small $i"
done
[[ $got == "small 1;small 2;small 3;" ]] || fail "the small ones: $got"
q dlq list jobs --json
expect 0 "dlq list"
[[ $(jq -r .id <<<"$OUT") == "$big" ]] || fail "the big one is not a dead letter: ${OUT:0:200}"
[[ $(jq -r .receive_count <<<"$OUT") == 2 ]] || fail "its receive count: ${OUT:0:200}"
[[ $(jq -r .reason <<<"$OUT") == $'\001\001\001\001'* ]] || fail "its reason: ${OUT:0:200}"
"$Q" dlq show jobs "$big" | cmp -s - "$T/body" || fail "the dead letter's body changed"
q show jobs "$big" --json
expect 0 "show the dead letter"
[[ $(jq '.attempts | length' <<<"$OUT") -ge 2 ]] || fail "its attempt history: ${OUT:0:300}"
q verify
expect 0 "verify after the move"
finish "size limit: default $max bytes on a 1 MB cluster, refusals, a max-size message dead-lettered"
