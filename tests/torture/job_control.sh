#!/usr/bin/env bash
# Job control, process trees and PID namespaces (issue 25 items 9, 10, 11).
#
#   job_control.sh Q [tstp-storm|outlive|pidns]   (default: all)
#
# tstp-storm: Ctrl-Z (SIGTSTP) and SIGCONT, again and again, to busy writers: a
#   q work, a q work --to stage and a streaming q send --lines. A writer must
#   never stop inside its transaction: another writer (q send --lock-timeout 3s)
#   run while one is stopped never exits 69. Every victim must really have been
#   stopped (else the storm tested nothing).
# outlive: q work is killed with -9 again and again while its commands run on
#   (each ignores SIGTERM, or leaves a grandchild that does the work), and a new
#   q work starts at once (each lives 0.1-0.4 s after its first command
#   started, or 1.5 s; each run 0.5-1 s). No message may run twice at once: the runs' own log
#   of start and end times per message must show no overlap.
# pidns: q processes in PID namespaces of their own (unshare -p -f --mount-proc;
#   root only, else skipped), as containers sharing a queue file. A q work is
#   pid 1 of one; another q as pid 1 of another cannot use the file (LMDB's
#   reader table locks the byte of its pid): it exits 69 saying why, not 74 with
#   "Resource temporarily unavailable", and changes nothing; a q of another pid
#   there works alongside.
part=${2:-all}
set -- "$1"
source "$(dirname "$0")/lib.sh" "$@"
scale=${Q_TEST_TIME_SCALE:-1}
# ---- tstp-storm ------------------------------------------------------------------------
if [[ $part == all || $part == tstp-storm ]]; then
  export Q_FILE=$T/tstp.q
  for queue in work src dst lines other; do "$Q" create "$queue" >/dev/null || die "create"; done
  seq -f 'w-%g' 1 20000 | "$Q" send work --lines -q || die "backlog"
  seq -f 's-%g' 1 20000 | "$Q" send src --lines -q || die "backlog"
  ROUNDS=$(long_or_short 200 30)
  # The storm is driven from Python: the victims in process groups of their
  # own (SIGTSTP to an orphaned process group is discarded), their state read
  # from /proc, and no shell job control in the way.
  python3 - "$Q" "$T" "$ROUNDS" "$RANDOM" "$scale" <<'PY' || fail "tstp-storm: see above"
import os, random, signal, subprocess, sys, time
q, t, rounds, seed, scale = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
random.seed(seed)
def start(args, name, stdin=subprocess.DEVNULL):
    return subprocess.Popen(args, stdin=stdin, stdout=subprocess.DEVNULL,
                            stderr=open(f"{t}/{name}.err", "w"), process_group=0)
victims = [("q work", start([q, "work", "work", "-j", "2", "-q", "--", "true"], "work")),
           ("q work --to", start([q, "work", "src", "--to", "dst", "-q", "--", "cat"], "stage"))]
yes = subprocess.Popen(["yes", "a line of a long stream"], stdout=subprocess.PIPE, process_group=0)
victims.append(("q send --lines", start([q, "send", "lines", "--lines", "-q"], "lines", yes.stdout)))
yes.stdout.close()
def state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]
stops, busy, failed = [0, 0, 0], 0, 0
for r in range(rounds):
    v = random.randrange(3)
    name, p = victims[v]
    if p.poll() is not None:
        print(f"FAIL: {name} exited {p.returncode} (round {r})"); failed += 1; break
    os.kill(p.pid, signal.SIGTSTP)
    end = time.monotonic() + 10 * scale
    while state(p.pid) != "T" and time.monotonic() < end:
        time.sleep(0.005)
    if state(p.pid) != "T":
        print(f"FAIL: {name} did not stop on SIGTSTP (round {r}): state {state(p.pid)}"); failed += 1
        break
    stops[v] += 1
    other = subprocess.run([q, "send", "other", f"round {r}", "--lock-timeout", "3s"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if other.returncode != 0:
        print(f"FAIL: round {r}: with {name} stopped by SIGTSTP, q send exited "
              f"{other.returncode}: {other.stderr.strip()}")
        failed += 1
        busy += other.returncode == 69
    os.kill(p.pid, signal.SIGCONT)
    time.sleep(random.randrange(50) / 1000)
for name, p in victims:
    os.kill(p.pid, signal.SIGCONT)
    p.terminate()
yes.kill()
for name, p in victims:
    p.wait()
yes.wait()
print(f"tstp-storm: {rounds} SIGTSTP/SIGCONT rounds (stopped: q work {stops[0]}, "
      f"q work --to {stops[1]}, q send --lines {stops[2]}); other writers that exited 69: {busy}")
sys.exit(1 if failed else 0)
PY
  assert_eq "$ROUNDS" "$(stat_field other visible)" "every other writer's message is there"
  assert_exit 0 "$Q" verify
fi

# ---- outlive ---------------------------------------------------------------------------
if [[ $part == all || $part == outlive ]]; then
  export Q_FILE=$T/outlive.q
  "$Q" create o --visibility-timeout 5m --max-receives 100 >/dev/null || die "create"
  N=$(long_or_short 40 8)
  seq -f 'm-%g' 1 "$N" | "$Q" send o --lines -q || die "send"
  runs=$T/runs.log
  : >"$runs"
  # Each run logs "ID START END" (ns) when its work ends; the work outlives a
  # SIGTERM: either the command ignores it, or a grandchild does the work.
  work='s=$(date +%s%N); sleep 0.$((RANDOM % 5 + 5)); echo "$Q_MESSAGE_ID $s $(date +%s%N)" >>"$0"'
  kills=0
  in_flight_at_least() { (($(stat_field "$1" in_flight) >= $2)); }
  end=$((SECONDS + 120 * scale))
  while [[ $(stat_field o visible) != 0 || $(stat_field o in_flight) != 0 ]]; do
    ((SECONDS < end)) || die "outlive: the queue did not drain within $((120 * scale)) s"
    if ((RANDOM % 2)); then
      cmd=(bash -c "trap '' TERM; $work" "$runs")
    else
      cmd=(bash -c "( $work ) & wait" "$runs")
    fi
    "$Q" work o -j 3 -q -- "${cmd[@]}" </dev/null 2>>"$T/outlive.err" &
    w=$!
    # Every other q work is killed soon after its first command started, the
    # others after 1.5 s (their first runs are done and acked by then).
    if ((kills % 2 == 0)); then
      wait_for 10 in_flight_at_least o 1
      sleep_ms $((100 + RANDOM % 300))
    else
      sleep 1.5
    fi
    kill -9 "$w" 2>/dev/null && kills=$((kills + 1))
    wait "$w" 2>/dev/null
  done
  # The last runs may still be writing their lines.
  wait_for 10 test "$(wc -l <"$runs")" -ge "$N" || fail "outlive: fewer runs logged than messages"
  overlaps=$(sort -k1,1 -k2,2n "$runs" | awk '
    $1 != id { id = $1; max = 0 }
    $2 < max { printf "%s: a run started %.0f ms before an earlier one ended; ", $1, (max - $2) / 1e6; n++ }
    $3 > max { max = $3 }
    END { exit n > 0 }')
  (($? == 0)) || fail "outlive: messages ran twice at once: $overlaps"
  echo "outlive: $N messages, $kills kills of q work -9, $(wc -l <"$runs") runs"
  assert_exit 0 "$Q" verify
fi

# ---- pidns -----------------------------------------------------------------------------
if [[ $part == all || $part == pidns ]]; then
  if [[ $(id -u) != 0 ]] || ! unshare -p -f --mount-proc true 2>/dev/null; then
    [[ $part == pidns ]] && skip "pidns: needs root and unshare -p (PID namespaces)"
    skip_part "pidns: needs root and unshare -p (PID namespaces)"
  else
    export Q_FILE=$T/pidns.q
    "$Q" create p --visibility-timeout 5m >/dev/null || die "create"
    "$Q" send p a >/dev/null
    # q work as pid 1 of namespace A (exec), its command holding the message.
    unshare -p -f --mount-proc sh -c 'exec "$0" work p -q -- sh -c "echo \$\$ >\"\$0\"; exec sleep 600" "$1"' \
      "$Q" "$T/A.pid" </dev/null 2>"$T/A.err" &
    job_a=$!
    wait_for 20 test -s "$T/A.pid" || die "pidns: q work did not start its command: $(cat "$T/A.err")"
    # pid 1 of namespace B: the same pid as A's q work.
    run unshare -p -f --mount-proc sh -c 'exec "$0" stats p --json' "$Q"
    clash_rc=$RC
    assert_eq 69 "$RC" "pidns: q as pid 1 beside another pid 1 exits 69"
    assert_contains "$ERR" "a process of another PID namespace (a container) with this process's pid 1 uses the file" \
      "pidns: it says why"
    run unshare -p -f --mount-proc sh -c 'exec "$0" send p b' "$Q"
    assert_eq 69 "$RC" "pidns: a send as pid 1 too"
    # Not pid 1 (sh is): works alongside A.
    run unshare -p -f --mount-proc sh -c '"$0" send p c -q && "$0" stats p --json' "$Q"
    assert_eq 0 "$RC" "pidns: a q of another pid in another namespace works: $ERR"
    assert_eq "1 1" "$(jq -r '"\(.visible) \(.in_flight)"' <<<"$OUT")" "pidns: b was not sent, c was"
    kill -9 "$(pgrep -P "$job_a")" 2>/dev/null
    wait "$job_a" 2>/dev/null
    assert_exit 0 "$Q" verify
    echo "pidns: q as pid 1 of a second PID namespace beside a q work as pid 1 of another: exit $clash_rc"
  fi
fi
