# Shared machinery of the torture scenarios. Each scenario script does:
#
#   source "$(dirname "$0")/lib.sh" "$@"     # $1: path to the q binary
#
# and gets everything from tests/e2e/lib.sh ($Q, $T, $Q_FILE, fail, die, run,
# assert_*), plus:
#
#   $MODE          short (default; CI) or long (TORTURE_MODE=long, `run --long`)
#   $L             the directory of operation logs (*.jsonl) the checker reads
#   $TORTURE_DIR   this directory
#   long_or_short LONG SHORT      echo LONG in long mode, SHORT otherwise
#   us                            microseconds since the epoch ($EPOCHREALTIME)
#   qrun ARGS...                  run q in the background (so a killer can find it),
#                                 wait; sets RC, QPID, T0, T1, and $QO/$QE (files)
#   qlog FILE OP JSON_FIELDS      append {"op":OP,"q":..,"pid":..,"t0":..,"t1":..,"rc":..,FIELDS}
#   producer N / consumer N / work_loop N / killer      the load (see below)
#   start_load / stop_load        start the loops in the background, stop them
#   drain                         receive and ack until several empty receives in a row,
#                                 then log the dead letters and the final stats
#   check [ARGS]                  run checker.py on $L; fails the test when it fails
#   control_checker FAULT         the checker on a control run: it must fail (sets $VIOLATIONS)
#   plant_rogue_clock / expect_planted_overlap   the rogue-clock control (see below)
#   check_reader_table            no dead process in the LMDB reader table
#
# Logs and the queue file of a failed scenario are kept in
# ${TORTURE_KEEP:-/tmp}/q-torture-NAME.XXXX for a post-mortem.

TORTURE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../e2e/lib.sh
source "$TORTURE_DIR/../e2e/lib.sh" "$@"

MODE=${TORTURE_MODE:-short}
L=$T/logs
mkdir -p "$L"
QUEUE=${QUEUE:-t}

# Keep the evidence when a scenario fails.
_torture_cleanup() {
  local rc=$?
  local n=0
  [[ -s $_FAILS ]] && n=$(wc -l <"$_FAILS")
  if ((n > 0 || (rc != 0 && rc != 77))); then
    local keep
    keep=$(mktemp -d "${TORTURE_KEEP:-/tmp}/q-torture-$TEST_NAME.XXXX")
    cp -a "$T"/. "$keep"/ 2>/dev/null
    echo "$TEST_NAME: logs and queue file kept in $keep" >&2
  fi
  ( exit "$rc" )   # _cleanup reads the script's exit status from $?
  _cleanup
}
trap _torture_cleanup EXIT

# use_dynamic_q: for a scenario that preloads a shim or libfaketime. A static q
# ignores LD_PRELOAD, and the scenario would pass without testing anything: run
# the dynamically linked build of the same sources (TORTURE_Q_DYNAMIC, built by
# tests/torture/CMakeLists.txt) instead, and refuse a static one.
use_dynamic_q() {
  local qd=${TORTURE_Q_DYNAMIC:-$Q}
  [[ -x $qd ]] || die "TORTURE_Q_DYNAMIC ($qd) is not an executable"
  ldd "$qd" 2>/dev/null | grep liblmdb >/dev/null ||
    die "$qd is linked statically (or without a shared liblmdb): LD_PRELOAD cannot work on it; set TORTURE_Q_DYNAMIC to a dynamically linked q (tests/torture/run does)"
  QD=$(cd "$(dirname "$qd")" && pwd)/$(basename "$qd")
}

# wait_lines FILE N WHAT: wait until FILE has N lines. The limit follows the
# work: it fails only when the count has not grown for STALL_LIMIT seconds
# (default 60, times Q_TEST_TIME_SCALE), however long the whole takes on a
# loaded machine; progress is printed every 20 s.
wait_lines() {
  local file=$1 want=$2 what=$3 n last=-1 since=$SECONDS said=$SECONDS
  local limit=$(( ${STALL_LIMIT:-60} * ${Q_TEST_TIME_SCALE:-1} ))
  while :; do
    n=$(wc -l <"$file" 2>/dev/null || echo 0)
    ((n >= want)) && return 0
    if ((n != last)); then last=$n since=$SECONDS; fi
    if ((SECONDS - since > limit)); then
      fail "$what: stuck at $n of $want for ${limit}s"
      return 1
    fi
    if ((SECONDS - said >= 20)); then
      said=$SECONDS
      echo "$TEST_NAME: $what: $n of $want" >&2
    fi
    sleep 0.05
  done
}

long_or_short() { if [[ $MODE == long ]]; then echo "$1"; else echo "$2"; fi; }
us() { echo "${EPOCHREALTIME/./}"; }

# JSON string from arbitrary text (control characters dropped).
json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=$(tr -d '\000-\010\013-\037' <<<"$s")
  printf '"%s"' "$s"
}

# The lines of a file (each already a JSON value) as a JSON array.
json_lines_array() {
  local -a lines=()
  [[ -s $1 ]] && mapfile -t lines <"$1"
  local IFS=,
  printf '[%s]' "${lines[*]}"
}

# qrun ARGS...: q in the background, so the killer can find it among our children.
# Standard input comes from $QIN when set (a file), else /dev/null.
qrun() {
  QO=$T/out.$BASHPID
  QE=$T/err.$BASHPID
  T0=${EPOCHREALTIME/./}
  # QPRELOAD: an LD_PRELOAD for q alone (libfaketime in the clock scenario).
  if [[ -n ${QIN:-} ]]; then
    LD_PRELOAD=${QPRELOAD:-${LD_PRELOAD:-}} "$Q" "$@" <"$QIN" >"$QO" 2>"$QE" &
  else
    LD_PRELOAD=${QPRELOAD:-${LD_PRELOAD:-}} "$Q" "$@" </dev/null >"$QO" 2>"$QE" &
  fi
  QPID=$!
  wait "$QPID" 2>/dev/null
  RC=$?
  T1=${EPOCHREALTIME/./}
}

# qlog FILE OP EXTRA: one record for the last qrun (EXTRA: more ,"k":v fields).
qlog() {
  local file=$1 op=$2 extra=${3:-}
  local err=""
  if ((RC != 0)) && [[ -s $QE ]]; then err=",\"err\":$(json_str "$(head -c 400 "$QE")")"; fi
  printf '{"op":"%s","q":"%s","pid":%s,"t0":%s,"t1":%s,"rc":%s%s%s}\n' \
    "$op" "$QUEUE" "$QPID" "$T0" "$T1" "$RC" "$extra" "$err" >>"$file"
}

# ---- the load ------------------------------------------------------------------------
# Tunables (a scenario sets them before start_load):
VT_CHOICES=(${VT_CHOICES:-1s})   # visibility timeouts of receives (one at random)
BATCH_MAX=${BATCH_MAX:-3}    # receive -n 1..BATCH_MAX
ABANDON_PCT=${ABANDON_PCT:-5}    # consumer "crashes": drops the delivery without an ack
NACK_PCT=${NACK_PCT:-5}          # releases it (nack --delay 0..300ms)
EXTEND_PCT=${EXTEND_PCT:-5}      # extends the lease, then acks
SLOW_PCT=${SLOW_PCT:-5}          # works about one lease long (straddles the timeout), then acks
SLOW_MS=${SLOW_MS:-1000}         # ... for SLOW_MS/2 .. SLOW_MS*3/2
SEND_BATCH_PCT=${SEND_BATCH_PCT:-10}  # producers send 5 bodies with --lines
RECEIVE_WAIT=${RECEIVE_WAIT:-100ms}
WORK_J=${WORK_J:-2}
STOP=$T/stop

PRODUCER_PAUSE_MS=${PRODUCER_PAUSE_MS:-0}   # between sends
producer() {
  local p=$1 i=0 log=$L/producer.$1.jsonl bodies k
  seed_random $((1000 + p))
  while [[ ! -e $STOP ]]; do
    ((PRODUCER_PAUSE_MS > 0)) && sleep_ms $((RANDOM % (2 * PRODUCER_PAUSE_MS + 1)))
    i=$((i + 1))
    if ((RANDOM % 100 < SEND_BATCH_PCT)); then
      bodies=()
      for ((k = 0; k < 5; k++)); do bodies+=("p$p-$i-$k"); done
      printf '%s\n' "${bodies[@]}" >"$T/in.$BASHPID"
      QIN=$T/in.$BASHPID qrun send "$QUEUE" --lines --json
    else
      bodies=("p$p-$i")
      qrun send "$QUEUE" "p$p-$i" --json
    fi
    local b
    b=$(printf '"%s",' "${bodies[@]}")
    if ((RC == 0)); then
      qlog "$log" send ",\"bodies\":[${b%,}],\"out\":$(json_lines_array "$QO")"
    else
      qlog "$log" send ",\"bodies\":[${b%,}]"
    fi
  done
}

# ack_receipts LOG RECEIPT...: one q ack for all; stale ones are named on stderr.
ack_receipts() {
  local log=$1
  shift
  printf '%s\n' "$@" >"$T/in.$BASHPID"
  QIN=$T/in.$BASHPID qrun ack "$QUEUE"
  local stale=() line
  if ((RC == 3)); then
    while IFS= read -r line; do
      [[ $line =~ receipt\ (m[0-9a-f]+\.[0-9a-f]{16}):\ stale ]] && stale+=("\"${BASH_REMATCH[1]}\"")
    done <"$QE"
  fi
  local r s
  r=$(printf '"%s",' "$@")
  s=$(IFS=,; echo "${stale[*]}")
  qlog "$log" ack ",\"receipts\":[${r%,}],\"stale\":[$s]"
}

sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

consumer() {
  local c=$1 log=$L/consumer.$1.jsonl line receipts n vt roll r
  seed_random $((2000 + c))
  while [[ ! -e $STOP ]]; do
    n=$((1 + RANDOM % BATCH_MAX))
    vt=${VT_CHOICES[RANDOM % ${#VT_CHOICES[@]}]}
    qrun receive "$QUEUE" -n "$n" --json --visibility-timeout "$vt" --wait "$RECEIVE_WAIT"
    if ((RC != 0)); then
      qlog "$log" receive ",\"n\":$n"
      continue
    fi
    qlog "$log" receive ",\"out\":$(json_lines_array "$QO")"
    receipts=()
    while IFS= read -r line; do
      [[ $line =~ \"receipt\":\"([^\"]+)\" ]] && receipts+=("${BASH_REMATCH[1]}")
    done <"$QO"
    ((${#receipts[@]})) || continue
    roll=$((RANDOM % 100))
    if ((roll < ABANDON_PCT)); then
      for r in "${receipts[@]}"; do
        printf '{"op":"abandon","receipt":"%s","t0":%s}\n' "$r" "$(us)" >>"$log"
      done
    elif ((roll < ABANDON_PCT + NACK_PCT)); then
      for r in "${receipts[@]}"; do
        qrun nack "$QUEUE" "$r" --delay "$((RANDOM % 300))ms" --json
        qlog "$log" nack ",\"receipt\":\"$r\""
      done
    elif ((roll < ABANDON_PCT + NACK_PCT + EXTEND_PCT)); then
      for r in "${receipts[@]}"; do
        qrun extend "$QUEUE" "$r" --by "${VT_CHOICES[RANDOM % ${#VT_CHOICES[@]}]}" --json
        if ((RC == 0)); then
          qlog "$log" extend ",\"receipt\":\"$r\",\"out\":$(<"$QO")"
        else
          qlog "$log" extend ",\"receipt\":\"$r\""
        fi
      done
      sleep_ms $((RANDOM % 200))
      ack_receipts "$log" "${receipts[@]}"
    elif ((roll < ABANDON_PCT + NACK_PCT + EXTEND_PCT + SLOW_PCT)); then
      sleep_ms $((SLOW_MS / 2 + RANDOM % (SLOW_MS + 1)))
      ack_receipts "$log" "${receipts[@]}"
    else
      ack_receipts "$log" "${receipts[@]}"
    fi
  done
}

# q work with the logging handler, restarted whenever it dies (the killer).
work_loop() {
  local w=$1 pid
  while [[ ! -e $STOP ]]; do
    # WORK_LOCK_TIMEOUT, WORK_VT: q work's own --lock-timeout and lease;
    # WORK_QUIET="": its notes too go to work.N.err (storm.sh).
    HANDLER_STAGE=${WORK_TO:-} HANDLER_LOG=$L/work.$w.jsonl "$Q" ${WORK_LOCK_TIMEOUT:+--lock-timeout "$WORK_LOCK_TIMEOUT"} \
      work "$QUEUE" -j "$WORK_J" ${WORK_QUIET--q} ${WORK_TO:+--to "$WORK_TO"} \
      --visibility-timeout "${WORK_VT:-${VT_CHOICES[0]}}" --backoff-base 100ms --backoff-cap 500ms \
      --grace 5s -- "$TORTURE_DIR/handler.sh" </dev/null >/dev/null 2>>"$L/work.$w.err" &
    pid=$!
    echo "$pid" >"$T/workpid.$w"
    # Stop it gracefully (SIGTERM) once the load stops.
    while kill -0 "$pid" 2>/dev/null; do
      if [[ -e $STOP ]]; then
        kill -TERM "$pid" 2>/dev/null
        break
      fi
      sleep 0.1
    done
    wait "$pid" 2>/dev/null
    local rc=$?
    # 0, 4 (a handler failed), or killed: anything else is an error.
    if ((rc != 0 && rc != 4 && rc < 128)); then
      printf '{"op":"work_exit","pid":%s,"rc":%s,"t0":%s}\n' "$pid" "$rc" "$(us)" >>"$L/work.$w.jsonl"
      echo "q work exited $rc" >>"$T/work_errors"
    fi
  done
}

LOAD_PIDS=()
start_load() {
  local producers=$1 consumers=$2 workers=${3:-0} i
  rm -f "$STOP"
  for ((i = 1; i <= producers; i++)); do producer "$i" & LOAD_PIDS+=($!); done
  for ((i = 1; i <= consumers; i++)); do consumer "$i" & LOAD_PIDS+=($!); done
  for ((i = 1; i <= workers; i++)); do work_loop "$i" 2>/dev/null & LOAD_PIDS+=($!); done
}

stop_load() {
  touch "$STOP"
  local pid
  for pid in "${LOAD_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  LOAD_PIDS=()
  [[ -s $T/work_errors ]] && fail "q work exited with unexpected codes: $(sort "$T/work_errors" | uniq -c | xargs)"
  return 0
}

# The children of the load's loops that run q (and q work's commands), read
# from /proc without forking (short-lived q processes come and go fast).
_victims() {
  VICTIMS=()
  local loop pid comm kids=() grandkids=()
  for loop in "${LOAD_PIDS[@]}"; do
    # (read fails at the end of these files, which have no newline)
    kids=()
    read -r -a kids 2>/dev/null <"/proc/$loop/task/$loop/children"
    for pid in "${kids[@]}"; do
      # comm, not exe: stat of /proc/PID/exe of a starting q can stall for
      # tens of ms on the lock of its 1 TiB map.
      comm=""
      read -r comm 2>/dev/null <"/proc/$pid/comm"
      [[ $comm == q ]] || continue
      VICTIMS+=("$pid")
      grandkids=()
      read -r -a grandkids 2>/dev/null <"/proc/$pid/task/$pid/children"
      VICTIMS+=("${grandkids[@]}")
    done
  done
}

# killer SECONDS MIN_MS MAX_MS: every MIN..MAX ms, SIGKILL a random q process
# (or q work's command) among the load's children, for SECONDS. Only processes
# this test started, by pid. When none runs at that moment, it looks again
# every few ms (up to 100 ms).
killer() {
  local seconds=$1 min=$2 max=$3 log=$L/killer.jsonl
  local end=$((SECONDS + seconds)) pid what tries t
  seed_random 3000
  while ((SECONDS < end)); do
    sleep_ms $((min + RANDOM % (max - min + 1)))
    for ((tries = 0; tries < 50; tries++)); do
      _victims
      if ((${#VICTIMS[@]} == 0)); then sleep 0.001; continue; fi
      pid=${VICTIMS[RANDOM % ${#VICTIMS[@]}]}
      local args=()
      mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || continue
      what="${args[*]:0:8}"
      [[ -n $what ]] || continue
      # The time just before the signal: the checker excuses only what
      # happened after it, so it must not be late (no fork in between).
      t=${EPOCHREALTIME/./}
      if kill -KILL "$pid" 2>/dev/null; then
        printf '{"op":"kill","pid":%s,"t0":%s,"what":%s}\n' "$pid" "$t" "$(json_str "$what")" >>"$log"
        break
      fi
    done
  done
}

# drain [EMPTY_ROUNDS] [WAIT]: receive everything left and ack it; stop after
# EMPTY_ROUNDS empty receives in a row, each waiting WAIT (longer than any lease
# or delay, so what is in flight or delayed comes back in time).
drain() {
  local rounds=${1:-3} wait=${2:-2s} empty=0 log=$L/drain.jsonl line receipts
  while ((empty < rounds)); do
    qrun receive "$QUEUE" -n 100 --json --visibility-timeout 10m --wait "$wait"
    if ((RC == 1)); then
      qlog "$log" receive
      empty=$((empty + 1))
      continue
    fi
    if ((RC != 0)); then
      qlog "$log" receive
      fail "drain: q receive exited $RC: $(head -c 300 "$QE")"
      return 1
    fi
    empty=0
    qlog "$log" receive ",\"out\":$(json_lines_array "$QO")"
    receipts=()
    while IFS= read -r line; do
      [[ $line =~ \"receipt\":\"([^\"]+)\" ]] && receipts+=("${BASH_REMATCH[1]}")
    done <"$QO"
    ack_receipts "$log" "${receipts[@]}"
  done
  qrun dlq list "$QUEUE" --json -n 1000000
  ((RC == 0)) || fail "drain: q dlq list exited $RC: $(head -c 300 "$QE")"
  printf '{"op":"dlq","q":"%s","out":%s}\n' "$QUEUE" "$(json_lines_array "$QO")" >>"$log"
  qrun stats "$QUEUE" --json
  ((RC == 0)) || fail "drain: q stats exited $RC: $(head -c 300 "$QE")"
  printf '{"op":"final_stats","q":"%s","out":%s}\n' "$QUEUE" "$(<"$QO")" >>"$log"
  # q work --to (WORK_TO): what reached the stage's queue, for the checker's rule 7.
  if [[ -n ${WORK_TO:-} ]]; then
    qrun peek "$WORK_TO" --json --max 1000000
    ((RC == 0)) || fail "drain: q peek $WORK_TO exited $RC: $(head -c 300 "$QE")"
    printf '{"op":"stage_out","q":"%s","out":%s}\n' "$WORK_TO" "$(json_lines_array "$QO")" >>"$log"
  fi
}

# check [CHECKER ARGS]: the checker's verdict; its summary line is kept in $T/summary.json.
check() {
  if python3 "$TORTURE_DIR/checker.py" "$L" --json "$T/summary.json" "$@"; then
    return 0
  fi
  fail "the checker found violations (see above)"
  return 1
}

# ---- controls -------------------------------------------------------------------------
# A control run breaks the promise on purpose; its script exits 0 only when the
# checker FAILED, and for that reason.

# control_checker FAULT: run the checker on a control run's logs (its report is
# printed and kept in $T/checker.out). Returns 0 when the checker failed and
# judged the logs (exit 1 and a summary), with its violations, as compact JSON
# ({"kind":count,...}), in $VIOLATIONS; otherwise records the failure, returns 1.
control_checker() {
  local fault=$1 crc
  python3 "$TORTURE_DIR/checker.py" "$L" --json "$T/summary.json" >"$T/checker.out" 2>&1
  crc=$?
  cat "$T/checker.out"
  if ((crc == 0)); then
    fail "control ($fault): the checker passed a run whose promise was broken on purpose"
    return 1
  elif ((crc != 1)) || [[ ! -s $T/summary.json ]]; then
    fail "control ($fault): the checker could not judge the logs (exit $crc)"
    return 1
  fi
  VIOLATIONS=$(jq -c .violations "$T/summary.json")
}

# plant_rogue_clock: the rogue-clock fault, planted for certain. Call it on the
# new, empty queue before the load starts. The holder sends a marker and
# receives it with a 10-minute lease; the rogue (the dynamically linked q under
# libfaketime, its clock an hour ahead) sees that lease as over and receives the
# marker again (receive count 2) at once, and acks it; the holder's ack then
# comes back stale (which explains the duplicate, so the overlap is the only
# violation). Each step is logged like the load ($L/holder.jsonl,
# $L/rogue.jsonl). Sets MARKER_ID and ROGUE_PID (for expect_planted_overlap).
# (A rogue consumer running among the load instead overlaps a live lease only by
# chance: the ready index is ordered by visible time, so the leases its clock
# sees as over sit behind the backlog of ready messages, which it takes first;
# and a message it drops stays leased for an hour, which the checker reports as
# lost or not drained, not as an overlap.)
plant_rogue_clock() {
  local hlog=$L/holder.jsonl rlog=$L/rogue.jsonl holder_receipt rogue_receipt faketime_lib
  faketime_lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
  [[ -n $faketime_lib ]] || die "rogue-clock needs libfaketime (Debian: libfaketime)"
  use_dynamic_q   # libfaketime needs a dynamic q

  qrun send "$QUEUE" rogue-marker --json
  ((RC == 0)) || die "rogue-clock: the marker's send exited $RC: $(head -c 300 "$QE")"
  qlog "$hlog" send ',"bodies":["rogue-marker"],"out":'"$(json_lines_array "$QO")"
  MARKER_ID=$(jq -r .id "$QO")

  qrun receive "$QUEUE" -n 1 --json --visibility-timeout 10m
  ((RC == 0)) || die "rogue-clock: the holder's receive exited $RC: $(head -c 300 "$QE")"
  qlog "$hlog" receive ",\"out\":$(json_lines_array "$QO")"
  [[ $(jq -r '"\(.id) \(.receive_count)"' "$QO") == "$MARKER_ID 1" ]] ||
    die "rogue-clock: the holder did not receive the marker $MARKER_ID first: $(<"$QO")"
  holder_receipt=$(jq -r .receipt "$QO")

  FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1 QPRELOAD=$faketime_lib Q=$QD \
    qrun receive "$QUEUE" -n 1 --json --visibility-timeout 1s
  ((RC == 0)) || die "rogue-clock: the rogue's receive exited $RC (the clock fault did not take): $(head -c 300 "$QE")"
  qlog "$rlog" receive ",\"out\":$(json_lines_array "$QO")"
  [[ $(jq -r '"\(.id) \(.receive_count)"' "$QO") == "$MARKER_ID 2" ]] ||
    die "rogue-clock: the rogue did not receive the marker $MARKER_ID again: $(<"$QO")"
  ROGUE_PID=$QPID
  rogue_receipt=$(jq -r .receipt "$QO")

  FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1 QPRELOAD=$faketime_lib Q=$QD \
    ack_receipts "$rlog" "$rogue_receipt"
  ((RC == 0)) || die "rogue-clock: the rogue's ack exited $RC: $(head -c 300 "$QE")"
  ack_receipts "$hlog" "$holder_receipt"
  ((RC == 3)) || die "rogue-clock: the holder's ack exited $RC, not 3 (stale): $(head -c 300 "$QE")"
}

# expect_planted_overlap: after plant_rogue_clock, the load, the drain and
# control_checker: the checker must report exactly the planted overlap, the
# marker's second delivery (the rogue's, over in real time long before the
# holder's lease ended), and nothing incidental.
expect_planted_overlap() {
  local overlap="    $MARKER_ID: delivery 2 (receive, pid $ROGUE_PID) was over at "
  if [[ $VIOLATIONS != '{"lease-overlap":1}' ]]; then
    fail "control (rogue-clock): the checker must report exactly one lease-overlap (the marker $MARKER_ID), found: $VIOLATIONS"
  elif ! grep -qF -- "$overlap" "$T/checker.out"; then
    fail "control (rogue-clock): the checker's lease-overlap is not the planted one (marker $MARKER_ID, rogue pid $ROGUE_PID)"
  else
    echo "$TEST_NAME control (rogue-clock): the checker caught it (lease-overlap of $MARKER_ID), as it must"
  fi
}

# summary_field KEY: a number from the checker's summary.
summary_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$T/summary.json" "$1"; }

# No process in the reader table of the file is dead (readers are cleared on
# every open, so after the drain none of the killed ones may be left).
check_reader_table() {
  local file=${1:-$Q_FILE} out pid dead=()
  # (mdb_stat exits 1 even when it lists the table.)
  out=$(mdb_stat -n -r "$file" 2>&1)
  [[ $out == *"Reader Table Status"* ]] || { fail "mdb_stat -r $file failed: $out"; return 1; }
  while read -r pid _; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    kill -0 "$pid" 2>/dev/null || dead+=("$pid")
  done <<<"$out"
  ((${#dead[@]} == 0)) || fail "the reader table holds dead processes: ${dead[*]}"$'\n'"$out"
}
