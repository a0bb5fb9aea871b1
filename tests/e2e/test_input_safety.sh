#!/usr/bin/env bash
# Input validation and output safety (issue 12 breaks 7, 12, 13, 16; issue 17
# section 7): what q refuses, and that what it prints is safe for a terminal
# and valid JSON whatever bytes a message carries.
source "$(dirname "$0")/lib.sh" "$@"

# refused CODE FLAG CMD...: exits CODE, names FLAG on stderr, prints nothing.
refused() {
  local code=$1 flag=$2
  shift 2
  assert_exit "$code" "$@" || return
  assert_contains "$ERR" "$flag" "$*: the error names $flag"
  assert_eq "" "$OUT" "$*: nothing on stdout"
}

# q check is a monitoring plugin: a bad flag is UNKNOWN (3) with the reason in
# its status line on stdout, as its man page says.
refused_check() {
  local flag=$1
  shift
  assert_exit 3 "$Q" check "$@" || return
  assert_match "^Q UNKNOWN - .*$flag" "$OUT" "check $*: the status line names $flag"
}

"$Q" create base >/dev/null || die "create base"

# ---- issue 12 break 13: accepted input that must be refused ---------------------------
refused 64 --max-depth "$Q" create md --max-depth -1
refused 64 --max-depth "$Q" config base --max-depth -1
refused 64 --max-receives "$Q" create mr --max-receives -1
refused 64 --max-size "$Q" create ms --max-size -5
assert_exit 0 "$Q" config base --json
assert_eq 0 "$(jq .max_depth <<<"$OUT")" "a refused --max-depth changed nothing"
refused 64 --at "$Q" send base x --at 2026-02-30T00:00:00Z
refused 64 --at "$Q" send base x --at 2026-01-01T00:00:00+25:00
refused 64 --delay "$Q" send base x --delay 1h1h
refused 64 --visibility-timeout "$Q" receive base --visibility-timeout 1m1m
assert_exit 1 "$Q" receive base  # nothing was sent by the refused sends
refused_check --sample --min-rate 1/s --sample 99999d
refused_check --max-dead --max-dead 5,1
refused_check --max-age --max-age 5m,1m
refused_check --min-rate --min-rate 1/s,5/s
assert_exit 0 "$Q" check --max-dead 1,5 --max-age 1m,5m --min-rate 5/s,1/s --sample 10ms

# ---- issue 17 section 7: a rate whose interval does not fit ------------------------------
refused 64 --rate "$Q" config base --rate 1e-300/s
refused 64 --rate "$Q" create r2 --rate 0.0000000001/s
refused 64 --rate "$Q" work base --rate 1e-300/s --exit-when-empty -- true
assert_exit 0 "$Q" config base --rate 10/h
assert_exit 0 "$Q" config base --rate 0

# ---- issue 12 break 16: queue names -------------------------------------------------------
for name in . .. -x --x -; do
  assert_exit 64 "$Q" create -- "$name"
  assert_contains "$ERR" "queue name" "create '$name': says the name is the problem"
done
assert_exit 64 "$Q" send --create -- -x body
assert_exit 0 "$Q" list
assert_eq "base" "$OUT" "no odd queue was created"
assert_exit 0 "$Q" create a.b-c_d
assert_exit 0 "$Q" delete a.b-c_d

# ---- issue 12 break 7: attributes are UTF-8 text, JSON is always valid ----------------------
"$Q" create attrs >/dev/null
refused 65 "attribute" "$Q" send attrs body --attr "k=$(printf 'a\xffb')"
refused 65 "attribute" "$Q" send attrs body --attr "$(printf 'k\xfe')=v"
refused 65 --dedup-id "$Q" send attrs body --dedup-id "$(printf 'd\xff')"
assert_exit 1 "$Q" receive attrs  # nothing was stored
# A key given twice: the last value wins, in send and in import.
assert_exit 0 "$Q" send attrs body --attr k=1 --attr other=x --attr k=2
assert_exit 0 "$Q" peek attrs --json
assert_eq '{"k":"2","other":"x"}' "$(jq -c .attributes <<<"$OUT")" "send: last value wins"
assert_exit_in 0 '{"id":"m900","body":"i","attributes":{"k":"1","k":"3"}}' "$Q" import attrs
assert_exit 0 "$Q" peek attrs --json -n 10
# By body: on NATS an imported id is kept only where the stream's sequence has
# passed it (README, Differences on NATS); m900 is not, here.
assert_eq '{"k":"3"}' "$(jq -c 'select(.body=="i") | .attributes' <<<"$OUT")" \
  "import: last value wins"
# attributes_base64 is read back; what is not UTF-8 is then refused like send.
assert_exit_in 0 '{"id":"m901","body":"b","attributes_base64":{"YQ==":"w6k="}}' "$Q" import attrs
assert_exit 0 "$Q" peek attrs --json -n 10
assert_eq '{"a":"é"}' "$(jq -c 'select(.body=="b") | .attributes' <<<"$OUT")" \
  "import reads attributes_base64"
assert_exit_in 65 '{"id":"m902","body":"b","attributes_base64":{"YQ==":"/w=="}}' "$Q" import attrs
assert_exit_in 65 '{"id":"m903","body":"b","attributes_base64":{"YQ==":"/w="}}' "$Q" import attrs
assert_contains "$ERR" "base64" "malformed base64 is named"
assert_exit_in 65 '{"id":"m904","body_base64":"Zm8=Zm8="}' "$Q" import attrs
# Whatever the bytes of bodies, reasons and names, every JSON line parses.
"$Q" send attrs "$(printf 'bin\xff\xfe')" -q
"$Q" send attrs "$(printf 'csi\xc2\x9b31m del\x7f')" -q
for cmd in "peek attrs --json -n 20" "export attrs" "receive attrs --json -n 20"; do
  # shellcheck disable=SC2086
  assert_exit 0 "$Q" $cmd
  jq -e . "$T/out" >/dev/null || fail "$cmd: output is not valid JSON"
  # jq quietly reads invalid UTF-8 as U+FFFD: check the bytes themselves.
  iconv -f UTF-8 -t UTF-8 "$T/out" >/dev/null 2>&1 || fail "$cmd: output is not UTF-8"
  grep -q $'\xc2\x9b' "$T/out" && fail "$cmd: a raw C1 control reached the output"
done
"$Q" export attrs | "$Q" -f "$T/copy.q" import attrs --create >/dev/null \
  || fail "export | import of a queue with binary bodies and control characters"

# ---- issue 12 break 12: C1 controls and raw control bytes on a terminal ---------------------
"$Q" create term >/dev/null
"$Q" send term "$(printf 'x\xc2\x9b2J\xc2\x85y')" -q
assert_exit 0 "$Q" peek term
assert_contains "$OUT" 'x\xc2\x9b2J\xc2\x85y' "peek escapes C1 controls"
assert_exit 0 "$Q" receive term
assert_contains "$OUT" '\xc2\x9b' "receive escapes C1 controls"
receipt=$(cut -f2 <<<"$OUT")
assert_exit 0 "$Q" nack term "$receipt" --reason "$(printf 'bad\xc2\x9b31m\r')"
"$Q" config term --max-receives 1 >/dev/null
"$Q" receive term >/dev/null
assert_exit 0 "$Q" dlq list term
assert_contains "$OUT" 'bad\xc2\x9b31m\r' "dlq list escapes the reason"
assert_exit 0 "$Q" dlq list term --by-reason
assert_contains "$OUT" 'bad\xc2\x9b#m\r' "dlq list --by-reason escapes the reason (its number masked for grouping)"
# Errors quote what was typed: escaped, so a trailing CR shows.
assert_exit 65 "$Q" ack term "$(printf 'm1.0123456789abcdef\r')"
assert_contains "$ERR" '\r' "ack: a receipt with a CR shows it"
[[ $ERR == *$'\r'* ]] && fail "ack: a raw CR reached stderr"
assert_exit 64 "$Q" send "$(printf 'no\xc2\x9bq')" x
assert_contains "$ERR" '\xc2\x9b' "a queue name with C1 is escaped in the error"
[[ $ERR == *$'\xc2\x9b'* ]] && fail "a raw C1 control reached stderr"
assert_exit 64 "$Q" "$(printf 'cmd\x1b[2J')"
[[ $ERR == *$'\x1b'* ]] && fail "an unknown command's ESC reached stderr raw"

# ---- issue 12 break 16: plurals --------------------------------------------------------------
"$Q" create one >/dev/null
"$Q" send one x -q
assert_exit 0 "$Q" purge one
assert_eq "q purge: purged 1 message from one" "$ERR" "purge: singular"
"$Q" create dl --max-receives 1 --visibility-timeout 0 >/dev/null
"$Q" send dl x -q
"$Q" receive dl >/dev/null
"$Q" receive dl >/dev/null
assert_exit 0 "$Q" dlq list dl --json
assert_eq "not acknowledged after 1 receive" "$(jq -r .reason <<<"$OUT")" "reason: singular"
assert_exit 0 "$Q" delete dl
assert_eq "q delete: deleted queue dl (0 messages, 1 dead letter)" "$ERR" "delete: singular"
"$Q" create fifo1 --fifo >/dev/null
"$Q" send fifo1 x --group g -q
assert_exit 0 "$Q" stats fifo1
assert_contains "$OUT" "FIFO: 1 group with messages" "stats: singular group"

# ---- issue 17 section 7: q check with many queues keeps a short status line ----------------
location=$Q_FILE  # back to it after (a nats:// location on NATS)
export Q_FILE=$T/many.q
for i in $(seq 1 40); do "$Q" create "q$i" >/dev/null; done
assert_exit 0 "$Q" check
status=${OUT%%|*}
((${#status} < 400)) || fail "check status line is ${#status} bytes with 40 queues"
assert_contains "$status" "and 35 more queues" "check says how many it left out"
assert_contains "$OUT" "'q40_depth'=0" "perfdata still has every queue"
for i in $(seq 1 40); do "$Q" send "q$i" x -q; done
assert_exit 2 "$Q" check --max-depth 0
status=${OUT%%|*}
((${#status} < 600)) || fail "check problem line is ${#status} bytes with 40 problems"
assert_contains "$status" "and 35 more problems" "check says how many problems it left out"
export Q_FILE=$location

# ---- issue 17 section 7: q top with standard input at end of file ---------------------------
# Measured by read calls (work done), not CPU time: a loaded machine slows a spin
# but it still makes thousands of reads a second.
top_reads() {  # top_reads STDIN_REDIRECT: read syscalls of q top in about a second
  local pidfile=$T/top.pid
  rm -f "$pidfile"
  script -qfec "sh -c 'echo \$\$ >$pidfile; exec $Q top --interval 100ms $1'" /dev/null \
    >/dev/null 2>&1 &
  local i pid=
  for i in $(seq 1 100); do [[ -s $pidfile ]] && break; sleep 0.05; done
  pid=$(<"$pidfile")
  sleep 1
  awk '/^syscr/ {print $2}' "/proc/$pid/io" 2>/dev/null || echo unknown
  kill "$pid" 2>/dev/null
  wait 2>/dev/null
}
if ! command -v script >/dev/null; then
  missing_part "script(1) (Debian: bsdutils): the q top spin check"
elif [[ ! -r /proc/self/io ]]; then
  skip_part "no /proc/PID/io here (a kernel without task I/O accounting): the q top spin check"
else
  reads=$(top_reads '</dev/null')
  [[ $reads =~ ^[0-9]+$ ]] && ((reads < 2000)) || fail "q top </dev/null made $reads reads in a second"
  reads=$(top_reads '<&-')
  [[ $reads =~ ^[0-9]+$ ]] && ((reads < 2000)) || fail "q top <&- made $reads reads in a second"
fi
