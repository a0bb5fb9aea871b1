#!/usr/bin/env bash
# Scenario 2, the crash sweep: kill one q command at its Nth system call of a
# kind (strace -e inject=SYSCALL:signal=KILL:when=N), for N = 1, 2, ... until
# the command completes, for the open, write, sync (and lock) calls. After each
# kill the file must hold exactly the state before the command or the state
# after it (never one in between), LMDB must be able to walk every page, and q
# must be able to write to it again.
#
#   crash_sweep.sh Q [--fault split]
# --fault split is the control: the commands swept are deliberately non-atomic
# pairs, two `q send`s, and two `q extend`s of one lease (--by 2h, then --by 3h:
# only the lease end differs, so the dump must show lease times), run one after
# the other; a kill between them leaves a state in between, which the sweep
# must report as "neither as before nor as after" for each pair, and nothing
# else; the script then exits 0 only when it did.
#   crash_sweep.sh Q --commands "create-fresh ..."   only these commands
#
# Time limits follow the work: each crash point may take POINT_LIMIT seconds
# (default 60, times Q_TEST_TIME_SCALE); a command that hangs at a crash point
# is reported as such. Progress (points per command, seconds) is printed as it
# goes, so a slow run on a loaded machine is visibly moving.
fault=""
commands=""
if [[ ${2:-} == --fault ]]; then fault=$3; fi
if [[ ${2:-} == --commands ]]; then commands=$3; fi
set -- "$1"
source "$(dirname "$0")/lib.sh" "$@"
source "$TORTURE_DIR/state.sh"
command -v strace >/dev/null || die "strace is required (Debian: strace)"
# LeakSanitizer (in a sanitizer build) cannot stop the world under strace.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

SYSCALLS=(openat write pwrite64 writev fdatasync fsync flock utimensat ftruncate renameat2)
# SWEEP_COMMANDS selects commands (create-fresh runs as its own test: the
# first create of a file).
SWEEP_COMMANDS=${commands:-${SWEEP_COMMANDS:-}}
read -r -a COMMANDS <<<"${SWEEP_COMMANDS:-send send-lines receive ack nack extend create redrive purge delete dlq-purge config}"
if [[ $MODE == long && -z ${SWEEP_COMMANDS:-} ]]; then
  COMMANDS+=(send-big create-fresh)
fi
[[ $fault == split ]] && COMMANDS=(send-twice extend-twice)
POINT_LIMIT=$(( ${POINT_LIMIT:-60} * ${Q_TEST_TIME_SCALE:-1} ))

BASE=$T/base.q
make_base "$BASE"
BEFORE_BASE=$(dump "$BASE")

# q_cmd NAME FILE: the command under test: RUN=(q ARGS...) (stdin in $T/stdin).
q_cmd() {
  local name=$1 f=$2
  if [[ $name == send-twice ]]; then
    : >"$T/stdin"
    RUN=(bash -c '"$0" -f "$1" send t one -q && "$0" -f "$1" send t two -q' "$Q" "$f")
    return
  fi
  if [[ $name == extend-twice ]]; then
    : >"$T/stdin"
    RUN=(bash -c '"$0" -f "$1" extend t "$2" --by 2h && "$0" -f "$1" extend t "$2" --by 3h' \
      "$Q" "$f" "$(<"$T/receipt")")
    return
  fi
  sweep_command "$name" "$f" || die "unknown command $name"
  RUN=("$Q" "${ARGS[@]}")
}

# fresh_copy NAME FILE: the starting file of a run (none for create-fresh).
fresh_copy() {
  rm -f "$2" "$2-lock"
  [[ $1 == create-fresh ]] || cp "$BASE" "$2"
}

points=0
kills=0
declare -A per_command
for name in "${COMMANDS[@]}"; do
  W=$T/work.q
  # The states a run may leave: before, and after (from a run without faults).
  if [[ $name == create-fresh ]]; then
    before="NOFILE"
  else
    before=$BEFORE_BASE
  fi
  fresh_copy "$name" "$W"
  q_cmd "$name" "$W"
  ref_start=$(now_ms)
  "${RUN[@]}" <"$T/stdin" >/dev/null 2>"$T/err" || die "$name without faults failed: $(<"$T/err")"
  ref_ms=$(($(now_ms) - ref_start))
  after=$(dump "$W")
  [[ $after != "$before" ]] || die "$name changed nothing the dump shows?"
  n_cmd=0
  cmd_started=$SECONDS
  for sys in "${SYSCALLS[@]}"; do
    for ((n = 1; n <= 500; n++)); do
      fresh_copy "$name" "$W"
      q_cmd "$name" "$W"
      # ($(...) with stderr to /dev/null: bash's "Killed" notice stays out of the log)
      run_start=$(now_ms)
      rc=$( { timeout -k 5 "$POINT_LIMIT" strace -f -qq -o /dev/null -e trace="$sys" \
                -e inject="$sys":signal=KILL:when=$n \
                "${RUN[@]}" <"$T/stdin" >/dev/null 2>"$T/err"; } 2>/dev/null; echo $?)
      run_ms=$(($(now_ms) - run_start))
      points=$((points + 1))
      n_cmd=$((n_cmd + 1))
      # Times the command set may differ from the reference run's by when it ran.
      shift_ms=$((run_start - ref_start)) slack_ms=$((run_ms + ref_ms + 100))
      if ((rc == 124 || rc == 128 + 9 && run_ms >= POINT_LIMIT * 1000)); then
        fail "$name at $sys call #$n: still running after ${POINT_LIMIT}s (a hang at this crash point)"
        break
      fi
      if ((rc == 0)); then
        # Completed: the Nth call never came. The state is "after".
        state=$(dump "$W")
        same_state "$after" "$state" "$shift_ms" "$slack_ms" ||
          fail "$name completed under strace but the state differs"
        break
      fi
      if ((rc != 137)); then
        fail "$name killed at $sys #$n: exit $rc instead of a kill: $(head -c 300 "$T/err")"
        break
      fi
      kills=$((kills + 1))
      if [[ ! -e $W ]]; then
        state=NOFILE
      else
        state=$(dump "$W")
      fi
      if [[ $state != "$before" ]] && ! same_state "$after" "$state" "$shift_ms" "$slack_ms" 2>/dev/null; then
        echo "$name $sys $n" >>"$T/neither"
        fail "$name killed at $sys call #$n: the file is neither as before nor as after"
        diff <(echo "$before") <(echo "$state") | head -n 8 | sed 's/^/      before vs got: /' >&2
        diff <(echo "$after") <(echo "$state") | head -n 8 | sed 's/^/      after vs got:  /' >&2
        cp "$W" "$T/failed-$name-$sys-$n.q" 2>/dev/null
        continue
      fi
      if [[ -e $W ]]; then
        problem=$(file_ok "$W") || fail "$name killed at $sys call #$n: the file is damaged: $problem"
      fi
    done
  done
  per_command[$name]=$n_cmd
  echo "crash_sweep: $name: $n_cmd crash points in $((SECONDS - cmd_started)) s"
done

summary=""
for name in "${COMMANDS[@]}"; do summary+="$name=${per_command[$name]} "; done
if [[ $fault == split ]]; then
  # Each pair must be caught in between, and for that reason only.
  n_neither=0
  [[ -s $T/neither ]] && n_neither=$(wc -l <"$T/neither")
  other=$(($(wc -l <"$_FAILS") - n_neither))
  missed=()
  for name in "${COMMANDS[@]}"; do
    grep -q "^$name " "$T/neither" 2>/dev/null || missed+=("$name")
  done
  : >"$_FAILS"
  if ((${#missed[@]})); then
    fail "control: no state in between was reported for ${missed[*]}: the sweep (or the dump) is blind"
  elif ((other > 0)); then
    fail "control: $other failure(s) other than a state in between (see above)"
  else
    echo "crash_sweep control: $n_neither states in between reported ($(cut -d' ' -f1 "$T/neither" | sort | uniq -c | xargs)), as they must"
  fi
  exit 0
fi
echo "crash_sweep: $points crash points swept ($kills kills), per command: $summary"
