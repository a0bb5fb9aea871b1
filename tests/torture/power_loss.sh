#!/usr/bin/env bash
# Scenario 4, power loss: producers and consumers run with the powerloss shim
# (LD_PRELOAD), which journals every write to the queue file and every point
# at which writes became durable (a sync of the file through any descriptor,
# a write through an O_DSYNC descriptor: shim/powerloss.c). At a random moment
# every process is killed (the power cut); powercut.py then rebuilds the file
# as the disk may have kept it: all durable writes, and a random subset of the
# 4 KiB pages written since (cut 1: none of them; cut 2: all of them; the
# others: each page at even odds). For each of those files: it opens fine,
# LMDB can walk it, every message whose `q send` exited 0 is in it (unless
# acked), and no message whose `q ack` exited 0 is. The journal itself is
# checked first: replayed in full, it must be the file the processes left.
#
#   power_loss.sh Q [--fault no-sync]
# The control runs the load with Q_NO_SYNC=1 (durability off): the rebuilt
# files must lose messages that were reported sent, and the check must fail.
#
# TORTURE_SEED=N replays a run's random choices: the moment of the cut and the
# pages each rebuild keeps (it is printed first). The load's interleaving is
# timing, and cannot be replayed: a failed run keeps base.q and journal, and
#   powercut.py base.q journal OUT --seed SEED.CUT --keep P
# rebuilds any of its files exactly (each failure prints its command).
fault=""
if [[ ${2:-} == --fault ]]; then fault=$3; set -- "$1"; fi
source "$(dirname "$0")/lib.sh" "$@"
SHIM=${TORTURE_SHIM_DIR:-}/libq_powerloss.so
[[ -f $SHIM ]] || die "the powerloss shim is not built: set TORTURE_SHIM_DIR (tests/torture/run does)"
SHIM=$(cd "$(dirname "$SHIM")" && pwd)/$(basename "$SHIM")  # (each process resolves LD_PRELOAD in its own directory)
SEED=$Q_TEST_SEED   # (lib.sh: TORTURE_SEED or Q_TEST_SEED, else a new one)
RANDOM=$SEED
echo "power_loss: seed $SEED (TORTURE_SEED=$SEED replays the cut moment and the rebuilds)"

# The model first: what the shim journals, and what powercut.py makes of it.
# Python's os.write/os.pwrite/os.fsync/os.fdatasync call libc's, which the shim
# wraps. The file is opened by two spellings of its path (the shim goes by
# inode), written through each, synced through the other; an O_DSYNC write is
# durable without a sync; a sync of another file makes nothing durable.
mkdir -p "$T/model"
printf 'B%.0s' {1..8192} >"$T/model/f"
cp "$T/model/f" "$T/model/base"
LD_PRELOAD=$SHIM Q_PL_TARGET=$T/model/f Q_PL_JOURNAL=$T/model/journal python3 - "$T/model" <<'PY' ||
import os, sys
d = sys.argv[1]
a = os.open(d + "/f", os.O_RDWR)
b = os.open(d + "/../model/./f", os.O_RDWR)
m = os.open(d + "/f", os.O_WRONLY | os.O_DSYNC)
other = os.open(d + "/other", os.O_RDWR | os.O_CREAT)
os.pwrite(a, b"1" * 4096, 0)          # through a, synced through b: durable
os.fdatasync(b)
os.pwrite(m, b"2" * 100, 4096)        # O_DSYNC: durable on return
os.lseek(b, 4196, os.SEEK_SET)
os.write(b, b"3" * 100)               # not synced (the sync below is of another file)
os.write(other, b"x")
os.fsync(other)
PY
  die "the model check could not run python3 under the shim"
for keep in 0 1; do
  python3 "$TORTURE_DIR/powercut.py" "$T/model/base" "$T/model/journal" "$T/model/cut$keep" --keep $keep >/dev/null ||
    die "powercut.py failed on the model check"
done
want0=$(printf '1%.0s' {1..4096}; printf '2%.0s' {1..100}; printf 'B%.0s' {1..3996})
want1=$(printf '1%.0s' {1..4096}; printf '2%.0s' {1..100}; printf '3%.0s' {1..100}; printf 'B%.0s' {1..3896})
[[ $(<"$T/model/cut0") == "$want0" ]] ||
  die "model check: after the cut that keeps nothing unsynced, the file is not (synced write, O_DSYNC write, base)"
[[ $(<"$T/model/cut1") == "$want1" && $(<"$T/model/cut1") == "$(<"$T/model/f")" ]] ||
  die "model check: the cut that keeps everything is not the file as written"
python3 "$TORTURE_DIR/powercut.py" "$T/model/base" "$T/model/journal" /dev/null --verify "$T/model/f" >/dev/null ||
  die "model check: the journal does not account for the file"

# Every q of the load preloads the shim: the dynamic build of the same sources.
use_dynamic_q
Q=$QD

CUTS=$(long_or_short 200 25)
export Q_FILE=$T/pl.q
assert_exit 0 "$Q" create "$QUEUE" --visibility-timeout 2s --max-receives 0 || die "cannot create"
# The journal starts here: the file and its directory entry are durable.
sync "$Q_FILE" "$T"
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

# What the processes were told: sent (exit 0) and acked (exit 0). The cut also
# catches acks in flight, and their outcome is unknown: a `q ack` may have
# committed (durably) and then been killed, or exited 0 just before its loop
# was killed, unlogged. Those messages are "doubt": neither must be kept nor
# gone. They are the deliveries of each consumer's last receive that no ack or
# nack of its log settles, and those of acks killed by a signal (exit >= 128).
python3 - "$L" >"$T/promised" <<'PY'
import glob, json, sys
sent, acked, doubt = {}, set(), set()
for path in glob.glob(sys.argv[1] + "/*.jsonl"):
    open_receipts = set()  # delivered by a receive of this log, not yet settled in it
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line torn by the cut
        op, rc = r.get("op"), r.get("rc")
        if op == "send" and rc == 0:
            for body, o in zip(r["bodies"], r.get("out") or []):
                sent[body] = o["id"]
        if op == "receive" and rc == 0:
            for m in r.get("out") or []:
                sent.setdefault(m["body"], m["id"])
                open_receipts.add(m["receipt"])
        if op == "ack":
            open_receipts.difference_update(r["receipts"])
            if rc in (0, 3):
                stale = set(r.get("stale") or [])
                for rc_ in r["receipts"]:
                    if rc_ not in stale:
                        acked.add(rc_.split(".")[0])
            elif rc is not None and rc >= 128:
                doubt.update(x.split(".")[0] for x in r["receipts"])
        if op in ("nack", "abandon"):
            open_receipts.discard(r.get("receipt"))
    doubt.update(x.split(".")[0] for x in open_receipts)
for body, mid in sent.items():
    print("acked" if mid in acked else "doubt" if mid in doubt else "sent", mid, body)
PY
n_sent=$(grep -c '^sent ' "$T/promised")
n_acked=$(grep -c '^acked ' "$T/promised")
n_doubt=$(grep -c '^doubt ' "$T/promised")
# (At most one receive's worth per consumer: 2 consumers, -n 1..3.)
((n_doubt <= 6)) || die "$n_doubt messages with an ack in flight at the cut: the log accounting is off"
((n_sent + n_acked > 50)) || die "the load did too little before the cut ($n_sent sent, $n_acked acked)"

# The model is only as good as the journal: replayed in full it must be the
# file the killed processes left, but for the pages of writes the cut fell
# inside (which the journal has, but which may not have been made).
if python3 "$TORTURE_DIR/powercut.py" "$T/base.q" "$T/journal" /dev/null --verify "$Q_FILE" >"$T/verify.log"; then
  cat "$T/verify.log"
else
  fail "$(<"$T/verify.log")"
fi
bad_cuts=0
for ((cut = 1; cut <= CUTS; cut++)); do
  img=$T/cut.q
  rm -f "$img" "$img-lock"
  keep=0.5
  ((cut == 1)) && keep=0
  ((cut == 2)) && keep=1
  python3 "$TORTURE_DIR/powercut.py" "$T/base.q" "$T/journal" "$img" --seed "$SEED.$cut" --keep $keep >"$T/cut.log" ||
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
    [[ -n $fault ]] ||
      fail "power cut #$cut ($(<"$T/cut.log")): ${problems[*]}; rebuild it with: powercut.py base.q journal OUT --seed $SEED.$cut --keep $keep"
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
echo "power_loss: $CUTS power cuts (seed $SEED) after $n_sent sent + $n_acked acked messages" \
     "($n_doubt with an ack in flight at the cut; $(stat -c %s "$T/journal") journal bytes): nothing promised was lost"
