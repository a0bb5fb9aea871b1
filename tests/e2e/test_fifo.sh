# FIFO queues end to end: producers write interleaved groups from several
# processes, competing consumers (some "crashing" before their ack) drain it,
# and for every group the acked sequence must be exactly the sent sequence.
source "$(dirname "$0")/lib.sh" "$@"

"$Q" create orders --fifo --visibility-timeout 700ms --max-receives 0 || die "create"
assert_exit 64 "$Q" send orders "no group"
assert_contains "$ERR" "--group" "a missing group is named"
assert_exit 64 "$Q" send orders --group g1 --delay 1s "delayed"
assert_contains "$ERR" "FIFO" "per-message delay is refused, saying why"
assert_exit 64 "$Q" config orders --standard
assert_contains "$ERR" "cannot change" "a queue's kind cannot change"

producer() {
  local p=$1 i g id
  for i in $(seq 1 30); do
    g=g$(((i + p) % 6))
    id=$("$Q" send orders --group "$g" "$g:$p:$i") || { echo "send failed" >&2; return 1; }
    printf '%s %s\n' "$g" "$id" >>"$T/sent.$p"
  done
}

consumer() {
  local c=$1 empty=0 msg line receipt group id token
  seed_random "$c"
  while ((empty < 4)); do
    if ! msg=$("$Q" receive orders -n 3 --wait 300ms --json); then
      empty=$((empty + 1))
      continue
    fi
    empty=0
    while IFS= read -r line; do
      receipt=$(jq -r .receipt <<<"$line")
      group=$(jq -r .group <<<"$line")
      id=$(jq -r .id <<<"$line")
      if ((RANDOM % 10 == 0)); then
        # A crash: no ack, and the rest of this batch is left too.
        break
      fi
      # Logged before the ack, not after: once acked, another consumer may take
      # the group's next message and log it before this one could (seen under
      # ASan). A refused ack takes its line back.
      token=$c.$RANDOM.$RANDOM
      printf '%s %s %s\n' "$group" "$id" "$token" >>"$T/acking"
      "$Q" ack orders "$receipt" 2>/dev/null || printf 'refused %s\n' "$token" >>"$T/acking"
    done <<<"$msg"
  done
}

for p in 1 2 3; do producer "$p" & done
for c in 1 2 3; do consumer "$c" & done
wait

cat "$T"/sent.* >"$T/sent"
awk '$1 == "refused" {gone[$2] = 1; next} {line[++n] = $0; token[n] = $3}
     END {for (i = 1; i <= n; i++) if (!(token[i] in gone)) {split(line[i], f, " "); print f[1], f[2]}}' \
  "$T/acking" >"$T/acked"
assert_eq 90 "$(wc -l <"$T/sent")" "every send succeeded"
assert_eq 90 "$(wc -l <"$T/acked")" "every message acked exactly once"
# Message ids grow in commit order: the sent sequence of a group is its ids in order.
to_num() { while read -r g id; do printf '%s %d %s\n' "$g" "0x${id#m}" "$id"; done; }
for g in g0 g1 g2 g3 g4 g5; do
  sent=$(to_num <"$T/sent" | awk -v g="$g" '$1 == g' | sort -k2,2n | awk '{print $3}' | tr '\n' ' ')
  acked=$(awk -v g="$g" '$1 == g {print $2}' "$T/acked" | tr '\n' ' ')
  assert_eq "$sent" "$acked" "group $g acked in send order"
done
assert_eq 0 "$(stat_field orders visible)" "drained"
assert_eq 0 "$(stat_field orders groups)" "no groups left"

# q work -j 4 on a FIFO queue never runs two messages of one group at once.
for i in 1 2 3 4; do
  for g in a b; do "$Q" send orders --group "$g" "$g$i" >/dev/null; done
done
cat >"$T/one.sh" <<'EOF2'
#!/bin/sh
body=$(cat)
group=${body%?}
if ! mkdir "$T/running-$group" 2>/dev/null; then echo "overlap in $group" >>"$T/overlaps"; fi
sleep 0.1
echo "$body" >>"$T/work-order"
rmdir "$T/running-$group"
EOF2
chmod +x "$T/one.sh"
export T
assert_exit 0 "$Q" work orders -j 4 --exit-when-empty -q -- "$T/one.sh"
[[ ! -e $T/overlaps ]] || fail "two messages of one group ran at once: $(cat "$T/overlaps")"
assert_eq "a1 a2 a3 a4" "$(grep a "$T/work-order" | tr '\n' ' ' | sed 's/ $//')" "group a in order"
assert_eq "b1 b2 b3 b4" "$(grep b "$T/work-order" | tr '\n' ' ' | sed 's/ $//')" "group b in order"
