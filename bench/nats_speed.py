#!/usr/bin/env python3
"""q on NATS beside the JetStream floor and beside q on a file, in one run.

    bench/nats_speed.py [--q PATH] [--before PATH] [--rounds N] [--messages N] [--quick]
                        [--rows ROW,...] [--one-shot-count N]

Starts a 3-node loopback cluster (scripts/nats-cluster), builds the floor
(bench/nats_floor.c: the same work done with nats.c alone, on a stream shaped
like a q queue's), and measures, contenders alternating round by round and
each row the median of the rounds:

  one-shot send       one process per message, start to exit (ms)
  bulk send           `send --lines` of many lines / the floor's async publish
  process drain       `q receive -n 10 --json | q ack` loops / the floor's
                      fetch-10-and-AckSync processes (messages/s)
  runner drain        `q work -j 8 -- true` / one floor process doing Fetch(10)
                      and AckSync (messages/s); q work on a file beside it
  consumers           1, 2, 4, 8 process loops on NATS (messages/s)

and, for one command of each kind, the messages it sent the cluster
(Q_NATS_COUNT_REQUESTS, cli/main_nats.cpp) and the servers' CPU per message
of the drains. The load average is printed before and after: the machine is
shared, so only ratios from one run mean anything. --before PATH adds another
q binary (an older commit's build, q-nats beside it) on the same cluster, in the
same alternation. --rows picks rows (one-shot, bulk, process-drain,
runner-drain, consumers, requests; default all). Not part of the test suite.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def server_ticks(pids):
    total = 0
    for p in pids:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(self, args, work):
        self.q = args.q
        self.before = args.before
        self.work = work
        self.rounds = args.rounds
        self.n = args.messages
        self.serial = 0
        cluster = os.path.join(ROOT, "scripts", "nats-cluster")
        self.cluster_dir = os.path.join(work, "c")
        self.urls = run([cluster, "start", self.cluster_dir, "3"]).stdout.strip()
        self.pids = [open(os.path.join(self.cluster_dir, f)).read().strip()
                     for f in sorted(os.listdir(self.cluster_dir)) if f.endswith(".pid")]
        self.floor = os.path.join(work, "nats_floor")
        flags = run(["pkg-config", "--cflags", "--libs", "libnats"]).stdout.split()
        run(["cc", "-O2", "-o", self.floor, os.path.join(HERE, "nats_floor.c")] + flags)
        self.server_url = self.urls[len("nats://"):].split("/")[0]
        self.server_url = ",".join("nats://" + h for h in self.server_url.split(","))

    def fresh(self, kind):
        """A new queue (or floor stream) name, so every round starts empty."""
        self.serial += 1
        return f"{kind}{self.serial}"

    def q_env(self, location):
        env = dict(os.environ, Q_FILE=location)
        env.pop("Q_NATS_COUNT_REQUESTS", None)
        return env

    def qbin(self, contender):
        return self.before if contender == "before" else self.q

    def location(self, contender):
        return self.file() if contender == "file" else self.nats()

    def nats(self):
        return self.urls + "/bench"

    def file(self):
        return os.path.join(self.work, "bench.q")

    # ---- one-shot send -------------------------------------------------
    def one_shot(self, contender, count):
        if contender == "floor":
            stream = self.fresh("F")
            run([self.floor, self.server_url, "setup", stream])
            cmd = [self.floor, self.server_url, "send", stream]
            env = None
        else:
            queue = self.fresh("s")
            env = self.q_env(self.location(contender))
            run([self.q, "create", queue], env=env)
            cmd = [self.qbin(contender), "send", queue, "send a welcome email to sign-up 4182"]
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    # ---- bulk send ------------------------------------------------------
    def bulk(self, contender, count):
        lines = "".join(f"message {i}\n" for i in range(count))
        if contender == "floor":
            stream = self.fresh("F")
            run([self.floor, self.server_url, "setup", stream])
            t0 = time.perf_counter()
            run([self.floor, self.server_url, "bulk", stream, str(count)])
        else:
            queue = self.fresh("b")
            env = self.q_env(self.location(contender))
            run([self.q, "create", queue], env=env)
            t0 = time.perf_counter()
            run([self.qbin(contender), "send", queue, "--lines"], env=env, input=lines)
        return count / (time.perf_counter() - t0)

    # ---- drains ---------------------------------------------------------
    def filled(self, contender, count):
        """A queue (or floor stream) holding `count` messages: (name, env)."""
        if contender == "floor":
            stream = self.fresh("F")
            run([self.floor, self.server_url, "setup", stream])
            run([self.floor, self.server_url, "bulk", stream, str(count)])
            return stream, None
        queue = self.fresh("d")
        env = self.q_env(self.location(contender))
        run([self.q, "create", queue], env=env)
        run([self.q, "send", queue, "--lines"], env=env,
            input="".join(f"message {i}\n" for i in range(count)))
        return queue, env

    def loop_script(self, contender, name):
        if contender == "floor":
            return f'while "{self.floor}" "{self.server_url}" take {name} 10; do :; done'
        q = self.qbin(contender)
        return (f'while out=$("{q}" receive {name} -n 10 --json '
                f'--visibility-timeout 1m); do jq -r .receipt <<<"$out" | '
                f'"{q}" ack {name} >/dev/null; done')

    def process_drain(self, contender, count, consumers=1):
        name, env = self.filled(contender, count)
        script = self.loop_script(contender, name)
        t0 = time.perf_counter()
        cpu0 = server_ticks(self.pids)
        procs = [subprocess.Popen(["bash", "-c", script], env=env,
                                  stdout=subprocess.DEVNULL) for _ in range(consumers)]
        for p in procs:
            p.wait()
        wall = time.perf_counter() - t0
        self.check_drained(contender, name, env)
        return count / wall, (server_ticks(self.pids) - cpu0) / count * 1000

    def runner_drain(self, contender, count):
        name, env = self.filled(contender, count)
        cpu0 = server_ticks(self.pids)
        t0 = time.perf_counter()
        if contender == "floor":
            out = run([self.floor, self.server_url, "drain", name, "10"]).stdout
            rate = float(re.search(r"([0-9.]+)/s", out).group(1))
        else:
            run([self.qbin(contender), "work", name, "-j", "8", "--exit-when-empty", "--", "true"],
                env=env)
            rate = count / (time.perf_counter() - t0)
        self.check_drained(contender, name, env)
        return rate, (server_ticks(self.pids) - cpu0) / count * 1000

    def check_drained(self, contender, name, env):
        if contender == "floor":
            left = run([self.floor, self.server_url, "left", name]).stdout.strip()
            if left != "0":
                sys.exit(f"nats_speed: floor stream {name} was not drained: {left} left")
            return
        out = run([self.q, "stats", name, "--json"], env=env).stdout.replace(" ", "")
        if '"visible":0,"in_flight":0,"delayed":0' not in out:
            sys.exit(f"nats_speed: queue {name} was not drained: {out}")

    # ---- requests per command --------------------------------------------
    def requests(self, qbin=None):
        qbin = qbin or self.q
        env = dict(self.q_env(self.nats()), Q_NATS_COUNT_REQUESTS="1")
        queue = self.fresh("r")
        counts = {}

        def count(label, cmd, **kw):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
            m = re.search(r"q-nats: (\d+) messages sent", r.stderr)
            counts[label] = int(m.group(1)) if m else None
            return r.stdout

        run([self.q, "create", queue], env=self.q_env(self.nats()))
        count("send (one message)", [qbin, "send", queue, "hello"])
        count("send --lines (20 lines)", [qbin, "send", queue, "--lines"],
              input="".join(f"m{i}\n" for i in range(20)))
        out = count("receive -n 1", [qbin, "receive", queue, "--json"])
        count("ack of 1", [qbin, "ack", queue], input=re.search(r'"receipt":"([^"]+)"',
                                                                 out.replace(" ", "")).group(1))
        out = count("receive -n 10", [qbin, "receive", queue, "-n", "10", "--json"])
        receipts = "\n".join(re.findall(r'"receipt":\s*"([^"]+)"', out))
        count("ack of 10", [qbin, "ack", queue], input=receipts + "\n")
        return counts


ROWS = ("one-shot", "bulk", "process-drain", "runner-drain", "consumers", "requests")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--q", default=os.path.join(ROOT, "build", "q"))
    ap.add_argument("--before", help="another q binary to run beside (an older build)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="1 round, 500 messages")
    ap.add_argument("--rows", default=",".join(ROWS),
                    help="the rows to run, comma-separated, of: " + ", ".join(ROWS))
    ap.add_argument("--one-shot-count", type=int, default=30,
                    help="one-shot sends per contender and round (default 30)")
    args = ap.parse_args()
    rows_wanted = set(args.rows.split(","))
    if not rows_wanted <= set(ROWS):
        ap.error(f"--rows: unknown {', '.join(sorted(rows_wanted - set(ROWS)))}")
    if args.quick:
        args.rounds, args.messages = 1, 500
    if not shutil.which("nats-server"):
        print("nats_speed: nats-server not installed (apt-get install nats-server)")
        return 77
    work = tempfile.mkdtemp(prefix="q-nats-speed.")
    cluster = os.path.join(ROOT, "scripts", "nats-cluster")
    b = None
    try:
        load0 = os.getloadavg()[0]
        b = Bench(args, work)
        n = args.messages
        rows = {}

        def add(label, contender, value):
            rows.setdefault(label, {}).setdefault(contender, []).append(value)

        q_nats = ("nats", "before") if args.before else ("nats",)
        for r in range(args.rounds):
            if "one-shot" in rows_wanted:
                for c in q_nats + ("floor", "file"):
                    add("one-shot send (ms per process)", c, b.one_shot(c, args.one_shot_count))
            if "bulk" in rows_wanted:
                for c in q_nats + ("floor", "file"):
                    add("bulk send (messages/s)", c, b.bulk(c, 10 * n))
            if "process-drain" in rows_wanted:
                for c in q_nats + ("floor",):
                    rate, cpu = b.process_drain(c, n // 2)
                    add("process drain, 10 a batch (messages/s)", c, rate)
                    add("servers' CPU per message, process drain (ms)", c, cpu)
            if "runner-drain" in rows_wanted:
                for c in q_nats + ("floor", "file"):
                    rate, cpu = b.runner_drain(c, n)
                    add("runner drain: q work -j 8 / floor Fetch(10)+AckSync (messages/s)", c,
                        rate)
                    if c != "file":
                        add("servers' CPU per message, runner drain (ms)", c, cpu)
            if "consumers" in rows_wanted:
                for consumers in (1, 2, 4, 8):
                    rate, _ = b.process_drain("nats", n // 2, consumers)
                    add(f"process drain on NATS, {consumers} consumers (messages/s)", "nats",
                        rate)
        counts = b.requests() if "requests" in rows_wanted else {}
        counts_before = b.requests(args.before) if "requests" in rows_wanted and args.before \
            else {}
        load1 = os.getloadavg()[0]
        print(f"load average {load0:.2f} before, {load1:.2f} after; {args.rounds} rounds, "
              f"{n} messages a drain\n")
        cols = [("nats", "q on NATS")] + ([("before", "q before")] if args.before else []) + [
            ("floor", "JetStream floor"), ("file", "q on a file")]
        ratios = [("floor", "q/floor"), ("file", "NATS/file")] + (
            [("before", "q/before")] if args.before else [])
        print("| work | " + " | ".join(t for _, t in cols) + " | " +
              " | ".join(t for _, t in ratios) + " |")
        print("|---" * (1 + len(cols) + len(ratios)) + "|")
        for label, by in rows.items():
            med = {c: statistics.median(v) for c, v in by.items()}
            fmt = (lambda v: f"{v:.2f}") if "ms" in label else (lambda v: f"{v:,.0f}")
            cells = [fmt(med[c]) if c in med else "" for c, _ in cols]
            cells += [f"{med['nats'] / med[c]:.2f}x" if c in med and med[c] else ""
                      for c, _ in ratios]
            print(f"| {label} | " + " | ".join(cells) + " |")
        if counts:
            print("\nmessages sent to the cluster, per command (q on NATS"
                  + (", q before" if counts_before else "") + "):")
            for label, c in counts.items():
                print(f"  {label}: {c}" + (f" (before: {counts_before.get(label)})"
                                           if counts_before else ""))
        return 0
    finally:
        if b:
            subprocess.run([cluster, "stop", b.cluster_dir], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
