#!/usr/bin/env bash
# Scenario 4, power loss: producers and consumers run with the powerloss shim
# (LD_PRELOAD), which journals every write to the queue file and every point
# at which the writes became durable (fdatasync, O_DSYNC). At a random moment
# every process is killed (the power cut); powercut.py then rebuilds the file
# as the disk may have kept it: all durable writes, and a random subset of the
# 4 KiB pages written since. For each of many such files (different subsets):
# it opens fine, LMDB can walk it, every message whose `q send` exited 0 is in
# it (unless acked), and no message whose `q ack` exited 0 is.
#
#   power_loss.sh Q [--fault no-sync]
# The control runs the load with Q_NO_SYNC=1 (durability off): the rebuilt
# files must lose messages that were reported sent, and the check must fail.
fault=""
if [[ ${2:-} == --fault ]]; then fault=$3; set -- "$1"; fi
source "$(dirname "$0")/lib.sh" "$@"
SHIM=${TORTURE_SHIM_DIR:-}/libq_powerloss.so
[[ -f $SHIM ]] || die "the powerloss shim is not built: set TORTURE_SHIM_DIR (tests/torture/run does)"
# Every q of the load preloads the shim: the dynamic build of the same sources.
use_dynamic_q
Q=$QD

CUTS=$(long_or_short 200 25)
export Q_FILE=$T/pl.q
assert_exit 0 "$Q" create "$QUEUE" --visibility-timeout 2s --max-receives 0 || die "cannot create"
sync "$Q_FILE"
cp "$Q_FILE" "$T/base.q"

[[ $fault == no-sync ]] && export Q_NO_SYNC=1
export LD_PRELOAD=$SHIM Q_PL_TARGET=$Q_FILE Q_PL_JOURNAL=$T/journal
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
ABANDON_PCT=0 NACK_PCT=5 EXTEND_PCT=0 SLOW_PCT=0
start_load 4 2 0
sleep "$(long_or_short 20 3).$((RANDOM % 10))"
# The power cut: every process of the load at once.
_victims
kill -KILL "${VICTIMS[@]}" "${LOAD_PIDS[@]}" 2>/dev/null
wait 2>/dev/null
unset LD_PRELOAD Q_NO_SYNC
LOAD_PIDS=()

# What the processes were told: sent (exit 0) and acked (exit 0).
python3 - "$L" >"$T/promised" <<'PY'
import glob, json, sys
sent, acked = {}, set()
for path in glob.glob(sys.argv[1] + "/*.jsonl"):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line torn by the cut
        if r.get("op") == "send" and r.get("rc") == 0:
            for body, o in zip(r["bodies"], r.get("out") or []):
                sent[body] = o["id"]
        if r.get("op") == "receive" and r.get("rc") == 0:
            for m in r.get("out") or []:
                sent.setdefault(m["body"], m["id"])
        if r.get("op") == "ack" and r.get("rc") in (0, 3):
            stale = set(r.get("stale") or [])
            for rc in r["receipts"]:
                if rc not in stale:
                    acked.add(rc.split(".")[0])
for body, mid in sent.items():
    print("acked" if mid in acked else "sent", mid, body)
PY
n_sent=$(grep -c '^sent ' "$T/promised")
n_acked=$(grep -c '^acked ' "$T/promised")
((n_sent + n_acked > 50)) || die "the load did too little before the cut ($n_sent sent, $n_acked acked)"

bad_cuts=0
for ((seed = 1; seed <= CUTS; seed++)); do
  img=$T/cut.q
  rm -f "$img" "$img-lock"
  python3 "$TORTURE_DIR/powercut.py" "$T/base.q" "$T/journal" "$img" --seed "$seed" >"$T/cut.log" ||
    die "powercut.py failed"
  problems=()
  if ! "$Q" -f "$img" stats "$QUEUE" --json >/dev/null 2>"$T/err"; then
    problems+=("does not open: $(head -c 200 "$T/err")")
  else
    out=$(mdb_dump -n -a "$img" 2>&1 >/dev/null) || problems+=("LMDB cannot walk it: $out")
    "$Q" -f "$img" peek "$QUEUE" -n 1000000 --json | jq -r .id | sort >"$T/present"
    lost=$(awk '$1 == "sent" {print $2}' "$T/promised" | sort | comm -23 - "$T/present")
    back=$(awk '$1 == "acked" {print $2}' "$T/promised" | sort | comm -12 - "$T/present")
    [[ -z $lost ]] || problems+=("$(grep -c . <<<"$lost") messages sent (exit 0) are gone: $(head -n 5 <<<"$lost" | xargs)")
    [[ -z $back ]] || problems+=("$(grep -c . <<<"$back") messages acked (exit 0) are back: $(head -n 5 <<<"$back" | xargs)")
  fi
  if ((${#problems[@]})); then
    bad_cuts=$((bad_cuts + 1))
    [[ -n $fault ]] || fail "power cut #$seed ($(<"$T/cut.log")): ${problems[*]}"
  fi
done

if [[ $fault == no-sync ]]; then
  if ((bad_cuts == 0)); then
    fail "control: with durability off, all $CUTS power cuts kept every message: the check is blind"
  else
    echo "power_loss control (no-sync): $bad_cuts of $CUTS power cuts lost messages or the file, as they must"
  fi
  exit 0
fi
echo "power_loss: $CUTS power cuts after $n_sent sent + $n_acked acked messages" \
     "($(stat -c %s "$T/journal") journal bytes): nothing promised was lost"
