#!/usr/bin/env python3
"""Issue 14 figures, side by side with an older q when given:

  bench/pipelines.py --q build/q [--base OLD_q] [--runs 5] [--lines 1000000]

- throughput of `send --lines` from a file and from a pipe (`seq`), N lines of
  100 bytes (file) and seq's numbers (pipe), durable; medians of alternating runs;
- trickle latency: a line written every 20 ms into a pipe; time from its write
  to its id being printed (= committed) by `q send --lines`; the base commits
  only at the end of input, so its figure is the producer's whole run;
- holder death: `q work` with a 5 min visibility timeout, killed with -9 while
  a second worker waits; time from the kill to the second worker's command start;
- the spawn floor: `q work -j J -- /bin/true` over --work-n messages against
  `seq N | xargs -P J -n 1 /bin/true` (J from --jobs), alternating, durable;
- a stage: `q work SRC --to DST -j 8 -- cat` over --stage-n messages (each
  output sent in the transaction that acks its source) beside the same run
  without --to (the output thrown away, the source acked in batches).
The streaming throughput is shown beside the bulk floor (bench/floor.c
--lines: every line one record, one durable LMDB transaction, no q), which is
what the one-transaction `--lines` of before streaming came close to.
Prints a small table with the load average before and after; nothing is
written to the repository.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def run(q, path, args, stdin=None, env=None):
    e = dict(os.environ, Q_FILE=path)
    if env:
        e.update(env)
    return subprocess.run([q] + args, stdin=stdin, stdout=subprocess.DEVNULL, env=e, check=True)


def throughput(q, work, lines_file, n, pipe):
    path = os.path.join(work, "t.q")
    for f in (path, path + "-lock", path + "-wake"):
        if os.path.exists(f):
            os.unlink(f)
    run(q, path, ["create", "t"])
    start = time.perf_counter()
    if pipe:
        seq = subprocess.Popen(["seq", str(n)], stdout=subprocess.PIPE)
        run(q, path, ["send", "t", "--lines", "-q"], stdin=seq.stdout)
        seq.wait()
    else:
        with open(lines_file) as f:
            run(q, path, ["send", "t", "--lines", "-q"], stdin=f)
    return n / (time.perf_counter() - start)


def trickle(q, work, count=20, gap=0.02):
    path = os.path.join(work, "tr.q")
    run(q, path, ["create", "tr"])
    env = dict(os.environ, Q_FILE=path)
    p = subprocess.Popen([q, "send", "tr", "--lines"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env, bufsize=0)
    latencies = []
    written = []
    for i in range(count):
        written.append(time.perf_counter())
        p.stdin.write(b"line %d\n" % i)
        p.stdin.flush()
        # Streaming: the id comes back before the next line is written.
        if stream_ready(p.stdout, gap):
            p.stdout.readline()
            latencies.append(time.perf_counter() - written[-1])
        time.sleep(gap)
    p.stdin.close()
    rest = p.stdout.read().splitlines()
    end = time.perf_counter()
    latencies += [end - t for t in written[len(latencies):len(latencies) + len(rest)]]
    p.wait()
    return statistics.median(latencies) * 1000


def stream_ready(f, timeout):
    import select
    r, _, _ = select.select([f], [], [], timeout)
    return bool(r)


def holder_death(q, work):
    path = os.path.join(work, "h.q")
    env = dict(os.environ, Q_FILE=path)
    run(q, path, ["create", "h", "--visibility-timeout", "5m"])
    run(q, path, ["send", "h", "job"])
    first = subprocess.Popen([q, "work", "h", "-q", "--", "sleep", "60"], env=env)
    while True:
        out = subprocess.run([q, "stats", "h", "--json"], env=env, capture_output=True, text=True)
        if '"in_flight":1' in out.stdout:
            break
        time.sleep(0.01)
    mark = os.path.join(work, "started")
    second = subprocess.Popen([q, "work", "h", "-q", "--max-messages", "1", "--", "sh", "-c",
                               'date +%s%N >"$0"', mark], env=env)
    time.sleep(0.3)
    killed = time.time_ns()
    first.send_signal(signal.SIGKILL)
    first.wait()
    second.wait(timeout=60)
    with open(mark) as f:
        started = int(f.read())
    os.unlink(mark)
    return (started - killed) / 1e6


def fresh(path):
    for f in (path, path + "-lock", path + "-wake"):
        if os.path.exists(f):
            os.unlink(f)


def stat_field(q, path, queue, field):
    out = subprocess.run([q, "stats", queue, "--json"], env=dict(os.environ, Q_FILE=path),
                         capture_output=True, text=True, check=True).stdout
    import re
    return int(re.search(r'"%s":(\d+)' % field, out).group(1))


def work_rate(q, work, n, jobs):
    path = os.path.join(work, "w.q")
    fresh(path)
    run(q, path, ["create", "w"])
    with subprocess.Popen(["seq", str(n)], stdout=subprocess.PIPE) as seq:
        run(q, path, ["send", "w", "--lines", "-q"], stdin=seq.stdout)
    start = time.perf_counter()
    run(q, path, ["work", "w", "-j", str(jobs), "--exit-when-empty", "-q", "--", "/bin/true"])
    rate = n / (time.perf_counter() - start)
    acked = stat_field(q, path, "w", "acked")
    if acked != n:
        sys.exit(f"pipelines: q work acked {acked} of {n}")
    return rate


def xargs_rate(n, jobs):
    start = time.perf_counter()
    with subprocess.Popen(["seq", str(n)], stdout=subprocess.PIPE) as seq:
        subprocess.run(["xargs", "-P", str(jobs), "-n", "1", "/bin/true"], stdin=seq.stdout,
                       check=True)
    return n / (time.perf_counter() - start)


def stage_rate(q, work, n, to):
    path = os.path.join(work, "s.q")
    fresh(path)
    run(q, path, ["create", "src"])
    run(q, path, ["create", "dst"])
    with subprocess.Popen(["seq", str(n)], stdout=subprocess.PIPE) as seq:
        run(q, path, ["send", "src", "--lines", "-q"], stdin=seq.stdout)
    args = ["work", "src", "-j", "8", "--exit-when-empty", "-q"]
    if to:
        args += ["--to", "dst"]
    start = time.perf_counter()
    run(q, path, args + ["--", "cat"])
    rate = n / (time.perf_counter() - start)
    if to and stat_field(q, path, "dst", "visible") != n:
        sys.exit("pipelines: the stage did not send one output per message")
    return rate


def floor_rate(floor, work, lines_file, n):
    path = os.path.join(work, "floor.lmdb")
    fresh(path)
    start = time.perf_counter()
    with open(lines_file) as f:
        subprocess.run([floor, path, "--lines"], stdin=f, stdout=subprocess.DEVNULL, check=True)
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--q", default="build/q")
    ap.add_argument("--base")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--floor", help="bench/floor.c built (the bulk floor); default: built here")
    ap.add_argument("--work-n", type=int, default=20_000)
    ap.add_argument("--jobs", default="2,8")
    ap.add_argument("--stage-n", type=int, default=5_000)
    ap.add_argument("--only", default="stream,work,stage",
                    help="comma-separated groups: stream (send, trickle, holder), work, stage")
    a = ap.parse_args()
    only = set(a.only.split(","))
    jobs = [int(j) for j in a.jobs.split(",")]
    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="q-bench-pipelines.", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        lines_file = os.path.join(work, "lines")
        if "stream" in only:
            with open(lines_file, "w") as f:
                for i in range(a.lines):
                    f.write(("%d-" % i).ljust(100, "x") + "\n")
        floor = a.floor
        if "stream" in only and not floor:
            floor = os.path.join(work, "floor")
            here = os.path.dirname(os.path.abspath(__file__))
            subprocess.run(["cc", "-O2", "-o", floor, os.path.join(here, "floor.c"), "-llmdb"],
                           check=True)
        contenders = [("q", a.q)] + ([("base", a.base)] if a.base else [])
        results = {}
        for r in range(a.runs):
            if "stream" in only:
                for name, q in (contenders if r % 2 == 0 else contenders[::-1]):
                    for what, pipe in (("file", False), ("seq", True)):
                        results.setdefault((name, what), []).append(
                            throughput(q, work, lines_file, a.lines, pipe))
                    results.setdefault((name, "trickle"), []).append(trickle(q, work))
                results.setdefault(("q", "holder"), []).append(holder_death(a.q, work))
                results.setdefault("floor", []).append(floor_rate(floor, work, lines_file, a.lines))
            if "work" in only:
                for j in jobs:
                    pair = [("xargs", lambda: xargs_rate(a.work_n, j)),
                            ("work", lambda: work_rate(a.q, work, a.work_n, j))]
                    for name, f in (pair if r % 2 == 0 else pair[::-1]):
                        results.setdefault((name, j), []).append(f())
            if "stage" in only:
                pair = [("stage", True), ("plain", False)]
                for name, to in (pair if r % 2 == 0 else pair[::-1]):
                    results.setdefault(name, []).append(stage_rate(a.q, work, a.stage_n, to))
        med = lambda key: statistics.median(results[key])
        print(f"runs={a.runs} (medians); load average before "
              f"{' '.join(f'{x:.2f}' for x in load_before)}, after "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if "stream" in only:
            print(f"{'figure':<46} " + " ".join(f"{n:>12}" for n, _ in contenders))
            rows = [("file", f"send --lines, {a.lines:,} x 100 B file (msg/s)"),
                    ("seq", f"seq {a.lines} | send --lines (msg/s)"),
                    ("trickle", "trickle, line to committed id (ms, median)")]
            for key, label in rows:
                cells = [f"{med((n, key)):>12,.1f}" for n, _ in contenders]
                print(f"{label:<46} " + " ".join(cells))
            print(f"{'bulk floor, same file, one transaction (msg/s)':<46} {med('floor'):>12,.1f}")
            print(f"{'q work kill -9 to redelivery (ms, median)':<46} {med(('q', 'holder')):>12,.1f}")
        if "work" in only:
            for j in jobs:
                q_, x_ = med(("work", j)), med(("xargs", j))
                print(f"q work -j {j} -- /bin/true, {a.work_n:,} messages: {q_:,.0f} msg/s; "
                      f"xargs -P {j}: {x_:,.0f}/s; ratio {q_ / x_:.2f}")
        if "stage" in only:
            s_, p_ = med("stage"), med("plain")
            print(f"q work --to -j 8 -- cat, {a.stage_n:,} messages: {s_:,.0f} msg/s; "
                  f"without --to: {p_:,.0f}/s; ratio {s_ / p_:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
