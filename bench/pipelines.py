#!/usr/bin/env python3
"""Issue 14 figures, side by side with an older q when given:

  bench/pipelines.py --q build/q [--base OLD_q] [--runs 5] [--lines 1000000]

- throughput of `send --lines` from a file and from a pipe (`seq`), N lines of
  100 bytes (file) and seq's numbers (pipe), durable; medians of alternating runs;
- trickle latency: a line written every 20 ms into a pipe; time from its write
  to its id being printed (= committed) by `q send --lines`; the base commits
  only at the end of input, so its figure is the producer's whole run;
- holder death: `q work` with a 5 min visibility timeout, killed with -9 while
  a second worker waits; time from the kill to the second worker's command start.
Prints a small table; nothing is written to the repository.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--q", default="build/q")
    ap.add_argument("--base")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--lines", type=int, default=1_000_000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="q-bench-pipelines.", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        lines_file = os.path.join(work, "lines")
        with open(lines_file, "w") as f:
            for i in range(a.lines):
                f.write(("%d-" % i).ljust(100, "x") + "\n")
        contenders = [("q", a.q)] + ([("base", a.base)] if a.base else [])
        results = {}
        for r in range(a.runs):
            for name, q in (contenders if r % 2 == 0 else contenders[::-1]):
                for what, pipe in (("file", False), ("seq", True)):
                    results.setdefault((name, what), []).append(
                        throughput(q, work, lines_file, a.lines, pipe))
                results.setdefault((name, "trickle"), []).append(trickle(q, work))
            results.setdefault(("q", "holder"), []).append(holder_death(a.q, work))
        print(f"{'figure':<46} " + " ".join(f"{n:>12}" for n, _ in contenders))
        rows = [("file", f"send --lines, {a.lines:,} x 100 B file (msg/s)"),
                ("seq", f"seq {a.lines} | send --lines (msg/s)"),
                ("trickle", "trickle, line to committed id (ms, median)")]
        for key, label in rows:
            cells = [f"{statistics.median(results[(n, key)]):>12,.1f}" for n, _ in contenders]
            print(f"{label:<46} " + " ".join(cells))
        print(f"{'q work kill -9 to redelivery (ms, median)':<46} "
              f"{statistics.median(results[('q', 'holder')]):>12,.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
