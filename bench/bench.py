#!/usr/bin/env python3
"""The q benchmark suite's runner. Run it through bench/run, which installs what
it needs, builds q and the floor program, then starts this.

Every comparison is measured side by side in one run: contenders alternate run
by run (A, B, C, A, B, C, with the starting contender rotating each round), and
results are medians and ratios of medians, because absolute times on a shared
machine drift.

The parts, in bench/qbench/: common.py (sizes per mode, the process runner,
statistics), contenders.py (q, sqlite3, redis), scenarios/ (one module per
scenario, each a run(suite) that measures through the Suite below and records
figures, targets and notes) and report.py (results.md, the CSV files, plots).
"""
import argparse
import datetime
import os
import shutil
import signal
import subprocess
import sys
import time

from qbench.common import MODES, REPO, BenchError, Procs, body_for, log, median, quartiles, rotated
from qbench.contenders import RedisServer
from qbench.report import replot, write_plots, write_results
from qbench.scenarios import (s1_enqueue, s2_receive_ack, s3_bulk, s5_depth, s6_wakeup,
                              s7_contention, syscalls)


class Suite:
    def __init__(self, args):
        self.args = args
        self.mode = args.mode
        self.cfg = MODES[args.mode]
        self.work = args.work
        self.out = args.out
        self.bin = os.path.join(self.work, "bin")
        self.p = Procs(self.work)
        self.q = os.path.join(self.bin, "q")
        self.floor = os.path.join(self.bin, "floor")
        self.raw = []        # (scenario, contender, metric, rep, value, unit)
        self.summary = []    # dicts, one per reported figure
        self.targets = []    # (scenario, target text, figure text, met: True/False/None)
        # Lost messages and failed commands: not a missed target but a broken q;
        # the run exits 1 (in every mode, --smoke too).
        self.broken = []
        self.notes = {}      # scenario -> list of markdown lines
        self.redis = RedisServer(self.work)
        self.timings = {}

    # -- recording --

    def record(self, scenario, contender, metric, values, unit):
        for i, v in enumerate(values):
            self.raw.append((scenario, contender, metric, i + 1, v, unit))

    def summarize(self, scenario, contender, metric, values, unit, ratio_to=None):
        p25, p75 = quartiles(values)
        row = dict(scenario=scenario, contender=contender, metric=metric, n=len(values),
                   median=median(values), p25=p25, p75=p75, unit=unit, ratio=None,
                   ratio_to=ratio_to)
        self.summary.append(row)
        return row

    def note(self, scenario, text):
        self.notes.setdefault(scenario, []).append(text)

    def target(self, scenario, text, figure, met):
        self.targets.append((scenario, text, figure, met))
        status = {True: "met", False: "MISSED", None: "n/a"}[met]
        log(f"target {scenario}: {text}: {figure} -> {status}")

    # -- set-up --

    def prepare(self):
        os.makedirs(self.bin, exist_ok=True)
        os.makedirs(self.out, exist_ok=True)
        # A private copy: others may rebuild build/q while this runs.
        shutil.copy2(self.args.q, self.q)
        # Measured as it ships: the .deb's q is stripped (tests/docs/test_deb.sh);
        # the build's RelWithDebInfo binary carries some 140 MB of debug
        # information, which costs every process start a few percent.
        subprocess.run(["strip", "--strip-debug", self.q], check=True)
        ver = self.p.check_output([self.q, "--version"]).strip()
        log(f"q: {self.args.q} ({ver}); floor: {self.args.floor}; work dir {self.work}")
        if os.path.abspath(self.args.floor) != self.floor:
            shutil.copy2(self.args.floor, self.floor)
        self.q_version = ver
        st = os.stat(self.args.q)
        built = datetime.datetime.utcfromtimestamp(st.st_mtime).strftime("%Y-%m-%d %H:%M UTC")
        head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        self.q_origin = (f"`{os.path.relpath(self.args.q, REPO) if self.args.q.startswith(REPO) else self.args.q}`"
                         f" built {built}; the repository was at {head or '(no git)'}"
                         f"{' with uncommitted changes' if dirty else ''}")
        self.lines = os.path.join(self.work, "lines.txt")
        with open(self.lines, "w") as f:
            for i in range(self.cfg["bulk"]):
                f.write(body_for(i) + "\n")
        self.redis.start()
        log(f"redis-server on 127.0.0.1:{self.redis.port} (appendfsync always)")

    def cleanup(self):
        self.redis.stop()

    def alternate(self, contenders, reps=None, warmup=None):
        """Runs each contender once per round, rotating the order; returns ms lists."""
        reps = reps or self.cfg["reps"]
        warmup = self.cfg["warmup"] if warmup is None else warmup
        times = {name: [] for name, _ in contenders}
        for r in range(warmup + reps):
            for name, fn in rotated(contenders, r):
                res = fn()
                if r >= warmup:
                    times[name].append(res if isinstance(res, float) else res.ms)
        return times

    # -- running it all --

    def run(self):
        plan = [("1", s1_enqueue), ("2", s2_receive_ack), ("3", s3_bulk), ("5", s5_depth),
                ("6", s6_wakeup), ("7", s7_contention), ("sys", syscalls)]
        only = set(self.args.only.split(",")) if self.args.only else None
        for key, scenario in plan:
            if only and key not in only and not (key == "3" and only & {"4", "8"}) and \
                    not (key == "5" and "9" in only):
                continue
            log(f"scenario {key}: {scenario.__name__.rsplit('.', 1)[-1]}")
            t0 = time.time()
            scenario.run(self)
            self.timings[key] = time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=sorted(MODES), default="full")
    ap.add_argument("--q", help="the q binary to measure")
    ap.add_argument("--floor", help="the compiled floor program")
    ap.add_argument("--work", required=True, help="scratch directory for the stores")
    ap.add_argument("--out", required=True, help="where results go")
    ap.add_argument("--only", default="", help="comma-separated scenarios (1,2,3,5,6,7,sys)")
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--replot", action="store_true",
                    help="only redraw the plots in --out from its CSV files")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.replot:
        replot(args)
        return 0
    suite = Suite(args)
    started = datetime.datetime.utcnow()

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    try:
        suite.prepare()
        suite.run()
    finally:
        suite.cleanup()
    finished = datetime.datetime.utcnow()
    if suite.cfg["plots"]:
        write_plots(suite)
    write_results(suite, started, finished)
    missed = [t for t in suite.targets if t[3] is False]
    log(f"results in {args.out}/results.md; {len(suite.targets)} targets, {len(missed)} missed")
    if suite.broken:
        for b in suite.broken:
            log(f"FAILED: {b}")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"FAILED: {e}")
        sys.exit(1)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e})")
        sys.exit(130)
