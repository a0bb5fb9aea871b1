# Issue 27 item 6, monitoring: q check -w/-c in the monitoring-plugins range
# syntax, the file label on every Prometheus series, q --version's backends
# and libraries, and one counting rule for import on both backends.
source "$(dirname "$0")/lib.sh" "$@"

# ---- q check -w/-c RANGE --------------------------------------------------------------
"$Q" create c >/dev/null || die "create c"
for i in 1 2 3 4 5; do "$Q" send c "$i" -q || die "send"; done
check() { # WANT_EXIT ARGS...: q check c ARGS, its state
  local want=$1
  shift
  assert_exit "$want" "$Q" check c "$@"
  assert_eq 1 "$(grep -c . <<<"$OUT")" "check $*: one status line"
}
check 1 -w 3 -c 10
assert_contains "$OUT" "Q WARNING - c: depth 5 (outside -w 3) |" "5 is outside 0..3: WARNING"
assert_contains "$OUT" "'c_depth'=5;3;10;0" "the ranges in the perfdata, as given"
check 2 -w 3 -c 4
assert_contains "$OUT" "Q CRITICAL - c: depth 5 (outside -c 4)" "critical wins over warning"
check 1 -w 10:
assert_contains "$OUT" "c: depth 5 (outside -w 10:)" "10: alerts below 10"
check 0 -w '~:10' -c '~:20'
assert_contains "$OUT" "Q OK - c: depth 5" "~:10: 5 is fine"
check 0 -c 5:5
check 2 -c 6:8
check 2 -c @3:7
assert_contains "$OUT" "c: depth 5 (in -c @3:7)" "@3:7 alerts inside"
check 0 -c @6:7
check 0 --metric dead -c 0
assert_contains "$OUT" "'c_dead'=0;;0;0" "--metric dead: its perfdata carries the range"
check 2 --metric dead -c 1:
assert_contains "$OUT" "c: dead letters 0 (outside -c 1:)" "--metric dead judged"
check 0 --metric oldest_age -w '~:3600' -c '~:7200'
check 2 --metric oldest_age -c '@0:3600'
assert_contains "$OUT" "c: oldest message" "--metric oldest_age judged"
# A drain rate needs a sample; nothing is drained here, so below 1/s is critical.
check 2 --metric out_rate -c 1: --sample 50ms
assert_contains "$OUT" "c: drain rate 0.00/s (outside -c 1:)" "--metric out_rate judged"
assert_contains "$OUT" "'c_out_rate'=0.000;;1:;0" "out_rate perfdata"
# Today's flags still work beside them.
check 2 --max-depth 3
check 2 --max-dead 10 -c 4
# Mistakes are UNKNOWN (3), named, on stdout.
check 3 -w 20:10
assert_contains "$OUT" "Q UNKNOWN - -w '20:10': the start is above the end" "start above end"
check 3 -c ten
assert_contains "$OUT" "-c 'ten': not a number (ranges are N, N:, ~:N, N:M or @N:M)" "not a range"
check 3 --metric size -c 1
assert_contains "$OUT" "--metric 'size': not one of depth, dead, oldest_age, out_rate" "unknown metric"
check 3 --metric dead
assert_contains "$OUT" "--metric dead: give -w or -c RANGE" "--metric alone"
check 3 --max-depth 3 -c 10
assert_contains "$OUT" "-w/-c and --max-depth both judge depth" "two thresholds for one value"

# ---- every Prometheus series names its file --------------------------------------------
other=$T/other.q
for loc in "$Q_FILE" "$other"; do
  "$Q" -f "$loc" create same >/dev/null || die "create same in $loc"
  "$Q" -f "$loc" create fifo --fifo >/dev/null || die "create fifo in $loc"
  "$Q" -f "$loc" pause same --for 1h --reason 'maintenance' >/dev/null || die "pause"
done
assert_exit 0 "$Q" stats --prometheus
one=$OUT
assert_exit 0 "$Q" -f "$other" stats --prometheus
both=$(printf '%s\n%s\n' "$one" "$OUT" | grep -v '^#')
for series in q_messages:same q_paused:same q_paused_until_seconds:same q_pause_info:same \
  q_sent_total:same q_groups:fifo; do
  grep -qF "${series%:*}{file=\"$other\",queue=\"${series#*:}\"" <<<"$both" ||
    fail "${series%:*} of the other file has no series with its file label"
done
assert_eq "" "$(grep -v '{file="' <<<"$both")" "every series has the file label, first"
assert_eq "" "$(sed 's/ [^ ]*$//' <<<"$both" | sort | uniq -d)" "two files, one queue name: no series twice"

# ---- q --version: backends and libraries ------------------------------------------------
# (Without Q_FILE: a nats:// one hands the whole command to q-nats.)
dir=$(dirname "$Q")
assert_exit 0 env -u Q_FILE "$Q" --version
assert_match '^q [0-9][^ ]* \(queue file format [0-9]+\)' "$OUT" "the first line, as before"
assert_match $'\nlibraries: LMDB [0-9]+\\.[0-9]+\\.[0-9]+, fmt [0-9]+\\.[0-9]+\\.[0-9]+, CLI11 [0-9.]+' \
  "$OUT" "the libraries"
if [[ -x $dir/q-nats ]]; then
  assert_contains "$OUT" $'\nbackends: file, nats (q-nats: '"$dir/q-nats)" "q-nats beside q"
  assert_exit 0 env -u Q_FILE "$dir/q-nats" --version
  assert_contains "$OUT" $'\nbackends: file, nats (built in)' "q-nats: built in"
  assert_match 'nats\.c [0-9]+\.[0-9]+' "$OUT" "q-nats names nats.c"
else
  missing_part "q --version beside q-nats: no q-nats built"
fi
# A q alone (no q-nats beside it, none on PATH) says it has no nats backend.
mkdir -p "$T/alone"
ln "$Q" "$T/alone/q" 2>/dev/null || cp "$Q" "$T/alone/q"
assert_exit 0 env -u Q_FILE PATH=/usr/bin:/bin "$T/alone/q" --version
assert_contains "$OUT" $'\nbackends: file, no nats (q-nats is not beside q nor on PATH)' "a q alone"
assert_not_contains "$OUT" "nats.c" "no nats.c in the static q"

# ---- import counts as on NATS: sent, and dead-lettered for a dead letter ---------------
"$Q" create src --max-receives 1 >/dev/null || die "create src"
"$Q" send src a -q || die "send"
r=$("$Q" receive src --json | jq -r .receipt)
"$Q" nack src "$r" --reason broken || die "nack"
"$Q" receive src >/dev/null 2>&1 # the receive that dead-letters it
assert_eq 1 "$(stat_field src dead)" "src: one dead letter"
for b in b c; do "$Q" send src "$b" -q || die "send"; done
"$Q" export src >"$T/src.jsonl" || die "export"
assert_eq 3 "$(grep -c . "$T/src.jsonl")" "three exported"
"$Q" create dst >/dev/null
assert_exit 0 "$Q" import dst -q <"$T/src.jsonl"
s=$(stats_json dst)
assert_eq "3 1 1" "$(jq -r '"\(.sent) \(.dead_lettered) \(.dead)"' <<<"$s")" \
  "import: every message sent, the dead letter dead-lettered"
assert_eq "$(jq -r '.sent - .dead_lettered' <<<"$s")" "$(jq -r '.visible + .in_flight + .delayed' <<<"$s")" \
  "the counters add up to what the queue holds"
