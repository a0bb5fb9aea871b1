#!/usr/bin/env bash
# Scenario 3, I/O errors and a full disk.
#
# A. Injected errors: EIO and ENOSPC at each write and sync call of a command in
#    turn (strace -e inject=SYSCALL:error=E:when=N, N = 1, 2, ... until the
#    command completes). Each failed command must exit 74 with a message that
#    names the problem ("disk full" for ENOSPC, "I/O error" for EIO), print
#    nothing on stdout (no id, no success), and leave the file exactly as before
#    (a failed command changed nothing); a command that succeeds leaves it as
#    after. Either way LMDB can walk the file and q works with it again.
# B. A real full disk: a 4 MiB tmpfs in a private mount namespace (unshare -m),
#    filled by producers until q refuses with exit 74 "disk full"; after space
#    is freed the queue works again and every message whose send exited 0 is
#    received. The same with a file size limit (ulimit -f), which q must report
#    as an error, not die of SIGXFSZ, and name (as the disk full case).
#
#   io_errors.sh Q [inject|tmpfs|ulimit]     (default: all three)
#   io_errors.sh Q --fault split
# --fault split is the control of part A: the command is two `q send`s in a
# row, so an error in the second leaves the first one's change behind: the
# checks must report "failed but changed the file"; the script then exits 0
# only when they did.
part=${2:-all}
fault=""
if [[ $part == --fault ]]; then fault=$3; part=inject; fi
set -- "$1"
source "$(dirname "$0")/lib.sh" "$@"
source "$TORTURE_DIR/state.sh"
command -v strace >/dev/null || die "strace is required (Debian: strace)"
# LeakSanitizer (in a sanitizer build) cannot stop the world under strace.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# ---- A. injected errors ---------------------------------------------------------------
if [[ $part == all || $part == inject ]]; then
SYSCALLS=(pwrite64 writev fdatasync fsync ftruncate)
read -r -a COMMANDS <<<"${IO_COMMANDS:-send send-lines receive ack nack create}"
[[ $fault == split ]] && COMMANDS=(send-twice)
# Time limit per injection point (not for the whole sweep), seconds.
POINT_LIMIT=$(( ${POINT_LIMIT:-60} * ${Q_TEST_TIME_SCALE:-1} ))
BASE=$T/base.q
make_base "$BASE"
before=$(dump "$BASE")

q_cmd() {
  local name=$1 f=$2
  PRE=()
  if [[ $name == send-twice ]]; then
    # A first send that always works, then the one the errors hit.
    PRE=(-f "$f" send t one -q)
    name=send
  fi
  sweep_command "$name" "$f" || die "unknown command $name"
  RUN=("$Q" "${ARGS[@]}")
}
run_pre() { ((${#PRE[@]} == 0)) || "$Q" "${PRE[@]}" </dev/null >/dev/null || die "${PRE[*]} failed"; }

points=0
failures=0
for name in "${COMMANDS[@]}"; do
  W=$T/work.q
  rm -f "$W" "$W-lock"; cp "$BASE" "$W"
  q_cmd "$name" "$W"
  ref_start=$(now_ms)
  run_pre
  "${RUN[@]}" <"$T/stdin" >/dev/null 2>&1 || die "$name without faults failed"
  ref_ms=$(($(now_ms) - ref_start))
  after=$(dump "$W")
  cmd_started=$SECONDS n_cmd=0
  for err in ENOSPC EIO; do
    for sys in "${SYSCALLS[@]}"; do
      for ((n = 1; n <= 500; n++)); do
        rm -f "$W" "$W-lock"; cp "$BASE" "$W"
        q_cmd "$name" "$W"
        run_start=$(now_ms)
        run_pre
        timeout -k 5 "$POINT_LIMIT" strace -f -qq -o /dev/null -e trace="$sys" \
          -e inject="$sys":error=$err:when=$n "${RUN[@]}" <"$T/stdin" >"$T/out" 2>"$T/err"
        rc=$?
        run_ms=$(($(now_ms) - run_start))
        points=$((points + 1)) n_cmd=$((n_cmd + 1))
        if ((rc == 124)); then
          fail "$name with $err at $sys call #$n: still running after ${POINT_LIMIT}s (a hang)"
          break
        fi
        state=$(dump "$W")
        where="$name with $err at $sys call #$n"
        if ((rc == 0)); then
          same_state "$after" "$state" $((run_start - ref_start)) $((run_ms + ref_ms + 100)) ||
            fail "$where: exit 0 but the file is not as after"
          break
        fi
        failures=$((failures + 1))
        [[ $rc == 74 ]] || fail "$where: exit $rc, expected 74: $(head -c 300 "$T/err")"
        [[ -s $T/out ]] && fail "$where: failed (exit $rc) but printed on stdout: $(head -c 200 "$T/out")"
        if [[ $err == ENOSPC ]]; then
          grep -q "disk full" "$T/err" || fail "$where: the message does not say the disk is full: $(head -c 300 "$T/err")"
        else
          grep -q "I/O error" "$T/err" || fail "$where: the message does not say I/O error: $(head -c 300 "$T/err")"
        fi
        if [[ $state != "$before" ]]; then
          fail "$where: the command failed (exit $rc) but changed the file"
          diff <(echo "$before") <(echo "$state") | head -n 6 | sed 's/^/      /' >&2
        fi
        problem=$(file_ok "$W") || fail "$where: the queue does not work afterwards: $problem"
      done
    done
  done
  echo "io_errors: $name: $n_cmd injection points in $((SECONDS - cmd_started)) s"
done
echo "io_errors: $points injection points, $failures failed commands checked"
if [[ $fault == split ]]; then
  if grep -q "changed the file" "$_FAILS"; then
    : >"$_FAILS"
    echo "io_errors control: a failed command that changed the file was caught, as it must"
  else
    fail "control: a command that failed half-way was not caught"
  fi
  exit 0
fi
fi

# ---- B. a real full disk -----------------------------------------------------------------
# fill_and_recover DIR: producers fill DIR until q refuses; free space; check.
fill_and_recover() {
  local dir=$1 how=$2 f=$1/full.q i rc sent=0 refused=0 line
  export Q_FILE=$f
  "$Q" create full --max-size 100000 || { fail "$how: cannot create the queue"; return; }
  # A filler file to delete later, so space can be freed without touching q's file.
  [[ $how == tmpfs ]] && head -c $((1024 * 1024)) /dev/zero >"$dir/filler"
  body=$(head -c 20000 /dev/zero | tr '\0' b)
  : >"$T/sent.$how"
  for ((i = 1; i <= 2000; i++)); do
    "$Q" send full "$i-$body" >"$T/out" 2>"$T/err"
    rc=$?
    if ((rc == 0)); then
      [[ -s $T/out ]] || fail "$how: send exited 0 but printed no id"
      echo "$i" >>"$T/sent.$how"
      sent=$((sent + 1))
      continue
    fi
    refused=$((refused + 1))
    [[ $rc == 74 ]] || fail "$how: send on a full disk exited $rc, expected 74: $(<"$T/err")"
    grep -q "disk full" "$T/err" || fail "$how: the message does not say the disk is full: $(<"$T/err")"
    [[ -s $T/out ]] && fail "$how: a refused send printed: $(<"$T/out")"
    # A few more tries while full: each must fail the same way, and reads still work.
    ((refused >= 3)) && break
  done
  ((refused > 0)) || { fail "$how: the disk never filled up ($sent sends)"; return; }
  assert_exit 0 "$Q" stats full
  # Receiving and acking needs a little space too: free some first.
  if [[ $how == tmpfs ]]; then rm -f "$dir/filler"; else ulimit -S -f unlimited || fail "cannot lift ulimit -f"; fi
  assert_exit 0 "$Q" send full "after-space-freed" || return
  echo "after-space-freed" >>"$T/sent.$how"
  # Every message that was acknowledged as sent is there.
  : >"$T/got.$how"
  while :; do
    "$Q" receive full -n 50 --json --visibility-timeout 10m >"$T/out" 2>"$T/err"
    rc=$?
    ((rc == 1)) && break
    if ((rc != 0)); then
      fail "$how: receive after the disk was freed exited $rc: $(<"$T/err")"
      break
    fi
    jq -r '.body | split("-")[0]' "$T/out" >>"$T/got.$how"
    jq -r .receipt "$T/out" | "$Q" ack full || { fail "$how: ack failed after the disk was freed"; break; }
  done
  local missing
  missing=$(comm -23 <(sed 's/^after-space-freed$/after/' "$T/sent.$how" | sort) \
                      <(sed 's/^after-space-freed$/after/' "$T/got.$how" | sort))
  [[ -z $missing ]] || fail "$how: messages sent (exit 0) and lost: $(head -n 5 <<<"$missing" | xargs)"
  echo "io_errors ($how): $sent sends stored before the disk filled, then $refused refused;" \
       "after freeing space: $(grep -c . "$T/got.$how") received"
}

if [[ $part != all && $part != tmpfs ]]; then
  :
elif unshare -m --propagation private true 2>/dev/null; then
  # The test re-runs its part B inside a private mount namespace with a 4 MiB tmpfs.
  mkdir -p "$T/tiny"
  export -f fill_and_recover fail assert_exit run _last_run
  export Q T _FAILS TEST_NAME
  unshare -m --propagation private bash -c '
    mount -t tmpfs -o size=4m tmpfs "$T/tiny" || { echo "mount failed" >>"$_FAILS"; exit 1; }
    fill_and_recover "$T/tiny" tmpfs
    umount "$T/tiny"'
else
  skip_part "unshare -m is not permitted here (needs root or user namespaces): the tmpfs (real full disk) part did not run"
fi

[[ $part == all || $part == ulimit ]] || exit 0
mkdir -p "$T/ulimit"
(
  ulimit -S -f 2048   # 1 MiB in 512-byte blocks (soft: lifted again once "full")
  fill_and_recover "$T/ulimit" ulimit
)
