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
