#!/usr/bin/env bash
# The stuck-LMDB watchdog (cli/crash.cpp) tells a long healthy commit from an
# endless loop (issue 12, break 10). The burn shim makes LMDB's page writes
# cost CPU:
#   - a commit that spends about 4 CPU-seconds inside mdb_txn_commit while
#     writing its pages all along must succeed, and the file verify clean (the
#     old CPU-time-only watchdog said "damaged, restore from a backup");
#   - the control: 5 CPU-seconds inside one write, with nothing written
#     meanwhile, must still be stopped (exit 74) by the watchdog, with a message
#     that does not claim damage it has not seen.
# corruption_flips covers the real loops on damaged pages.
source "$(dirname "$0")/lib.sh" "$@"
BURN=${TORTURE_SHIM_DIR:-}/libq_burn.so
[[ -f $BURN ]] || die "the burn shim is not built: set TORTURE_SHIM_DIR (tests/torture/run does)"
use_dynamic_q
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

assert_exit 0 "$QD" create w || die "create"

# A long commit that makes progress: 100 ms of CPU before each page buffer
# written, 4 s in all.
seq 1 20000 >"$T/lines"
LD_PRELOAD=$BURN Q_BURN_MS=100 Q_BURN_TOTAL_MS=4000 "$QD" send w --lines -q <"$T/lines" \
  >"$T/out" 2>"$T/err"
rc=$?
assert_eq 0 "$rc" "a long healthy commit was stopped: $(cat "$T/err")"
assert_eq 20000 "$(stat_field w visible)" "every line was sent"
assert_exit 0 "$QD" verify || fail "the file does not verify: $ERR"

# The control: no progress at all inside one call.
LD_PRELOAD=$BURN Q_BURN_ONCE_MS=5000 "$QD" send w one-more >"$T/out" 2>"$T/err"
rc=$?
assert_eq 74 "$rc" "a call looping without progress must be stopped: $(cat "$T/err")"
assert_contains "$(cat "$T/err")" "without any progress" "the watchdog says what it saw"
assert_not_contains "$(cat "$T/err")" "the file is damaged" "and claims no damage it has not seen"
assert_contains "$(cat "$T/err")" "verify" "and how to check the file"
echo "watchdog: a 4 CPU-second commit with progress passed; a 5 CPU-second call without was stopped"
