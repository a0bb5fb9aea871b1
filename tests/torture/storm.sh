#!/usr/bin/env bash
# Scenario 1, the kill -9 storm: 8 producer and 8 consumer loops of short-lived
# q commands and a `q work` share one file while a killer SIGKILLs a random q
# process (or q work's command) every 50-300 ms. Then the load stops, the queue
# is drained, and the checker proves nothing was lost, invented, or delivered
# twice at once; the LMDB reader table holds no dead process afterwards.
# Meanwhile a lock hog takes the writer lock every 1-2 s, the way q does, and
# holds it for 1 s, longer than q work's --lock-timeout (300 ms) but inside its
# lease (4 s, a heartbeat every 1.3 s): q work must wait, report the wait and go
# on (never exit 69); no q work command may run while another delivery of its
# message runs (checked from the handler's logs).
#
#   storm.sh Q [--fault purge|rogue-clock] [--stage]
# --stage: q work runs as a stage (`--to QUEUE.out`), each run's output naming
# the run; the checker then also proves rule 7: every source message's output
# is on QUEUE.out exactly once per ack by q work, and never without it.
# --fault runs a control: the promise is broken on purpose, and the script then
# exits 0 only when the checker FAILED, and for that reason:
#   purge        a rogue `q purge` mid-run deletes messages behind everyone's
#                back: the checker must report `lost`;
#   rogue-clock  before the load, a consumer receives a marker message under a
#                10-minute lease, then a consumer whose clock is an hour ahead
#                (libfaketime) receives the same message while that lease runs,
#                both logged like the load: the checker must report exactly one
#                violation, a `lease-overlap` of the marker's second delivery.
#                (Planted on the empty queue, so certain: a rogue consumer in
#                the middle of the storm takes the backlog of ready messages
#                first, and overlaps a live lease only by chance.)
fault=""
stage=""
if [[ ${2:-} == --fault ]]; then fault=$3; set -- "$1"; fi
if [[ ${2:-} == --stage ]]; then stage=1; set -- "$1"; fi
source "$(dirname "$0")/lib.sh" "$@"

SECONDS_STORM=$(long_or_short "${STORM_SECONDS:-600}" "${STORM_SECONDS:-15}")
[[ -n $fault ]] && SECONDS_STORM=6   # a control needs no long run
PRODUCERS=8
CONSUMERS=8
VT_CHOICES=(1s)
SLOW_MS=800
# The lock hog (not in the controls, which plant one fault each).
HOG_MS=1000
if [[ -z $fault ]]; then
  export WORK_LOCK_TIMEOUT=300ms WORK_VT=4s WORK_QUIET=""
fi

assert_exit 0 "$Q" create "$QUEUE" --visibility-timeout 1s --max-receives 50 \
  || die "cannot create the queue"

# The rogue-clock control plants its overlap on the empty queue (lib.sh).
[[ $fault == rogue-clock ]] && plant_rogue_clock

if [[ -n $stage ]]; then
  export WORK_TO=$QUEUE.out
  assert_exit 0 "$Q" create "$WORK_TO" || die "cannot create the stage's queue"
fi

start_load "$PRODUCERS" "$CONSUMERS" 1

# lock_hog: until the load stops, every 1-2 s take the writer lock as q does
# (flock(2) LOCK_EX on the queue file itself: libq/lmdb/store.cpp
# lock_bounded) and hold it HOG_MS.
lock_hog() {
  local holds=0
  while [[ ! -e $STOP ]]; do
    sleep_ms $((1000 + RANDOM % 1000))
    [[ -e $STOP ]] && break
    flock -w 60 "$Q_FILE" sleep "$(printf '%d.%03d' $((HOG_MS / 1000)) $((HOG_MS % 1000)))" &&
      holds=$((holds + 1))
  done
  echo "$holds" >"$T/hog_holds"
}
[[ -z $fault ]] && { lock_hog & LOAD_PIDS+=($!); }

rogue() {
  sleep 2
  # Deletes messages behind everyone's back: loss the checker must see.
  "$Q" purge "$QUEUE" >/dev/null 2>&1
}
[[ $fault == purge ]] && { rogue & LOAD_PIDS+=($!); }

killer "$SECONDS_STORM" 50 300
stop_load
# Longer than any lease (q work's are 4 s with the hog).
drain 3 "$([[ -z $fault ]] && echo 5s || echo 2s)"
check_reader_table

if [[ -n $fault ]] && control_checker "$fault"; then
  case $fault in
    purge)
      if (($(jq '.violations.lost // 0' "$T/summary.json") > 0)); then
        echo "storm control (purge): the checker caught it (lost), as it must: $VIOLATIONS"
      else
        fail "control (purge): the checker failed, but found no lost message: $VIOLATIONS"
      fi
      ;;
    rogue-clock) expect_planted_overlap ;;
  esac
fi
[[ -n $fault ]] && exit 0
check

# The hog: it held the lock, q work waited for it (said so) and never exited
# 69 (stop_load fails on that), and no q work command ran while another
# delivery of its message ran. A run counts when its handler logged its end
# and its q work was not killed before: the lease was q work's to keep.
holds=$(cat "$T/hog_holds" 2>/dev/null || echo 0)
((holds > 0)) || fail "the lock hog never held the lock"
waits=$(cat "$L"/work.*.err 2>/dev/null | grep -c "writer lock")
((waits > 0)) || fail "q work never reported a wait for the writer lock ($holds holds)"
python3 - "$L" >"$T/overlaps" <<'EOF' || fail "a q work command ran while another delivery of its message ran: $(head -c 1500 "$T/overlaps")"
import collections, glob, json, sys
recs = []
for path in glob.glob(sys.argv[1] + "/*.jsonl"):
    for line in open(path, errors="replace"):
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
kills = collections.defaultdict(list)
ends, begins, receives = {}, [], []
for r in recs:
    op = r.get("op")
    if op == "kill": kills[r["pid"]].append(r["t0"])
    elif op == "work_end": ends[r["receipt"]] = r["t1"]
    elif op == "work_begin": begins.append(r)
    elif op == "receive" and r.get("rc") == 0:
        for m in r.get("out") or []: receives.append((m["id"], r["t0"], r["t1"], r.get("pid")))
others = collections.defaultdict(list)   # id -> (start, end) of every other delivery
for b in begins: others[b["id"]].append((b["t0"], b["t0"], b["receipt"]))
for mid, t0, t1, pid in receives: others[mid].append((t0, t1, None))
bad = 0
for b in begins:
    end = ends.get(b["receipt"])
    if end is None or any(t <= end for t in kills.get(b["ppid"], []) + kills.get(b["pid"], [])):
        continue
    for s, e, receipt in others[b["id"]]:
        if receipt == b["receipt"]: continue
        if b["t0"] < s and e < end:
            bad += 1
            print(f"{b['id']}: q work (pid {b['ppid']}) ran it from {b['t0']} to {end}; another delivery ran at {s}..{e}")
print(f"{len(begins)} q work runs checked, {bad} overlapped")
sys.exit(1 if bad else 0)
EOF
echo "storm: $(long_or_short long short) mode, ${SECONDS_STORM}s, lock hog: $holds holds of ${HOG_MS} ms, $waits waits reported by q work, $(tail -1 "$T/overlaps"): $(cat "$T/summary.json")"
