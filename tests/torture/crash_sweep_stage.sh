#!/usr/bin/env bash
# The crash sweep of a `q work --to` stage (issue 14): one round of
#   q work t --to o --to-lines -n 1 -- sh -c 'cat; echo; echo second'
# is killed at its Nth system call of a kind (strace -e inject=...:signal=KILL),
# for N = 1, 2, ... until the round completes. strace counts calls per process,
# so in practice q work reaches call N before its handler does and the kills
# land in q work; a handler killed instead is a failed run (exit 4), accepted. A round goes through states a plain before/after comparison cannot
# describe (the source leased, the handler killed and the source released), so
# the rule checked after every kill is the stage's guarantee itself:
#   - either the source message is still in its queue (any state) or dead, it
#     was not acked, and the destination holds nothing;
#   - or the source was acked (once) and the destination holds both output
#     lines, once each, in order;
# never an output without the ack, an ack without the output, or half the
# output. The file must then pass file_ok (LMDB walks every page; q writes).
#
#   crash_sweep_stage.sh Q
source "$(dirname "$0")/lib.sh" "$@"
source "$TORTURE_DIR/state.sh"
command -v strace >/dev/null || die "strace is required (Debian: strace)"
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

SYSCALLS=(openat write pwrite64 writev fdatasync fsync flock utimensat ftruncate renameat2)
POINT_LIMIT=$((${POINT_LIMIT:-60} * ${Q_TEST_TIME_SCALE:-1}))

BASE=$T/base.q
make_base "$BASE"
"$Q" -f "$BASE" create o >/dev/null || die "create o"
# make_base leaves a in flight and b, c, d visible in t: the round takes b.
SOURCE_BODY=b
acked_base=$("$Q" -f "$BASE" stats t --json | jq .acked)

W=$T/work.q
RUN=("$Q" -f "$W" work t --to o --to-lines -n 1 -- sh -c 'cat; echo; echo second')

# stage_state FILE: "none" (source kept, not acked, no output), "done" (source
# acked once, both outputs once, in order), or what is wrong.
stage_state() {
  local f=$1 outputs source_live source_dead acked
  outputs=$("$Q" -f "$f" peek o -n 100 --json | jq -r .body | paste -sd, -)
  source_live=$("$Q" -f "$f" peek t -n 100 --json | jq -r --arg b "$SOURCE_BODY" 'select(.body == $b) | .id' | wc -l)
  source_dead=$("$Q" -f "$f" dlq list t -n 100 --json | jq -r --arg b "$SOURCE_BODY" 'select(.body == $b) | .id' | wc -l)
  acked=$("$Q" -f "$f" stats t --json | jq .acked)
  if [[ -z $outputs ]] && ((source_live + source_dead == 1 && acked == acked_base)); then
    echo none
  elif [[ $outputs == "$SOURCE_BODY,second" ]] && ((source_live + source_dead == 0 && acked == acked_base + 1)); then
    echo done
  else
    echo "outputs [$outputs], source live $source_live, dead $source_dead, acked $acked (before $acked_base)"
  fi
}

cp "$BASE" "$W"
"${RUN[@]}" >/dev/null 2>"$T/err" || die "the round without faults failed: $(<"$T/err")"
[[ $(stage_state "$W") == done ]] || die "the round without faults left: $(stage_state "$W")"

points=0
kills=0
handler_kills=0
declare -A seen
started=$SECONDS
for sys in "${SYSCALLS[@]}"; do
  for ((n = 1; n <= 500; n++)); do
    rm -f "$W" "$W-lock"
    cp "$BASE" "$W"
    run_start=$(now_ms)
    rc=$( { timeout -k 5 "$POINT_LIMIT" strace -f -qq -o /dev/null -e trace="$sys" \
              -e inject="$sys":signal=KILL:when=$n \
              "${RUN[@]}" </dev/null >/dev/null 2>"$T/err"; } 2>/dev/null; echo $?)
    run_ms=$(($(now_ms) - run_start))
    points=$((points + 1))
    if ((rc == 124 || rc == 128 + 9 && run_ms >= POINT_LIMIT * 1000)); then
      fail "at $sys call #$n: still running after ${POINT_LIMIT}s (a hang at this crash point)"
      break
    fi
    state=$(stage_state "$W")
    seen[$state]=1
    case $rc in
      0)  # the Nth call never came (or was the handler's and spared q): done
        [[ $state == done ]] || fail "completed under strace at $sys #$n, but: $state"
        break ;;
      137) kills=$((kills + 1)) ;;
      4) handler_kills=$((handler_kills + 1)) ;;  # the handler was killed: a failed run
      *) fail "killed at $sys #$n: exit $rc, neither a kill nor a failed run: $(head -c 300 "$T/err")" ;;
    esac
    if [[ $state != none && $state != done ]]; then
      fail "killed at $sys #$n (exit $rc): $state"
      cp "$W" "$T/failed-$sys-$n.q" 2>/dev/null
      continue
    fi
    problem=$(file_ok "$W") || fail "killed at $sys #$n: the file is damaged: $problem"
  done
done
# The sweep must have seen both sides, or it checked nothing.
[[ -n ${seen[none]:-} ]] || fail "no crash point left the source unacked: the sweep is blind"
[[ -n ${seen[done]:-} ]] || fail "no crash point left the round done"
echo "crash_sweep_stage: $points crash points in $((SECONDS - started)) s ($kills kills of q work, $handler_kills of its handler)"
