# q work SRC --to DST: a stage whose output is sent in the transaction that
# acks the source message (issue 14 item 2).
# On NATS the output is published, then the source acked (no transaction over
# two streams; tests/nats/test_nats_stage.sh kills q work between the two).
source "$(dirname "$0")/lib.sh" "$@"

"$Q" create src --visibility-timeout 5s --max-receives 10 || die "create src"
"$Q" create dst || die "create dst"
export Q T

# bodies QUEUE: every body of QUEUE, one a line, sorted.
bodies() { "$Q" peek "$1" --json --max 1000 | jq -r .body | sort; }

# ---- the whole output becomes one message, attributes carried over --------------
for w in alpha beta gamma; do "$Q" send src "$w" --attr origin=test >/dev/null || die send; done
assert_exit 0 "$Q" work src --to dst --exit-when-empty -q -- tr a-z A-Z
assert_eq $'ALPHA\nBETA\nGAMMA' "$(bodies dst)" "one message on dst per source message"
nats_lacks counters || assert_eq 3 "$(stat_field src acked)" "the sources are acked"
assert_eq "0 0" "$(stats_json src | jq -r '"\(.visible) \(.in_flight)"')" "nothing left in src"
assert_eq test "$("$Q" peek dst --json --max 1 | jq -r .attributes.origin)" \
  "attributes carried over"
"$Q" purge dst >/dev/null

# ---- --to-lines: one message per line; --to-attr sets an attribute -----------------
"$Q" send src "a b c" --attr origin=test >/dev/null
assert_exit 0 "$Q" work src --to dst --to-lines --to-attr origin=split --to-attr stage=2 \
  --exit-when-empty -q -- sh -c 'tr " " "\n"'
assert_eq $'a\nb\nc' "$(bodies dst)" "--to-lines: a message per line"
assert_eq "split 2" "$("$Q" peek dst --json --max 1 | jq -r '"\(.attributes.origin) \(.attributes.stage)"')" \
  "--to-attr overrides a carried attribute and adds one"
"$Q" purge dst >/dev/null

# ---- empty output: the source is acked, nothing is sent -----------------------------
"$Q" send src quiet >/dev/null
assert_exit 0 "$Q" work src --to dst --exit-when-empty -q -- true
assert_eq 0 "$(stat_field dst visible)" "empty output sends nothing"
nats_lacks counters || assert_eq 5 "$(stat_field src acked)" "empty output still acks"
assert_eq "0 0" "$(stats_json src | jq -r '"\(.visible) \(.in_flight)"')" "empty output still acks"

# ---- exit 65: dead-lettered, nothing sent; other failures: released, nothing sent ---
"$Q" send src bad >/dev/null
assert_exit 4 "$Q" work src --to dst --max-messages 1 -q -- sh -c 'echo partial; exit 65'
assert_eq 1 "$(stat_field src dead)" "exit 65 dead-letters the source"
assert_eq 0 "$(stat_field dst visible)" "exit 65 sends nothing"
"$Q" dlq purge src >/dev/null
"$Q" send src flaky >/dev/null
assert_exit 4 "$Q" work src --to dst --max-messages 1 -q -- sh -c 'echo partial; exit 3'
assert_eq 0 "$(stat_field dst visible)" "a failed run sends nothing"
# One stats call: between two, its backoff may end (delayed, then visible).
assert_eq 1 "$(stats_json src | jq -r '.visible + .delayed')" "a failed run is released"
"$Q" purge src >/dev/null

# ---- a stale receipt at the ack: nothing is sent --------------------------------------
# The command acks its own message first, so q work's receipt is stale at the ack.
"$Q" send src stale >/dev/null
assert_exit 4 "$Q" work src --to dst --max-messages 1 -- \
  sh -c '"$Q" ack src "$Q_RECEIPT" >/dev/null && echo out'
assert_contains "$ERR" "was not sent to dst" "a lost lease is reported"
assert_eq 0 "$(stat_field dst visible)" "a stale receipt sends nothing"

# ---- DST full part-way through a round: only the refused run fails --------------------
# A round's outputs and acks go in one transaction (Broker::ack_and_send_each);
# the one DST has no room for is released alone, the others are passed on.
"$Q" create small --max-depth 2 >/dev/null || die "create small"
for w in one two three; do "$Q" send src "$w" >/dev/null || die send; done
assert_exit 4 "$Q" work src --to small -j 3 --max-messages 3 -- cat
assert_contains "$ERR" "output not sent to small" "the refused output is named"
assert_eq 2 "$(stat_field small visible)" "the outputs DST had room for are sent"
assert_eq "1 0" "$(stats_json src | jq -r '"\(.visible + .delayed) \(.in_flight)"')" \
  "the refused one is released, none left leased"
assert_exit 0 "$Q" delete small
"$Q" purge src >/dev/null

# ---- --to-max-bytes: over the limit is a failure, and a runaway writer is stopped -----
"$Q" send src big >/dev/null
assert_exit 4 "$Q" work src --to dst --to-max-bytes 10 --max-messages 1 -- \
  sh -c 'printf "%s" 0123456789X'
assert_contains "$ERR" "output over 10 bytes (--to-max-bytes)" "the reason names the limit"
assert_eq 0 "$(stat_field dst visible)" "over the limit sends nothing"
"$Q" purge src >/dev/null  # the failed one waits out its backoff
"$Q" send src big >/dev/null
assert_exit 0 "$Q" work src --to dst --to-max-bytes 11 --exit-when-empty -q -- \
  sh -c 'printf "%s" 0123456789X'
assert_eq 1 "$(stat_field dst visible)" "exactly the limit is sent"
"$Q" purge dst >/dev/null
"$Q" send src runaway >/dev/null
assert_exit 4 timeout 60 "$Q" work src --to dst --to-max-bytes 100000 --max-messages 1 -q -- yes
assert_eq 0 "$(stat_field dst visible)" "its output is not sent"
"$Q" purge src >/dev/null

# ---- output written through a reopened stdout is kept whole (issue 25 item 8) ----------
# The command's stdout is a pipe: opening /dev/stdout or /proc/self/fd/1 again
# (with O_TRUNC, as a shell's > does) neither truncates nor leaves holes.
body_of_dst() { "$Q" receive dst --json | jq -r .body; }
"$Q" send src reopen >/dev/null
assert_exit 0 "$Q" work src --to dst --exit-when-empty -q -- \
  sh -c 'echo first; echo second >/dev/stdout; echo third >/proc/self/fd/1; echo fourth'
assert_eq $'first\nsecond\nthird\nfourth' "$(body_of_dst)" "every line, in order"
printf 'line one\nline two\n' >"$T/in.txt"
"$Q" send src copy >/dev/null
assert_exit 0 "$Q" work src --to dst --exit-when-empty -q -- \
  sh -c 'echo head; cp "$0" /dev/stdout' "$T/in.txt"
run "$Q" receive dst --json
assert_eq $'head\nline one\nline two' "$(jq -r .body <<<"$OUT")" "cp to /dev/stdout"
assert_not_contains "$(jq -r .body <<<"$OUT" | od -c)" '\0' "no NUL bytes"
"$Q" purge dst >/dev/null

# ---- --to-max-bytes bounds what is read, as it is read (issue 25 item 14) --------------
# A command writing as fast as it can is stopped within a pipe's worth of the
# limit (it blocks on the full pipe), not after however much it wrote meanwhile.
"$Q" send src flood >/dev/null
# (One process writing 64 KiB at a time, noting its total after each write.)
assert_exit 4 "$Q" work src --to dst --to-max-bytes 100000 --max-messages 1 -q -- \
  python3 -c 'import os, sys
f = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
n, chunk = 0, bytes(65536)
while True:
    n += os.write(1, chunk)
    os.pwrite(f, b"%20d" % n, 0)' "$T/flood.n"
written=$(tr -d ' ' <"$T/flood.n")
echo "--to-max-bytes 100000: the command had written $written bytes when it was stopped"
[[ $written =~ ^[0-9]+$ ]] || fail "the flood command did not note what it wrote"
((written <= 100000 + 4 * 65536)) || fail "wrote $written bytes past --to-max-bytes 100000"
assert_eq 0 "$(stat_field dst visible)" "its output is not sent"
"$Q" purge src >/dev/null

# ---- refused at the start: no DST, DST = SRC, --to-* without --to, FIFO without group -
"$Q" send src waiting >/dev/null
assert_exit 66 "$Q" work src --to nosuch -- true
assert_contains "$ERR" "nosuch" "the missing queue is named"
assert_eq 0 "$(stat_field src in_flight)" "nothing was taken"
assert_eq 1 "$(stat_field src visible)" "nothing was taken"
assert_exit 64 "$Q" work src --to src -- true
assert_exit 64 "$Q" work src --to-lines -- true
"$Q" create ordered --fifo >/dev/null || die "create fifo"
assert_exit 64 "$Q" work src --to ordered -- true
assert_contains "$ERR" "--to-group" "a FIFO DST needs a group"
# Every group mismatch is refused at the start, nothing taken (issue 25 item 13).
"$Q" create fsrc --fifo >/dev/null || die "create fifo source"
"$Q" send fsrc one --group g >/dev/null
assert_exit 64 "$Q" work fsrc --to dst -- cat
assert_contains "$ERR" "--to dst: a standard queue, and queue fsrc is FIFO" "FIFO into standard"
assert_exit 64 "$Q" work src --to dst --to-group g1 -- cat
assert_contains "$ERR" "--to-group: queue dst is a standard queue" "--to-group on a standard DST"
assert_exit 64 "$Q" work src --to ordered --to-group '' -- cat
assert_contains "$ERR" "--to-group '': use 1 to 128" "an empty --to-group"
assert_exit 64 "$Q" work src --to ordered --to-group "$(printf 'g%.0s' {1..129})" -- cat
assert_contains "$ERR" "use 1 to 128 printable ASCII" "a too-long --to-group"
assert_exit 64 "$Q" work src --to ordered --to-group 'a b' -- cat
assert_eq "1 0 0" "$(stats_json src | jq -r '"\(.visible) \(.in_flight) \(.dead)"')" \
  "nothing taken, nothing dead-lettered"
assert_eq "1 0" "$(stats_json fsrc | jq -r '"\(.visible) \(.dead)"')" "nothing taken from fsrc"
assert_exit 0 "$Q" work src --to ordered --to-group g1 --exit-when-empty -q -- cat
# (receive, not peek: peek on NATS does not show a message's group yet)
assert_eq g1 "$("$Q" receive ordered --json | jq -r .group)" "--to-group"

