#!/usr/bin/env bash
# Regression tests for the breaks found by adversarial rounds (issues 12 and
# 17): each block is the reported reproduction, run as a user would, with the
# issue and break it guards named.
source "$(dirname "$0")/lib.sh" "$@"

# reopen_ok WHAT: a new process opens the file, verify says consistent.
reopen_ok() {
  assert_exit 0 "$Q" stats || return
  assert_exit 0 "$Q" verify
  assert_contains "$OUT" "consistent" "$1: verify"
}

# Issue 17, break 1: a batch drain, purge or delete left a healthy file that
# every new process refused as "truncated".
for n in 1 500 1000 5000; do
  export Q_FILE=$T/purge-$n.q
  "$Q" create W >/dev/null
  seq 1 "$n" | "$Q" send W --lines -q || fail "send $n"
  assert_exit 0 "$Q" purge W
  reopen_ok "purge of $n"
done
export Q_FILE=$T/drain.q
"$Q" create W >/dev/null
seq 1000 | "$Q" send W --lines -q
"$Q" receive W -n 1000 | cut -f2 | "$Q" ack W >/dev/null || fail "receive | ack of 1000"
reopen_ok "drain of 1000"
assert_eq 1000 "$(stat_field W acked)" "all 1000 were acked"
export Q_FILE=$T/delete.q
"$Q" create W --max-receives 1 --visibility-timeout 0 >/dev/null
seq 300 | "$Q" send W --lines -q
"$Q" receive W -n 300 >/dev/null
"$Q" receive W -n 300 >/dev/null # received once already: all 300 are dead-lettered
seq 300 | "$Q" send W --lines -q
assert_eq 300 "$(stat_field W dead)" "300 dead letters before the delete"
assert_exit 0 "$Q" delete W
reopen_ok "delete of 300 live and 300 dead"

# Issue 12, break 1: repeated ids in redrive and dlq delete.
export Q_FILE=$T/repeat.q
"$Q" create s --max-receives 1 --visibility-timeout 0 >/dev/null
seq 3 | "$Q" send s --lines -q
"$Q" receive s -n 3 >/dev/null
"$Q" receive s >/dev/null
assert_exit 0 "$Q" redrive s --id m3 --id m3
assert_eq "m3" "$OUT" "an id given twice is redriven once"
assert_eq "1 2" "$(stat_field s visible) $(stat_field s dead)" "visible and dead after the redrive"
assert_exit 0 "$Q" dlq delete s m1 m1
assert_eq 1 "$(stat_field s dead)" "dlq delete of an id given twice"
assert_exit 0 "$Q" verify

# Issue 12, break 2: an imported id at the end of the sequence space.
export Q_FILE=$T/import-ids.q
"$Q" create i >/dev/null
for id in mffffffffffffffff mfffffffffffffff0; do
  assert_exit 0 "$Q" import i <<<"{\"id\":\"$id\",\"body\":\"x\"}"
  [[ $OUT != "$id" ]] || fail "import kept id $id"
  for n in $(seq 16); do "$Q" send i after -q || { fail "send $n after importing $id"; break; }; done
done
assert_exit 0 "$Q" verify

# Issue 12, break 9: import refuses what send refuses.
export Q_FILE=$T/import-rules.q
"$Q" create i >/dev/null
assert_exit 65 "$Q" import i <<<'{"id":"m1","body":"x","dedup_id":""}'
assert_exit 65 "$Q" import i <<<'{"id":"m1","body":"x","group":"g"}'
assert_exit 65 "$Q" import i <<<'{"id":"m1","body":"x","receive_count":99999999999}'
assert_exit 65 "$Q" import i <<<'{"id":"m1","body":"x","sent_at":"2999-01-01T00:00:00Z"}'
assert_eq 0 "$(stat_field i visible)" "refused imports stored nothing"
# ... and re-enters dedup ids still inside their window.
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
assert_exit 0 "$Q" import i <<<"{\"id\":\"m5\",\"body\":\"x\",\"dedup_id\":\"order-1\",\"sent_at\":\"$now\"}"
assert_exit 0 "$Q" send i x --dedup-id order-1 --json
assert_eq true "$(jq -r .duplicate <<<"$OUT")" "a send after import is recognised as a repeat"

# Issue 17 §6: an import line longer than any message the queue accepts is
# refused while it is read, not parsed whole.
"$Q" create small --max-size 10 >/dev/null
run bash -c "{ printf '{\"body\":\"'; head -c 50000000 /dev/zero | tr '\\\\0' a; printf '\"}\\n'; } | '$Q' import small"
assert_eq 65 "$RC" "an over-long import line"
assert_contains "$ERR" "line 1: over" "the error names the line"

# Issue 17 §6: listing, choosing and exporting dead letters held every body
# (dlq list -n 1 over 400 MB peaked at 787 MB). Memory must follow what is
# printed: checked here on 64 MB of dead letters with GNU time's peak RSS.
if [[ ! -x /usr/bin/time ]]; then
  missing_part "/usr/bin/time (Debian: time): the memory checks"
elif ldd "$Q" 2>/dev/null | grep -q 'libasan'; then
  # ASan's shadow memory and quarantine of freed blocks are not q's.
  skip_part "a sanitizer build: its memory use is not q's"
else
  export Q_FILE=$T/memory.q
  "$Q" create W --max-receives 1 --visibility-timeout 0 >/dev/null
  python3 -c 'import sys; sys.stdout.write(("x" * 1000000 + "\n") * 64)' | "$Q" send W --lines -q
  "$Q" receive W -n 64 >/dev/null
  "$Q" receive W -n 64 >/dev/null
  assert_eq 64 "$(stat_field W dead)" "64 dead letters of 1 MB"
  peak_kb() { /usr/bin/time -f %M -o "$T/peak" "$@" >/dev/null 2>&1; tail -1 "$T/peak"; }
  for cmd in "dlq list W -n 1" "dlq list W --by-reason" "redrive W --reason r --max 1 --dry-run" \
             "export W"; do
    # shellcheck disable=SC2086
    kb=$(peak_kb "$Q" $cmd)
    ((kb < 32 * 1024)) || fail "q $cmd peaked at $kb KB over 64 MB of dead letters (limit 32 MB)"
  done
  assert_eq 64 "$("$Q" export W | wc -l)" "export still writes every dead letter"
fi
