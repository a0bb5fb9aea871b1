#!/usr/bin/env bash
# File format 2 (issue 13, item 4): a format-1 file made by the last q that
# wrote format 1 (tests/fixtures/make-format1.sh) is read as it is by read-only
# commands, then upgraded in place by the first write. Leases, dedup windows and
# dead letters of the fixture have run out in real time by now, so their checks
# live in the unit test (test_format.cpp), which runs its clock from the file's
# making; this test runs the real binary.
source "$(dirname "$0")/lib.sh" "$@"
file_backend_only "reading and upgrading queue files of an older format"

FIXTURE=$(cd "$(dirname "$0")/../fixtures" && pwd)/format1.q
cp "$FIXTURE" "$Q_FILE"
chmod u+w "$Q_FILE"

# file_format: the file's q-format value, read with LMDB's own tool.
file_format() {
  mdb_dump -n -p -s meta "$Q_FILE" | sed -n '/^ q-format$/{n;p}' | tr -d ' '
}
have_mdb_dump=1
command -v mdb_dump >/dev/null || { have_mdb_dump=0; missing_part "mdb_dump (Debian: lmdb-utils)"; }
if ((have_mdb_dump)); then
  assert_eq '\01\00\00\00' "$(file_format)" "the fixture is format 1"
fi

before=$(sha256sum <"$Q_FILE")
for cmd in "stats" "stats --json" "list" "peek jobs -n 10" "peek orders" "export jobs" \
  "export mail" "dlq list mail" "verify"; do
  # shellcheck disable=SC2086
  assert_exit 0 "$Q" $cmd
done
assert_contains "$("$Q" list)" "orders" "list shows the fixture's queues"
assert_eq 4 "$("$Q" export jobs | wc -l)" "export reads the four messages of jobs"
assert_eq "alice alice bob" "$("$Q" export orders | jq -r .group | sort | xargs)" \
  "export reads the FIFO messages with their groups"
"$Q" verify >/dev/null || fail "verify of the format-1 file"
assert_eq "$before" "$(sha256sum <"$Q_FILE")" "read-only commands leave the file byte for byte"

# The first write upgrades the file, and what it held is still there.
sent_before=$(stat_field jobs sent)
assert_exit 0 "$Q" send jobs 'after the upgrade'
assert_eq $((sent_before + 1)) "$(stat_field jobs sent)" "the counters carried over"
if ((have_mdb_dump)); then
  assert_eq '\02\00\00\00' "$(file_format)" "the first write upgraded the file to format 2"
fi
assert_exit 0 "$Q" verify
assert_contains "$OUT" "consistent" "the upgraded file verifies"
assert_eq 5 "$("$Q" export jobs | wc -l)" "jobs has its four messages and the new one"
assert_eq 5 "$("$Q" export jobs | jq -r .id | sort -u | wc -l)" "the new message got a new id"
assert_exit 0 "$Q" create newer
assert_exit 0 "$Q" verify
after=$(sha256sum <"$Q_FILE")
assert_exit 0 "$Q" stats
assert_eq "$after" "$(sha256sum <"$Q_FILE")" "a format-2 file is not rewritten by a reader either"

