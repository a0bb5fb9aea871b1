#!/usr/bin/env python3
"""The q benchmark suite. Run it through bench/run, which installs what it needs,
builds q and the floor program, then starts this.

Every comparison is measured side by side in one run: contenders alternate run
by run (A, B, C, A, B, C, with the starting contender rotating each round), and
results are medians and ratios of medians, because absolute times on a shared
machine drift.
"""
import argparse
import csv
import datetime
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)

# Sizes per mode. "depth_big" is the deep queue of scenarios 5 and 9.
MODES = {
    "smoke": dict(reps=3, warmup=1, bulk=2_000, bulk_reps=3, batch=1000, depth_small=100,
                  depth_big=5_000, depth_reps=3, wake_reps=3, contention_secs=1,
                  contention_procs=2, contention_rounds=1, plots=False),
    "quick": dict(reps=40, warmup=3, bulk=200_000, bulk_reps=3, batch=1000, depth_small=1_000,
                  depth_big=1_000_000, depth_reps=30, wake_reps=20, contention_secs=10,
                  contention_procs=8, contention_rounds=1, plots=True),
    "full": dict(reps=150, warmup=5, bulk=1_000_000, bulk_reps=5, batch=1000,
                 depth_small=1_000, depth_big=10_000_000, depth_reps=100, wake_reps=60,
                 contention_secs=30, contention_procs=8, contention_rounds=2, plots=True),
}
FILL_CHUNK = 1_000_000  # the deep queue is filled by `q send --lines` in chunks of this
BODY_LEN = 100
VISIBILITY_MS = 30_000


def log(msg):
    stamp = datetime.datetime.now().strftime("%H:%M:%S")
    print(f"[bench {stamp}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# ---- processes ---------------------------------------------------------------------

class Result:
    __slots__ = ("ns", "rc", "minflt", "out")

    def __init__(self, ns, rc, minflt, out):
        self.ns, self.rc, self.minflt, self.out = ns, rc, minflt, out

    @property
    def ms(self):
        return self.ns / 1e6


class Procs:
    """Spawns commands without a shell and times them from spawn to exit
    (posix_spawn + wait4, as hyperfine -N does), with peak RSS from rusage."""

    def __init__(self, work):
        self.work = work
        self.scratch = os.path.join(work, "stdout")
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C",
                    "HOME": os.environ.get("HOME", work)}
        self._which = {}

    def which(self, name):
        if name not in self._which:
            path = name if "/" in name else shutil.which(name)
            if not path:
                raise BenchError(f"{name}: not found on PATH")
            self._which[name] = path
        return self._which[name]

    def spawn(self, argv, stdin=None, stdout=None, env=None):
        actions = [(os.POSIX_SPAWN_OPEN, 0, stdin or os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, stdout or os.devnull,
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        return os.posix_spawn(self.which(argv[0]), list(argv), full_env, file_actions=actions)

    def run(self, argv, stdin=None, env=None, capture=False, ok=(0,)):
        """Runs argv to completion; returns a Result with its wall time."""
        out = self.scratch if capture else None
        t0 = time.perf_counter_ns()
        pid = self.spawn(argv, stdin=stdin, stdout=out, env=env)
        _, status, ru = os.wait4(pid, 0)
        t1 = time.perf_counter_ns()
        rc = os.waitstatus_to_exitcode(status)
        text = None
        if capture:
            with open(out, "r", errors="replace") as f:
                text = f.read()
        if ok is not None and rc not in ok:
            raise BenchError(f"{' '.join(argv)[:200]}: exit {rc}")
        return Result(t1 - t0, rc, ru.ru_minflt, text)

    def check_output(self, argv, env=None, stdin=None):
        return self.run(argv, env=env, stdin=stdin, capture=True).out

    def peak_rss(self, argv, env=None, stdin=None, capture=False, ok=(0,)):
        """Runs argv under GNU time and returns (Result, peak RSS in KiB). wait4's
        ru_maxrss is no use here: a child spawned with vfork semantics inherits the
        parent's high-water mark, so the small fork+exec of time(1) measures instead."""
        out = os.path.join(self.work, "rss")
        r = self.run(["/usr/bin/time", "-f", "%M %R", "-o", out] + list(argv), env=env,
                     stdin=stdin, capture=capture, ok=ok)
        with open(out) as f:
            kb, faults = f.read().split()[-2:]
        self.last_faults = int(faults)
        return r, int(kb)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def quartiles(xs):
    if len(xs) < 2:
        v = xs[0] if xs else float("nan")
        return v, v
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def paired(a, b):
    """Median of the per-round ratios a/b and differences a-b (the rounds alternate, so
    round i of a and of b ran moments apart)."""
    n = min(len(a), len(b))
    return (median([a[i] / b[i] for i in range(n)]), median([a[i] - b[i] for i in range(n)]))


def rotated(items, r):
    k = r % len(items)
    return items[k:] + items[:k]


def file_bytes(*paths):
    """(apparent size, allocated bytes) summed over paths that exist."""
    size = alloc = 0
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in files:
                    st = os.stat(os.path.join(root, f))
                    size += st.st_size
                    alloc += st.st_blocks * 512
        elif os.path.exists(p):
            st = os.stat(p)
            size += st.st_size
            alloc += st.st_blocks * 512
    return size, alloc


def lmdb_txnid(path):
    """The last committed transaction id of an LMDB file, from its two meta pages
    (the page size sits in the free database's md_pad, the txnid at 144 bytes)."""
    import struct
    with open(path, "rb") as f:
        head = f.read(4096)
        psize = struct.unpack_from("<I", head, 40)[0]
        f.seek(0)
        metas = f.read(2 * psize)
    return max(struct.unpack_from("<Q", metas, 144)[0],
               struct.unpack_from("<Q", metas, psize + 144)[0])


def lmdb_last_freed(path):
    """(pages freed by the file's last commit, page size), from mdb_stat -ff; None
    without lmdb-utils."""
    import re
    if not shutil.which("mdb_stat"):
        return None
    out = subprocess.run(["mdb_stat", "-nff", path], capture_output=True, text=True).stdout
    recs = re.findall(r"Transaction (\d+), (\d+) pages", out)
    psize = re.search(r"Page size: (\d+)", subprocess.run(
        ["mdb_stat", "-ne", path], capture_output=True, text=True).stdout)
    if not psize:
        return None
    last = max(recs, key=lambda r: int(r[0])) if recs else ("0", "0")
    return int(last[1]), int(psize.group(1))


def body_for(i):
    s = f"msg{i:09d}-"
    return (s + "abcdefghijklmnopqrstuvwxyz0123456789" * 3)[:BODY_LEN]


# ---- the contenders ------------------------------------------------------------------

class QQueue:
    name = "q"

    def __init__(self, procs, qbin, path, queue="bench"):
        self.p, self.qbin, self.path, self.queue = procs, qbin, path, queue
        self.env = {"Q_FILE": path}

    def create(self):
        for f in (self.path, self.path + "-lock"):
            if os.path.exists(f):
                os.unlink(f)
        self.p.run([self.qbin, "create", self.queue, "--max-receives", "0"], env=self.env)

    def send_one(self, body):
        return self.p.run([self.qbin, "send", self.queue, body], env=self.env)

    def send_lines(self, lines_file):
        return self.p.run([self.qbin, "send", self.queue, "--lines", "-q"], env=self.env,
                          stdin=lines_file)

    def receive(self, n=1):
        """Returns (Result, [(receipt, body)])."""
        r = self.p.run([self.qbin, "receive", self.queue, "-n", str(n)], env=self.env,
                       capture=True, ok=(0, 1))
        got = []
        if r.rc == 0:
            for line in r.out.splitlines():
                parts = line.split("\t", 3)
                got.append((parts[1], parts[3]))
        return r, got

    def ack(self, receipts):
        if len(receipts) <= 8:
            return self.p.run([self.qbin, "ack", self.queue] + receipts, env=self.env)
        stdin = os.path.join(self.p.work, "receipts")
        with open(stdin, "w") as f:
            f.write("\n".join(receipts) + "\n")
        return self.p.run([self.qbin, "ack", self.queue], env=self.env, stdin=stdin)

    def depth(self):
        import json
        out = self.p.check_output([self.qbin, "stats", self.queue, "--json"], env=self.env)
        s = json.loads(out.splitlines()[0])
        return int(s.get("visible", 0)) + int(s.get("in_flight", 0)) + int(s.get("delayed", 0))

    def files(self):
        return [self.path]


NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"


class SqliteQueue:
    """A queue the way SQLite-based queues (goqite, litequeue, ...) do it: one
    table with visible-at and receive-count columns and an index, WAL mode, and
    synchronous=FULL so that a commit is durable like q's."""
    name = "sqlite3"
    SCHEMA = ("PRAGMA journal_mode=WAL;"
              "CREATE TABLE messages(id INTEGER PRIMARY KEY, queue TEXT NOT NULL, "
              "body BLOB NOT NULL, visible_at INTEGER NOT NULL, "
              "receive_count INTEGER NOT NULL DEFAULT 0, receipt TEXT);"
              "CREATE INDEX messages_ready ON messages(queue, visible_at, id);")

    def __init__(self, procs, path):
        self.p, self.path = procs, path

    def argv(self, *sql):
        return ["sqlite3", "-batch", "-init", "/dev/null", "-cmd", "PRAGMA synchronous=FULL",
                "-cmd", ".timeout 10000", self.path] + list(sql)

    def create(self):
        for f in self.files():
            if os.path.exists(f):
                os.unlink(f)
        out = self.p.check_output(self.argv(self.SCHEMA))
        if out.strip() != "wal":
            raise BenchError(f"sqlite3: journal_mode WAL not set: {out!r}")

    def send_one(self, body):
        return self.p.run(self.argv(
            f"INSERT INTO messages(queue, body, visible_at) VALUES('bench', '{body}', {NOW_MS})"))

    @staticmethod
    def write_bulk_sql(lines_file, sql_file):
        """One big transaction of multi-row INSERTs (1000 rows a statement)."""
        with open(lines_file) as src, open(sql_file, "w") as out:
            out.write("BEGIN;\n")
            rows = []
            for line in src:
                rows.append(f"('bench','{line.rstrip(chr(10))}',0)")
                if len(rows) == 1000:
                    out.write("INSERT INTO messages(queue, body, visible_at) VALUES "
                              + ",".join(rows) + ";\n")
                    rows = []
            if rows:
                out.write("INSERT INTO messages(queue, body, visible_at) VALUES "
                          + ",".join(rows) + ";\n")
            out.write("COMMIT;\n")

    def send_bulk(self, sql_file):
        return self.p.run(self.argv(), stdin=sql_file)

    def receive(self, n=1):
        sql = (f"UPDATE messages SET visible_at = {NOW_MS} + {VISIBILITY_MS}, "
               "receive_count = receive_count + 1, receipt = lower(hex(randomblob(8))) "
               "WHERE id IN (SELECT id FROM messages WHERE queue = 'bench' AND "
               f"visible_at <= {NOW_MS} ORDER BY visible_at, id LIMIT {n}) "
               "RETURNING id, receipt, receive_count, body")
        r = self.p.run(self.argv(sql), capture=True)
        got = []
        for line in r.out.splitlines():
            parts = line.split("|", 3)
            got.append((f"{parts[0]}|{parts[1]}", parts[3]))
        return r, got

    def ack(self, receipts):
        stmts = []
        for rc in receipts:
            mid, nonce = rc.split("|")
            stmts.append(f"DELETE FROM messages WHERE id = {int(mid)} AND receipt = '{nonce}';")
        if len(stmts) == 1:
            return self.p.run(self.argv(stmts[0]))
        stdin = os.path.join(self.p.work, "ack.sql")
        with open(stdin, "w") as f:
            f.write("BEGIN;\n" + "\n".join(stmts) + "\nCOMMIT;\n")
        return self.p.run(self.argv(), stdin=stdin)

    def files(self):
        return [self.path, self.path + "-wal", self.path + "-shm"]


ACK_LUA = ("local ids = {unpack(ARGV, 2)} "
           "redis.call('XACK', KEYS[1], ARGV[1], unpack(ids)) "
           "return redis.call('XDEL', KEYS[1], unpack(ids))")


class RedisServer:
    """A private redis-server on a free loopback port, durable like q
    (appendonly, appendfsync always), in its own directory; stopped at exit."""

    def __init__(self, work):
        self.dir = os.path.join(work, "redis")
        self.proc = None
        self.port = None

    def start(self):
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        for _ in range(5):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            log_file = open(os.path.join(self.dir, "redis.log"), "a")
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", self.dir,
                 "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                 "--auto-aof-rewrite-percentage", "0", "--daemonize", "no",
                 "--protected-mode", "yes", "--unixsocket", ""],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent)
            for _ in range(200):
                if self.proc.poll() is not None:
                    break
                # INFO, not PING: the server answering must be ours (its pid), not
                # one another run started on the port that was free a moment ago.
                r = subprocess.run(["redis-cli", "-p", str(port), "INFO", "server"],
                                   capture_output=True, text=True)
                if f"process_id:{self.proc.pid}\r" in r.stdout or \
                        f"process_id:{self.proc.pid}\n" in r.stdout:
                    self.port = port
                    return
                time.sleep(0.02)
            self.stop()
        raise BenchError(f"redis-server did not start; see {self.dir}/redis.log")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self):
        self.stop()
        self.start()


def _die_with_parent():
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    os.setpgid(0, 0)


class RedisQueue:
    """The Redis way to get at-least-once delivery with acks: a stream with a
    consumer group (XADD, XREADGROUP, XACK + XDEL in one Lua call)."""
    name = "redis"

    def __init__(self, procs, server):
        self.p, self.server = procs, server

    def cli(self, *args):
        return ["redis-cli", "-p", str(self.server.port)] + list(args)

    def create(self):
        self.p.run(self.cli("DEL", "q"), capture=True)
        out = self.p.check_output(self.cli("XGROUP", "CREATE", "q", "g", "0", "MKSTREAM"))
        if out.strip() != "OK":
            raise BenchError(f"redis XGROUP CREATE: {out!r}")

    def send_one(self, body):
        return self.p.run(self.cli("XADD", "q", "*", "b", body), capture=True)

    @staticmethod
    def write_bulk_resp(lines_file, resp_file):
        def bulk(s):
            b = s.encode()
            return b"$%d\r\n%s\r\n" % (len(b), b)
        head = b"*5\r\n" + bulk("XADD") + bulk("q") + bulk("*") + bulk("b")
        with open(lines_file) as src, open(resp_file, "wb") as out:
            for line in src:
                out.write(head + bulk(line.rstrip("\n")))

    def send_bulk(self, resp_file):
        r = self.p.run(self.cli("--pipe"), stdin=resp_file, capture=True)
        if "errors: 0" not in r.out:
            raise BenchError(f"redis-cli --pipe: {r.out.strip()}")
        return r

    def receive(self, n=1):
        r = self.p.run(self.cli("XREADGROUP", "GROUP", "g", "c", "COUNT", str(n), "STREAMS", "q",
                                ">"), capture=True)
        lines = r.out.splitlines()
        got = []
        # Flat output: stream name, then id, field, value per entry.
        for i in range(1, len(lines) - 2, 3):
            got.append((lines[i], lines[i + 2]))
        return r, got

    def ack(self, receipts):
        r = self.p.run(self.cli("EVAL", ACK_LUA, "1", "q", "g", *receipts), capture=True)
        if r.out.strip() != str(len(receipts)):
            raise BenchError(f"redis ack: {r.out.strip()!r}, expected {len(receipts)}")
        return r

    def files(self):
        return [self.server.dir]


# ---- the suite ----------------------------------------------------------------------

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

    # -- scenario 1: one-shot enqueue --

    def s1_enqueue(self):
        S = "1"
        q = QQueue(self.p, self.q, os.path.join(self.work, "s1.q"))
        q.create()
        sq = SqliteQueue(self.p, os.path.join(self.work, "s1.sqlite"))
        sq.create()
        rq = RedisQueue(self.p, self.redis)
        rq.create()
        floor_file = os.path.join(self.work, "s1.floor")
        twin_file = os.path.join(self.work, "s1.twin")
        nqdir = os.path.join(self.work, "nq")
        os.makedirs(nqdir, exist_ok=True)
        body = body_for(0)
        nq_env = {"NQDIR": nqdir}
        twin = []

        def run_twin():
            r = self.p.run([self.floor, twin_file, "-n", "5"], capture=True)
            twin.append(int(r.out.strip()) / 1e6)
            return r

        def run_nq():
            r = self.p.run(["nq", "-q", "-c", "true", body], env=nq_env)
            # Let the job finish (untimed) so it does not run beside the next contender.
            self.p.run(["nq", "-w"], env=nq_env)
            return r

        contenders = [
            ("floor", lambda: self.p.run([self.floor, floor_file])),
            ("q", lambda: q.send_one(body)),
            ("sqlite3", lambda: sq.send_one(body)),
            ("redis", lambda: rq.send_one(body)),
            ("nq", run_nq),
            ("floor loop twin", run_twin),
            ("q --version", lambda: self.p.run([self.q, "--version"])),
        ]
        times = self.alternate(contenders)
        times["floor loop twin (per commit)"] = twin[self.cfg["warmup"]:]
        unit = "ms"
        for name, xs in times.items():
            metric = {"floor loop twin": "wall of a 5-commit process",
                      "floor loop twin (per commit)": "one commit inside a process"}.get(
                          name, "wall per process")
            self.record(S, name, metric, xs, unit)
        rows = {}
        for name in ["floor", "q", "sqlite3", "redis", "nq", "floor loop twin (per commit)",
                     "q --version"]:
            rows[name] = self.summarize(S, name, "one-shot enqueue" if name in
                                        ("floor", "q", "sqlite3", "redis", "nq") else "reference",
                                        times[name], unit, ratio_to="floor")
        fl = rows["floor"]["median"]
        for row in rows.values():
            row["ratio"] = row["median"] / fl
        qm = rows["q"]["median"]
        cm = rows["floor loop twin (per commit)"]["median"]
        pr, pd = paired(times["q"], times["floor"])
        self.target(S, "q send <= 1.3x floor",
                    f"{qm / fl:.2f}x ({qm:.2f} vs {fl:.2f} ms); per round: {pr:.2f}x, "
                    f"{pd:+.2f} ms; one durable commit inside a process: {cm:.2f} ms",
                    qm / fl <= 1.3)
        sm, rm = rows["sqlite3"]["median"], rows["redis"]["median"]
        self.target(S, "q send faster than sqlite3 and redis-cli",
                    f"q {qm:.2f} ms, sqlite3 {sm:.2f} ms ({qm / sm:.2f}x), redis-cli {rm:.2f} ms "
                    f"({qm / rm:.2f}x)", qm < sm and qm < rm)
        self.note(S, "nq is not durable (no fsync) and forks the job; it is shown for the cost of "
                     "an enqueue only. `floor loop twin (per commit)` is one durable LMDB commit "
                     "inside a running process: the part of the floor that is not process "
                     "start-up. `q --version` is a q process that opens no queue file (it builds "
                     "the whole command tree, so it need not be cheaper than a send). \"Per "
                     "round\" in the targets is the median of the ratios and differences of runs "
                     "made moments apart, a check on the ratio of medians.")
        self.s1_rows = rows

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

    # -- scenario 2: one-shot receive + ack --

    def s2_receive_ack(self):
        S = "2"
        need = self.cfg["reps"] + self.cfg["warmup"] + 10
        fill = os.path.join(self.work, "s2.lines")
        with open(fill, "w") as f:
            for i in range(need):
                f.write(body_for(i) + "\n")
        q = QQueue(self.p, self.q, os.path.join(self.work, "s2.q"))
        q.create()
        q.send_lines(fill)
        sq = SqliteQueue(self.p, os.path.join(self.work, "s2.sqlite"))
        sq.create()
        sql = os.path.join(self.work, "s2.sql")
        SqliteQueue.write_bulk_sql(fill, sql)
        sq.send_bulk(sql)
        rq = RedisQueue(self.p, self.redis)
        rq.create()
        resp = os.path.join(self.work, "s2.resp")
        RedisQueue.write_bulk_resp(fill, resp)
        rq.send_bulk(resp)
        floor_file = os.path.join(self.work, "s2.floor")
        parts = {}

        def pair(name, queue):
            def fn():
                r1, got = queue.receive(1)
                if len(got) != 1:
                    raise BenchError(f"{name}: receive returned {len(got)} messages")
                r2 = queue.ack([got[0][0]])
                parts.setdefault(name, []).append((r1.ms, r2.ms))
                return (r1.ms + r2.ms)
            return fn

        def floor_pair():
            a = self.p.run([self.floor, floor_file])
            b = self.p.run([self.floor, floor_file])
            return a.ms + b.ms

        contenders = [("2x floor", floor_pair), ("q", pair("q", q)),
                      ("sqlite3", pair("sqlite3", sq)), ("redis", pair("redis", rq))]
        times = self.alternate(contenders)
        rows = {}
        for name, xs in times.items():
            self.record(S, name, "receive+ack pair", xs, "ms")
            rows[name] = self.summarize(S, name, "one-shot receive + ack", xs, "ms",
                                        ratio_to="2x floor")
        w = self.cfg["warmup"]
        for name in ("q", "sqlite3", "redis"):
            rec = [a for a, _ in parts[name][w:]]
            ack = [b for _, b in parts[name][w:]]
            self.record(S, name, "receive process", rec, "ms")
            self.record(S, name, "ack process", ack, "ms")
            self.note(S, f"{name}: receive {median(rec):.2f} ms + ack {median(ack):.2f} ms "
                         "(medians).")
        fl = rows["2x floor"]["median"]
        for row in rows.values():
            row["ratio"] = row["median"] / fl
        qm = rows["q"]["median"]
        pr, pd = paired(times["q"], times["2x floor"])
        self.target(S, "q receive + q ack <= 1.3x two floor runs",
                    f"{qm / fl:.2f}x ({qm:.2f} vs {fl:.2f} ms); per round: {pr:.2f}x, "
                    f"{pd:+.2f} ms", qm / fl <= 1.3)
        self.s2_rows = rows

    # -- scenarios 3, 4, 8: bulk send, batched drain, space reuse --

    def s3_bulk(self):
        N, B = self.cfg["bulk"], self.cfg["batch"]
        reps = self.cfg["bulk_reps"]
        sql = os.path.join(self.work, "bulk.sql")
        resp = os.path.join(self.work, "bulk.resp")
        SqliteQueue.write_bulk_sql(self.lines, sql)
        RedisQueue.write_bulk_resp(self.lines, resp)
        q = QQueue(self.p, self.q, os.path.join(self.work, "bulk.q"))
        q.create()
        sq = SqliteQueue(self.p, os.path.join(self.work, "bulk.sqlite"))
        sq.create()
        self.redis.restart()
        rq = RedisQueue(self.p, self.redis)
        rq.create()
        floor_file = os.path.join(self.work, "bulk.floor")
        send = {k: [] for k in ("floor", "q", "sqlite3", "redis")}
        drain = {k: [] for k in ("q", "sqlite3", "redis")}
        sizes = {k: [] for k in ("q", "sqlite3", "redis", "floor")}
        batches = {k: [] for k in ("q", "sqlite3", "redis")}

        def drain_all(name, queue):
            """Batched receive + ack until empty; checks every message came back once."""
            t0 = time.perf_counter_ns()
            seen = 0
            per_batch = []
            while True:
                r1, got = queue.receive(B)
                if not got:
                    break
                r2 = queue.ack([rc for rc, _ in got])
                per_batch.append(r1.ms + r2.ms)
                seen += len(got)
            t1 = time.perf_counter_ns()
            if seen != N:
                raise BenchError(f"{name}: drained {seen} messages, sent {N}")
            batches[name].extend(per_batch)
            return (t1 - t0) / 1e9

        floor_pairs = []
        self.q_last_freed = []
        pair_file = os.path.join(self.work, "bulk-pair.floor")

        def sample_floor_pairs(k=10):
            for _ in range(k):
                floor_pairs.append(self.p.run([self.floor, pair_file]).ms +
                                   self.p.run([self.floor, pair_file]).ms)

        def run_q():
            send["q"].append(N / (q.send_lines(self.lines).ns / 1e9))
            sizes["q"].append(("sent",) + file_bytes(*q.files()))
            sample_floor_pairs()
            drain["q"].append(N / drain_all("q", q))
            sample_floor_pairs()
            sizes["q"].append(("drained",) + file_bytes(*q.files()))
            self.q_last_freed.append(lmdb_last_freed(q.path))

        def run_sqlite():
            send["sqlite3"].append(N / (sq.send_bulk(sql).ns / 1e9))
            sizes["sqlite3"].append(("sent",) + file_bytes(*sq.files()))
            drain["sqlite3"].append(N / drain_all("sqlite3", sq))
            sizes["sqlite3"].append(("drained",) + file_bytes(*sq.files()))

        def run_redis():
            send["redis"].append(N / (rq.send_bulk(resp).ns / 1e9))
            sizes["redis"].append(("sent",) + file_bytes(*rq.files()))
            drain["redis"].append(N / drain_all("redis", rq))
            sizes["redis"].append(("drained",) + file_bytes(*rq.files()))

        def run_floor():
            for f in (floor_file, floor_file + "-lock"):
                if os.path.exists(f):
                    os.unlink(f)
            send["floor"].append(N / (self.p.run([self.floor, floor_file, "--lines"],
                                                 stdin=self.lines).ns / 1e9))
            sizes["floor"].append(("sent",) + file_bytes(floor_file))

        contenders = [("floor", run_floor), ("q", run_q), ("sqlite3", run_sqlite),
                      ("redis", run_redis)]
        for r in range(reps):
            log(f"bulk round {r + 1}/{reps}: {N} messages each")
            for _, fn in rotated(contenders, r):
                fn()

        unit = "msg/s"
        rows3 = {}
        for name, xs in send.items():
            self.record("3", name, "bulk send", xs, unit)
            rows3[name] = self.summarize("3", name, f"bulk send of {N:,} lines, durable", xs,
                                         unit, ratio_to="q")
        for row in rows3.values():
            row["ratio"] = row["median"] / rows3["q"]["median"]
        rows4 = {}
        for name, xs in drain.items():
            self.record("4", name, "drain", xs, unit)
            self.record("4", name, f"receive -n {B} + ack, per batch", batches[name], "ms")
            rows4[name] = self.summarize("4", name, f"drain, batches of {B}", xs, unit,
                                         ratio_to="q")
        for row in rows4.values():
            row["ratio"] = row["median"] / rows4["q"]["median"]
        qs = rows3["q"]["median"]
        self.target("3", f"bulk q send --lines of {N:,} durable >= 300,000 msg/s",
                    f"{qs:,.0f} msg/s", qs >= 300_000)
        qd = rows4["q"]["median"]
        # The most any receive + ack pair of processes can do: two floor runs a batch.
        self.record("4", "2x floor", "pair of one-shot floor runs", floor_pairs, "ms")
        fp = self.summarize("4", "2x floor", "one-shot pair (bound: a batch needs two processes)",
                            floor_pairs, "ms")
        qb = self.summarize("4", "q", f"receive -n {B} + ack, per batch", batches["q"], "ms",
                            ratio_to="2x floor")
        qb["ratio"] = qb["median"] / fp["median"]
        bound = B / (fp["median"] / 1e3)
        fig = (f"{qd:,.0f} msg/s; a batch takes {qb['median']:.2f} ms, {qb['ratio']:.2f}x two "
               f"floor processes ({fp['median']:.2f} ms), whose bound here is {bound:,.0f} msg/s")
        self.target("4", f"drain of {N:,} through receive -n {B} + ack >= 100,000 msg/s", fig,
                    qd >= 100_000)
        if N < 1_000_000:
            self.note("3", f"This is a --{self.mode} run: {N:,} messages, not the 1,000,000 of "
                           "the full run.")
        self.note("3", f"Each round sends {N:,} lines of {BODY_LEN} bytes into the same store "
                       "(emptied by the drain of scenario 4), so round 1 grows the file and later "
                       "rounds reuse its freed pages. sqlite3: one transaction of multi-row "
                       "INSERTs (1,000 rows a statement) on stdin; redis: one XADD per message "
                       "through `redis-cli --pipe`; floor: `floor FILE --lines`, every line one "
                       "record in one durable LMDB transaction, on a fresh file each round.")
        self.note("4", f"Each drain loop: receive up to {B} (q receive -n {B}; sqlite3 UPDATE ... "
                       f"LIMIT {B} RETURNING; redis XREADGROUP COUNT {B}), then ack those "
                       "receipts in one process (q ack with receipts on stdin; sqlite3 one "
                       "transaction of DELETEs; redis one EVAL of XACK + XDEL), until empty. "
                       "Every message is counted back.")
        self.s3_rows, self.s4_rows = rows3, rows4
        self.s8_space(sizes, N)

    def s8_space(self, sizes, N):
        S = "8"
        for name, entries in sizes.items():
            for i, (stage, size, alloc) in enumerate(entries):
                self.raw.append((S, name, f"file bytes after {stage}", i // (2 if name != "floor"
                                                                            else 1) + 1,
                                 size, "bytes"))
                self.raw.append((S, name, f"allocated bytes after {stage}",
                                 i // (2 if name != "floor" else 1) + 1, alloc, "bytes"))
        self.space = sizes
        qs = sizes["q"]
        sent = [s for stage, s, _ in qs if stage == "sent"]
        drained = [s for stage, s, _ in qs if stage == "drained"]
        last = max(sent[1:] + drained[1:]) if len(sent) > 1 else None
        self.summarize(S, "q", "file bytes per message (after round 1 send)", [sent[0] / N],
                       "bytes")
        for name in ("sqlite3", "redis", "floor"):
            s = [x for stage, x, _ in sizes[name] if stage == "sent"]
            self.summarize(S, name, "store bytes per message (after round 1 send)", [s[0] / N],
                           "bytes")
        if last is not None:
            r1 = max(sent[0], drained[0])
            r2 = max(sent[1], drained[1])
            fig = (f"after round 1: {r1:,} B ({r1 / N:.0f} B/message); largest later: {last:,} B "
                   f"({(last - r1) / r1 * 100:+.2f}%)")
            if last > r1:
                fig += f", of which {last - r2:+,} B after round 2"
                freed = [f for f in self.q_last_freed if f]
                if freed:
                    pages = max(p for p, _ in freed)
                    psize = freed[0][1]
                    fig += (f"; LMDB cannot reuse the pages freed by the commit just before a "
                            f"round (up to {pages} pages = {pages * psize:,} B here), so the "
                            f"file grows once by at most that and then stays flat")
            self.target(S, f"{len(sent)} rounds of {N:,} sent + drained: file no larger than "
                           "after round 1", fig, last <= r1)
        self.note(S, "Sizes are the files' apparent sizes (st_size); for sqlite3 the database "
                     "plus -wal and -shm; for redis the append-only files (automatic AOF rewrite "
                     "is off, so it only grows; a rewrite would shrink it).")

    # -- scenarios 5 and 9: depth --

    def s5_depth(self):
        small_n, big_n = self.cfg["depth_small"], self.cfg["depth_big"]
        reps = self.cfg["depth_reps"]
        small = QQueue(self.p, self.q, os.path.join(self.work, "depth-small.q"))
        big = QQueue(self.p, self.q, os.path.join(self.work, "depth-big.q"))
        chunk = os.path.join(self.work, "depth.lines")
        n_chunk = min(FILL_CHUNK, big_n)
        with open(chunk, "w") as f:
            for i in range(n_chunk):
                f.write(body_for(i) + "\n")
        small_lines = os.path.join(self.work, "depth-small.lines")
        with open(small_lines, "w") as f:
            for i in range(small_n):
                f.write(body_for(i) + "\n")
        small.create()
        small.send_lines(small_lines)
        big.create()
        t0 = time.perf_counter()
        done = 0
        while done < big_n:
            part = chunk
            if big_n - done < n_chunk:
                part = os.path.join(self.work, "depth-last.lines")
                with open(part, "w") as f:
                    for i in range(big_n - done):
                        f.write(body_for(i) + "\n")
            big.send_lines(part)
            done += min(n_chunk, big_n - done)
            log(f"deep queue: {done:,}/{big_n:,} messages")
        fill_secs = time.perf_counter() - t0
        big_size = file_bytes(*big.files())[0]
        body = body_for(7)
        rss = {("small", "send"): [], ("small", "receive"): [], ("small", "ack"): [],
               ("big", "send"): [], ("big", "receive"): [], ("big", "ack"): [],
               ("-", "floor"): []}
        floor_file = os.path.join(self.work, "depth.floor")
        sends = {"small": [], "big": []}
        faults = {"small": [], "big": []}
        send_faults = {"small": [], "big": []}

        def pair(label, queue):
            def fn():
                r1, got = queue.receive(1)
                if len(got) != 1:
                    raise BenchError(f"depth {label}: receive returned {len(got)}")
                r2 = queue.ack([got[0][0]])
                # Put one back (timed apart) so the depth stays where it is.
                r3 = queue.send_one(body)
                sends[label].append(r3.ms)
                faults[label].append(r1.minflt + r2.minflt)
                # Peak RSS of the same three commands, under GNU time.
                rr, kb = self.p.peak_rss([self.q, "receive", queue.queue], env=queue.env,
                                         capture=True)
                rss[(label, "receive")].append(kb)
                _, kb = self.p.peak_rss([self.q, "ack", queue.queue, rr.out.split("\t")[1]],
                                        env=queue.env)
                rss[(label, "ack")].append(kb)
                _, kb = self.p.peak_rss([self.q, "send", queue.queue, body], env=queue.env)
                rss[(label, "send")].append(kb)
                send_faults[label].append(self.p.last_faults)
                if label == "small":
                    _, kb = self.p.peak_rss([self.floor, floor_file])
                    rss[("-", "floor")].append(kb)
                return r1.ms + r2.ms
            return fn

        times = self.alternate([("small", pair("small", small)), ("big", pair("big", big))],
                               reps=reps)
        lab = {"small": f"{small_n:,} waiting", "big": f"{big_n:,} waiting",
               "-": "one record (reference)"}
        rows = {}
        for k in ("small", "big"):
            self.record("5", f"q, {lab[k]}", "receive+ack pair", times[k], "ms")
            self.record("5", f"q, {lab[k]}", "send", sends[k][self.cfg['warmup']:], "ms")
            rows[k] = self.summarize("5", f"q, {lab[k]}", "one-shot receive + ack", times[k],
                                     "ms", ratio_to=lab["small"])
            srow = self.summarize("5", f"q, {lab[k]}", "one-shot send",
                                  sends[k][self.cfg['warmup']:], "ms", ratio_to=lab["small"])
            rows[k + "-send"] = srow
        for k in ("small", "big"):
            xs = faults[k][self.cfg['warmup']:]
            self.record("5", f"q, {lab[k]}", "minor page faults of the pair", xs, "faults")
            rows[k + "-faults"] = self.summarize("5", f"q, {lab[k]}",
                                                 "minor page faults of receive + ack", xs,
                                                 "faults")
        for k in ("small", "big"):
            rows[k]["ratio"] = rows[k]["median"] / rows["small"]["median"]
            rows[k + "-send"]["ratio"] = rows[k + "-send"]["median"] / rows["small-send"]["median"]
        ratio = rows["big"]["median"] / rows["small"]["median"]
        self.target("5", f"receive+ack with {big_n:,} waiting <= 1.5x with {small_n:,}",
                    f"{ratio:.2f}x ({rows['big']['median']:.2f} vs "
                    f"{rows['small']['median']:.2f} ms)", ratio <= 1.5)
        self.note("5", f"The deep file ({big_size / 1e9:.2f} GB) was filled by `q send --lines` "
                       f"in chunks of {n_chunk:,} in {fill_secs:.0f} s. Each timed pair is "
                       "followed by an untimed-for-the-pair `q send` that puts one message back, "
                       "so the depths stay constant; those sends are reported too.")
        if self.mode != "full":
            self.note("5", f"This is a --{self.mode} run: the deep queue holds {big_n:,} "
                           "messages, not the 10,000,000 of the full run.")
        # Scenario 9: peak RSS from the same processes.
        w = self.cfg["warmup"]
        rss_rows = {}
        for (k, cmd), xs in rss.items():
            xs = xs[w:]
            name = f"q {cmd}, {lab[k]}" if cmd != "floor" else f"floor, {lab[k]}"
            self.record("9", name, "peak RSS", xs, "KiB")
            rss_rows[(k, cmd)] = self.summarize("9", name, "peak RSS (GNU time)", xs, "KiB")
        ok = True
        figs = []
        for cmd in ("send", "receive"):
            a, b = rss_rows[("small", cmd)]["median"], rss_rows[("big", cmd)]["median"]
            figs.append(f"{cmd}: {a / 1024:.1f} MiB -> {b / 1024:.1f} MiB")
            # "Does not grow": within 10% and 1 MiB, the noise of page-cache faults.
            ok &= b <= a * 1.1 + 1024
        self.target("9", f"peak RSS of q send / q receive the same at {small_n:,} and {big_n:,} "
                         "messages", "; ".join(figs), ok)
        fs = {k: round(median(v[w:])) for k, v in send_faults.items()}
        ks = {k: rss_rows[(k, "send")]["median"] for k in ("small", "big")}
        for k in ("small", "big"):
            self.record("9", f"q send, {lab[k]}", "minor page faults", send_faults[k][w:],
                        "faults")
        self.note("9", f"A q send faults {fs['small']:.0f} times at {small_n:,} messages and "
                       f"{fs['big']:.0f} times at {big_n:,} (GNU time), {fs['big'] - fs['small']:.0f} "
                       f"more for the deeper B-trees, yet its RSS is {ks['big'] - ks['small']:,.0f} "
                       "KiB larger: a fault on a file mapping whose neighbours are in the page "
                       "cache maps them too (the kernel's fault-around, 16 pages), so the "
                       "difference is a few B-tree paths' neighbourhoods, bounded by the trees' "
                       "depth, not by the number of messages.")
        self.s5_rows, self.s9_rows = rows, rss_rows
        for qq in (small, big):
            for f in qq.files() + [qq.path + "-lock"]:
                if os.path.exists(f) and not self.args.keep:
                    os.unlink(f)

    # -- scenario 6: wake-up --

    def s6_wakeup(self):
        S = "6"
        reps = self.cfg["wake_reps"]
        q = QQueue(self.p, self.q, os.path.join(self.work, "wake.q"))
        q.create()
        rq = RedisQueue(self.p, self.redis)
        rq.create()
        twin_file = os.path.join(self.work, "wake.twin")
        probe = os.path.join(self.bin, "wake_probe")
        probe_file = os.path.join(self.work, "wake.probe")
        open(probe_file, "w").close()
        closes = []
        body = body_for(1)
        lat = {"q": [], "redis": []}
        e2e = {"q": [], "redis": []}
        twin = []

        def blocked_in_redis():
            out = self.p.check_output(rq.cli("INFO", "clients"))
            for line in out.splitlines():
                if line.startswith("blocked_clients:"):
                    return int(line.split(":")[1]) > 0
            return False

        # x86_64: poll, ppoll, epoll_wait, epoll_pwait, futex, futex_waitv, nanosleep,
        # clock_nanosleep, select, pselect6, read (a pipe or an inotify descriptor)
        waits = {"7", "271", "232", "281", "202", "449", "35", "230", "23", "270", "0"}

        def sleeping_in_poll(pid):
            try:
                with open(f"/proc/{pid}/syscall") as f:
                    nr = f.read().split()[0]
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state != "S" or nr not in waits:
                    return False
                if "mechanism" not in self.__dict__:
                    kinds = set()
                    for fd in os.listdir(f"/proc/{pid}/fd"):
                        try:
                            kinds.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
                        except OSError:
                            pass
                    if any("inotify" in k for k in kinds):
                        self.mechanism = "inotify"
                    elif nr in ("202", "449"):
                        self.mechanism = "futex"
                    else:
                        self.mechanism = f"system call {nr}"
                return True
            except (OSError, IndexError):
                return False

        def one(name):
            if name == "q":
                recv = self.p.spawn([self.q, "receive", q.queue, "--wait", "30s"],
                                    stdout=os.path.join(self.work, "wake.out"), env=q.env)
                ready = lambda: sleeping_in_poll(recv)
                send = [self.q, "send", q.queue, body]
                env = q.env
            else:
                recv = self.p.spawn(rq.cli("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "BLOCK",
                                           "30000", "STREAMS", "q", ">"),
                                    stdout=os.path.join(self.work, "wake.out"))
                ready = blocked_in_redis
                send = rq.cli("XADD", "q", "*", "b", body)
                env = None
            deadline = time.monotonic() + 10
            while not ready():
                if time.monotonic() > deadline:
                    os.kill(recv, signal.SIGKILL)
                    os.waitpid(recv, 0)
                    raise BenchError(f"{name}: the receiver never started waiting")
                time.sleep(0.002)
            time.sleep(0.02)  # settled in its wait
            fd_r = os.pidfd_open(recv)
            t0 = time.perf_counter_ns()
            sender = self.p.spawn(send, env=env)
            fd_s = os.pidfd_open(sender)
            poller = select.poll()
            poller.register(fd_r, select.POLLIN)
            poller.register(fd_s, select.POLLIN)
            ends = {}
            while len(ends) < 2:
                for fd, _ in poller.poll(35_000):
                    if fd not in ends:
                        ends[fd] = time.perf_counter_ns()
                        poller.unregister(fd)
                if not ends and time.perf_counter_ns() - t0 > 35e9:
                    raise BenchError(f"{name}: the receiver did not return")
            _, st_r = os.waitpid(recv, 0)
            _, st_s = os.waitpid(sender, 0)
            os.close(fd_r)
            os.close(fd_s)
            if os.waitstatus_to_exitcode(st_r) != 0 or os.waitstatus_to_exitcode(st_s) != 0:
                raise BenchError(f"{name}: wake-up: receiver exit "
                                 f"{os.waitstatus_to_exitcode(st_r)}, sender exit "
                                 f"{os.waitstatus_to_exitcode(st_s)}")
            with open(os.path.join(self.work, "wake.out")) as f:
                out = f.read()
            if body not in out:
                raise BenchError(f"{name}: the receiver returned {out[:100]!r}")
            # Ack (untimed) so the queue stays empty.
            if name == "q":
                q.ack([out.split("\t")[1]])
            else:
                rq.ack([out.splitlines()[1]])
            lat[name].append((ends[fd_r] - ends[fd_s]) / 1e6)
            e2e[name].append((ends[fd_r] - t0) / 1e6)
            return 0.0

        def run_twin():
            r = self.p.run([self.floor, twin_file, "-n", "3"], capture=True)
            twin.append(int(r.out.strip()) / 1e6)
            return 0.0

        def run_probe():
            r = self.p.run([probe, probe_file], capture=True)
            closes.append(int(r.out.strip()) / 1e6)
            time.sleep(0.02)  # idle like a waiting receiver before its close
            return 0.0

        self.alternate([("q", lambda: one("q")), ("redis", lambda: one("redis")),
                        ("floor commit", run_twin)], reps=reps, warmup=1)
        # Apart, so that its own inotify teardowns do not disturb the receivers'.
        for _ in range(reps + 1):
            run_probe()
        for name in ("q", "redis"):
            lat[name], e2e[name] = lat[name][1:], e2e[name][1:]
        twin = twin[1:]
        closes = closes[1:]
        rows = {}
        for name in ("q", "redis"):
            self.record(S, name, "sender exit -> receiver exit", lat[name], "ms")
            self.record(S, name, "sender start -> receiver exit", e2e[name], "ms")
            rows[name] = self.summarize(S, name, "wake-up: sender exit -> receiver exit",
                                        lat[name], "ms", ratio_to="q")
            rows[name + "-e2e"] = self.summarize(S, name,
                                                 "wake-up: sender start -> receiver exit",
                                                 e2e[name], "ms", ratio_to="q")
        self.record(S, "floor", "one durable commit (loop twin)", twin, "ms")
        rows["floor"] = self.summarize(S, "floor", "one durable LMDB commit, in-process", twin,
                                       "ms")
        self.record(S, "inotify", "close of a watched inotify descriptor", closes, "ms")
        rows["inotify"] = self.summarize(S, "inotify (wake_probe)",
                                         "close() of a watched inotify descriptor", closes, "ms")
        for k in ("q", "redis"):
            rows[k]["ratio"] = rows[k]["median"] / rows["q"]["median"]
            rows[k + "-e2e"]["ratio"] = rows[k + "-e2e"]["median"] / rows["q-e2e"]["median"]
        qm, fm = rows["q"]["median"], rows["floor"]["median"]
        im = rows["inotify"]["median"]
        met = qm < 5
        fig = (f"{qm:.2f} ms, waiting on {getattr(self, 'mechanism', 'unknown')} (one durable "
               f"commit here: {fm:.2f} ms; closing an inotify descriptor: {im:.2f} ms)")
        if not met and fm >= 5:
            fig += ("; the receiver must commit its lease durably before it can return, and "
                    "commits on this disk alone take the floor figure")
        self.target(S, "q receive --wait wakes and returns a new message in < 5 ms (median)",
                    fig, met)
        self.note(S, "The receiver (`q receive --wait 30s`; redis: `redis-cli XREADGROUP ... "
                     "BLOCK 30000`) is started first and the sender only once the receiver is "
                     "asleep in a system call that waits (q) or counted in redis' "
                     "blocked_clients. Latency is from "
                     "the sender's exit (its commit is durable) to the receiver's exit with the "
                     "message; a q receive is itself a durable write (the lease), so the figure "
                     "includes one commit. sqlite3 has no way to wait: SQLite queues poll, and "
                     "their latency is their polling interval.")
        mech = getattr(self, "mechanism", "unknown")
        self.note(S, f"The waiting q receiver slept on: {mech}. `wake_probe` watches a file with "
                     "inotify, gets one event, and times the close() of the inotify descriptor: "
                     "destroying an inotify instance waits for an SRCU grace period in the kernel "
                     "(fsnotify_destroy_group), and a process that exits with it open pays the "
                     "same before its parent can reap it. "
                     + ("That cost is part of every one-shot `q receive --wait` that waited."
                        if mech == "inotify" else
                        "It is the cost a one-shot waiter avoids by not using inotify."))
        self.s6_rows = rows

    # -- scenario 7: contention --

    def s7_contention(self):
        S = "7"
        secs = self.cfg["contention_secs"]
        procs = self.cfg["contention_procs"]
        results = []
        for r in range(self.cfg["contention_rounds"]):
            for n in rotated([1, procs], r):
                log(f"contention: {n} producers + {n} consumers for {secs} s")
                results.append((n, self.contention_run(n, secs, f"{r}-{n}")))
        rows = {}
        for n in (1, procs):
            runs = [res for k, res in results if k == n]
            for metric in ("sent/s", "acked/s"):
                xs = [res[metric] for res in runs]
                self.record(S, f"{n}+{n} processes", metric, xs, "msg/s")
                label = ("1 producer + 1 consumer" if n == 1
                         else f"{n} producers + {n} consumers")
                rows[(n, metric)] = self.summarize(S, label,
                                                   metric.replace("/s", " per second"), xs,
                                                   "msg/s", ratio_to="1 producer + 1 consumer")
        for n in (1, procs):
            for metric in ("sent/s", "acked/s"):
                rows[(n, metric)]["ratio"] = rows[(n, metric)]["median"] / rows[(1, metric)]["median"]
            xs = [res["commits/msg"] for k, res in results if k == n]
            self.record(S, f"{n}+{n} processes", "commits per message", xs, "commits")
            label = "1 producer + 1 consumer" if n == 1 else f"{n} producers + {n} consumers"
            rows[(n, "commits")] = self.summarize(S, label, "durable commits per message acked",
                                                  xs, "commits")
            xs = [res["empty receives"] / max(1, res["commits"]) * 100 for k, res in results
                  if k == n]
            self.record(S, f"{n}+{n} processes", "empty receive commits", xs, "%")
            rows[(n, "empty")] = self.summarize(S, label, "commits that were receives finding "
                                                "nothing (% of commits)", xs, "%")
            xs = [res["commits/s"] for k, res in results if k == n]
            self.record(S, f"{n}+{n} processes", "commits per second", xs, "commits/s")
            rows[(n, "commits/s")] = self.summarize(S, label, "durable commits per second", xs,
                                                    "commits/s")
        errors = sum(res["errors"] for _, res in results)
        lost = sum(res["lost"] for _, res in results)
        dups = sum(res["duplicates"] for _, res in results)
        total = sum(res["sent"] for _, res in results)
        multi = rows[(procs, "acked/s")]["median"]
        single = rows[(1, "acked/s")]["median"]
        self.target(S, f"{procs} producers + {procs} consumers, {secs} s: no errors, nothing lost",
                    f"{total:,} messages sent over all runs, {errors} errors, {lost} lost, "
                    f"{dups} delivered twice; {multi:,.0f} acked/s vs {single:,.0f} with one of "
                    f"each ({multi / single:.2f}x); "
                    f"{rows[(procs, 'commits')]['median']:.1f} commits per message vs "
                    f"{rows[(1, 'commits')]['median']:.1f}, "
                    f"{rows[(procs, 'empty')]['median']:.0f}% of commits receives that found "
                    f"nothing vs {rows[(1, 'empty')]['median']:.0f}%", errors == 0 and lost == 0)
        if errors or lost:
            self.broken.append(f"contention: {lost} messages lost, {errors} commands failed")
        self.note(S, "Producers are shell loops of one-shot `q send QUEUE BODY` with unique "
                     "bodies; consumers are shell loops of `q receive QUEUE -n 10 --wait 1s` "
                     "piped through `cut -f2` into `q ack QUEUE`. Producers stop after the "
                     "period, consumers once the queue is empty. Every body sent must come back; "
                     "rates are over the producers' period (sent) and until the last ack (acked). "
                     "Every send, receive and ack is a durable commit, and one file has one "
                     "writer at a time, so messages per second are commits per second divided "
                     "by commits per message: with more consumers each receive finds fewer "
                     "messages waiting (smaller batches, more commits per message), and some "
                     "find none at all by the time they hold the writer lock. The commit counts "
                     "come from LMDB's transaction id before and after.")
        self.s7_rows = rows

    def contention_run(self, n, secs, tag):
        d = os.path.join(self.work, f"contention-{tag}")
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        q = QQueue(self.p, self.q, os.path.join(d, "c.q"))
        q.create()
        txn0 = lmdb_txnid(q.path)
        producer = os.path.join(d, "producer.sh")
        consumer = os.path.join(d, "consumer.sh")
        with open(producer, "w") as f:
            f.write(f"""#!/usr/bin/env bash
# producer ID END_EPOCH: one-shot sends of unique bodies until END_EPOCH
id=$1 end=$2 n=0
exec 3>"{d}/sent.$id" 4>"{d}/err.p$id"
while (( ${{EPOCHREALTIME/./}} < end )); do
  body="p$id-$n"
  if "{self.q}" send bench "$body" >/dev/null 2>&4; then echo "$body" >&3; else echo "send rc=$?" >&4; fi
  n=$((n + 1))
done
""")
        with open(consumer, "w") as f:
            f.write(f"""#!/usr/bin/env bash
# consumer ID: receive up to 10, ack them, until producers are done and nothing is left
id=$1
exec 3>"{d}/acked.$id" 4>"{d}/err.c$id" 5>"{d}/batches.$id"
batch="{d}/batch.$id"
while :; do
  "{self.q}" receive bench -n 10 --wait 1s >"$batch" 2>&4
  rc=$?
  if (( rc == 1 )); then
    [ -e "{d}/stop" ] && break
    continue
  elif (( rc != 0 )); then
    echo "receive rc=$rc" >&4; sleep 0.1; continue
  fi
  echo >&5
  if cut -f2 "$batch" | "{self.q}" ack bench 2>&4; then
    cut -f4 "$batch" >&3
  else
    echo "ack rc=$?" >&4
  fi
done
date +%s%N >"{d}/end.$id"
""")
        os.chmod(producer, 0o755)
        os.chmod(consumer, 0o755)
        env = dict(self.p.env, Q_FILE=q.path)
        start_us = int(time.time() * 1e6) + 200_000
        end_us = start_us + secs * 1_000_000
        t0 = time.time()
        cons = [subprocess.Popen([consumer, str(i)], env=env) for i in range(n)]
        prods = [subprocess.Popen([producer, str(i), str(end_us)], env=env) for i in range(n)]
        for p in prods:
            p.wait()
        t_prod = time.time() - t0
        open(os.path.join(d, "stop"), "w").close()
        for c in cons:
            try:
                c.wait(120)
            except subprocess.TimeoutExpired:
                c.kill()
                raise BenchError("contention: a consumer did not finish")
        t_all = time.time() - t0
        sent, acked, errors = [], [], []
        batches = 0
        for i in range(n):
            with open(os.path.join(d, f"batches.{i}")) as f:
                batches += len(f.read().splitlines())
            with open(os.path.join(d, f"sent.{i}")) as f:
                sent += f.read().split()
            with open(os.path.join(d, f"acked.{i}")) as f:
                acked += f.read().split()
            for who in ("p", "c"):
                with open(os.path.join(d, f"err.{who}{i}")) as f:
                    errors += [line for line in f.read().splitlines() if line.strip()]
        sent_set, acked_set = set(sent), set(acked)
        lost = len(sent_set - acked_set)
        dups = len(acked) - len(acked_set)
        remaining = q.depth()
        commits = lmdb_txnid(q.path) - txn0
        # Each send is a commit, each batch a receive and an ack; the rest are
        # receives that found nothing once they had the writer lock.
        empty = commits - len(sent) - 2 * batches
        if errors:
            log(f"contention errors: {errors[:5]}")
        if not self.args.keep:
            shutil.rmtree(d)
        return {"sent": len(sent), "acked": len(acked), "errors": len(errors), "lost": lost,
                "duplicates": dups, "remaining": remaining, "commits": commits,
                "commits/msg": commits / max(1, len(acked)), "commits/s": commits / t_all,
                "empty receives": empty, "batches": batches,
                "sent/s": len(sent) / secs, "acked/s": len(acked) / t_all,
                "secs": t_all, "prod_secs": t_prod}

    # -- where the time goes: syscalls of one operation --

    def syscalls(self):
        """What one operation costs the kernel: system calls, syncs, bytes written to
        files, page faults (strace -f, and wait4 for the faults)."""
        import re
        if not shutil.which("strace"):
            self.syscall_rows = None
            return
        q = QQueue(self.p, self.q, os.path.join(self.work, "sys.q"))
        q.create()
        q.send_lines(self.lines)
        sq = SqliteQueue(self.p, os.path.join(self.work, "sys.sqlite"))
        sq.create()
        rq = RedisQueue(self.p, self.redis)
        rq.create()
        body = body_for(3)
        floor_file = os.path.join(self.work, "sys.floor")
        self.p.run([self.floor, floor_file])

        def fresh_ack():
            rr = self.p.run([self.q, "receive", "bench"], env=q.env, capture=True)
            return [self.q, "ack", "bench", rr.out.split("\t")[1]]
        cmds = [("floor FILE", [self.floor, floor_file], None, None),
                ("q send", [self.q, "send", "bench", body], q.env, None),
                ("q receive", [self.q, "receive", "bench"], q.env, None),
                ("q ack", fresh_ack, q.env, None),
                ("q --version", [self.q, "--version"], None, None),
                ("sqlite3 INSERT", sq.argv(
                    f"INSERT INTO messages(queue, body, visible_at) VALUES('bench','{body}',0)"),
                 None, None),
                ("redis-cli XADD (client only)", rq.cli("XADD", "q", "*", "b", body), None, None)]
        call = re.compile(r"^\d+\s+(\w+)\((\d+)?.*\)\s+=\s+(-?\d+)")
        unfinished = re.compile(r"^\d+\s+(\w+)\(.*<unfinished \.\.\.>")
        rows = []
        for name, argv, env, stdin in cmds:
            make = argv if callable(argv) else (lambda a=argv: a)
            faults = [self.p.run(make(), env=env, stdin=stdin).minflt for _ in range(3)]
            out = os.path.join(self.work, "strace.out")
            self.p.run(["strace", "-f", "-qq", "-o", out] + make(), env=env, stdin=stdin)
            total = syncs = written = 0
            with open(out) as f:
                for line in f:
                    m = call.match(line)
                    if not m:
                        if unfinished.match(line):
                            total += 1
                        continue
                    total += 1
                    sc, fd, ret = m.group(1), m.group(2), int(m.group(3))
                    if sc in ("fsync", "fdatasync", "msync", "sync_file_range"):
                        syncs += 1
                    elif (sc in ("write", "pwrite64", "writev", "pwritev", "pwritev2") and fd
                          and int(fd) > 2 and ret > 0):
                        written += ret
            rows.append((name, total, syncs, written, int(median(faults))))
        self.syscall_rows = rows
        self.note("sys", "Bytes written count writes to files other than stdout and stderr "
                         "(for redis-cli, that is nothing: the server does the writing). A "
                         "q send changes several B-trees (the message header, the body, the "
                         "ready and age indexes, the queue record and the sequence counter), so "
                         "its commit writes more pages than the floor's one record.")

    # -- running it all --

    def run(self):
        plan = [("1", self.s1_enqueue), ("2", self.s2_receive_ack), ("3", self.s3_bulk),
                ("5", self.s5_depth), ("6", self.s6_wakeup), ("7", self.s7_contention),
                ("sys", self.syscalls)]
        only = set(self.args.only.split(",")) if self.args.only else None
        for key, fn in plan:
            if only and key not in only and not (key == "3" and only & {"4", "8"}) and \
                    not (key == "5" and "9" in only):
                continue
            log(f"scenario {key}: {fn.__name__}")
            t0 = time.time()
            fn()
            self.timings[key] = time.time() - t0


# ---- reporting -----------------------------------------------------------------------

def machine_description(work):
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception as e:
            return f"({e})"
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip()
    mhz = sh("grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2-").strip()
    flags = sh("grep -m1 '^flags' /proc/cpuinfo | grep -o hypervisor")
    return {
        "cpu": f"{cpu} ({mhz} MHz){', virtual machine' if flags else ''}",
        "nproc": sh("nproc"),
        "free": sh("free -m"),
        "df": sh(f"df -hT {work}"),
        "kernel": sh("uname -srvm"),
        "os": sh(". /etc/os-release && echo \"$PRETTY_NAME\""),
        "versions": sh("(sqlite3 --version | cut -d' ' -f1; redis-server --version | cut -d' ' -f3;"
                       " dpkg-query -W -f='${Version}' liblmdb0 2>/dev/null) | paste -sd' '"),
        "load": sh("cat /proc/loadavg"),
    }


def fmt_val(v, unit):
    if v != v:
        return "-"
    if unit == "ms":
        return f"{v:.2f} ms"
    if unit == "msg/s":
        return f"{v:,.0f}/s"
    if unit == "KiB":
        return f"{v / 1024:.1f} MiB"
    if unit == "faults":
        return f"{v:.0f}"
    if unit == "%":
        return f"{v:.1f}%"
    if unit == "commits":
        return f"{v:.2f}"
    if unit == "commits/s":
        return f"{v:,.0f}/s"
    if unit == "bytes":
        return f"{v:,.0f} B"
    return f"{v:g} {unit}"


TITLES = {
    "1": "One-shot enqueue (one process, one durable message)",
    "2": "One-shot receive + ack (two processes)",
    "3": "Bulk send",
    "4": "Drain through batched receive + ack",
    "5": "Depth does not matter",
    "6": "Wake-up latency of a waiting receiver",
    "7": "Contention: many producers and consumers on one file",
    "8": "Space: freed pages are reused",
    "9": "Memory: peak RSS does not grow with the queue",
}


def write_results(suite, started, finished):
    out = suite.out
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "contender", "metric", "rep", "value", "unit"])
        for row in suite.raw:
            w.writerow(row)
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "contender", "metric", "n", "median", "p25", "p75", "unit",
                    "ratio", "ratio_to"])
        for s in suite.summary:
            w.writerow([s["scenario"], s["contender"], s["metric"], s["n"],
                        f"{s['median']:.6g}", f"{s['p25']:.6g}", f"{s['p75']:.6g}", s["unit"],
                        "" if s["ratio"] is None else f"{s['ratio']:.3f}", s["ratio_to"] or ""])
    m = machine_description(suite.work)
    lines = []
    A = lines.append
    A(f"# q benchmark results ({suite.mode} run)")
    A("")
    A(f"Run {started:%Y-%m-%d %H:%M} to {finished:%H:%M} UTC ({(finished - started).seconds // 60} "
      f"min), `bench/run{'' if suite.mode == 'full' else ' --' + suite.mode}`, "
      f"{suite.q_version}. Medians of alternating runs; ratios are of medians in this same run. "
      "Raw numbers: [raw.csv](raw.csv), summary: [summary.csv](summary.csv).")
    A("")
    A(f"The binary measured: {suite.q_origin}.")
    A("")
    A("## Targets")
    A("")
    A("| # | target | measured | met? |")
    A("|---|---|---|---|")
    for sc, text, fig, met in suite.targets:
        A(f"| {sc} | {text} | {fig} | {'yes' if met else ('n/a' if met is None else '**no**')} |")
    A("")
    A("## Machine")
    A("")
    A(f"- CPU: {m['cpu']}, {m['nproc']} cores (nproc), shared with other work while this ran "
      f"(load average at the end: {m['load']})")
    A(f"- Kernel: {m['kernel']}; {m['os']}")
    A(f"- sqlite3, redis-server, liblmdb: {m['versions']}")
    A("- Memory (free -m):")
    A("")
    A("```")
    A(m["free"])
    A("```")
    A("")
    A("- The benchmark files' filesystem (df -hT):")
    A("")
    A("```")
    A(m["df"])
    A("```")
    A("")
    by_sc = {}
    for s in suite.summary:
        by_sc.setdefault(s["scenario"], []).append(s)
    plots = {"1": "s1_enqueue.png", "2": "s2_receive_ack.png", "3": "s3_s4_bulk.png",
             "5": "s5_depth.png", "6": "s6_wakeup.png", "7": "s7_contention.png",
             "8": "s8_space.png"}
    for sc in ["1", "2", "3", "4", "5", "6", "7", "8", "9"]:
        if sc not in by_sc:
            continue
        A(f"## {sc}. {TITLES[sc]}")
        A("")
        A("| contender | measure | n | median | p25 to p75 | ratio |")
        A("|---|---|---|---|---|---|")
        for s in by_sc[sc]:
            ratio = ("" if s["ratio"] is None or s["ratio"] <= 0
                     else f"{s['ratio']:.2f}x {s['ratio_to']}")
            A(f"| {s['contender']} | {s['metric']} | {s['n']} | {fmt_val(s['median'], s['unit'])} "
              f"| {fmt_val(s['p25'], s['unit'])} to {fmt_val(s['p75'], s['unit'])} | {ratio} |")
        A("")
        if sc == "8" and getattr(suite, "space", None):
            A("| store | round | after send | after drain |")
            A("|---|---|---|---|")
            for name, entries in suite.space.items():
                sent = [x for st, x, _ in entries if st == "sent"]
                drained = [x for st, x, _ in entries if st == "drained"]
                for i, s in enumerate(sent):
                    d = f"{drained[i]:,} B" if i < len(drained) else "-"
                    A(f"| {name} | {i + 1} | {s:,} B | {d} |")
            A("")
        for t in suite.notes.get(sc, []):
            A(t)
            A("")
        if sc in plots and os.path.exists(os.path.join(out, plots[sc])):
            A(f"![{TITLES[sc]}]({plots[sc]})")
            A("")
    if getattr(suite, "syscall_rows", None):
        A("## Where the time goes: one operation, as the kernel sees it (strace -f; page faults from wait4)")
        A("")
        A("| command | system calls | fsync/fdatasync | bytes written to files | minor page faults |")
        A("|---|---|---|---|---|")
        for row in suite.syscall_rows:
            A("| " + " | ".join(str(x) for x in row) + " |")
        A("")
        for t in suite.notes.get("sys", []):
            A(t)
            A("")
    A("## Method")
    A("")
    A("- Every process is started without a shell (posix_spawn) and timed from spawn to exit "
      "(wait4). Peak RSS is measured apart, under GNU time (wait4's figure for a "
      "posix_spawn child includes the parent's high-water mark).")
    A("- Contenders alternate run by run, with the first of each round rotating, after "
      "untimed warm-up rounds; the figures are medians with the interquartile range.")
    A("- All contenders are durable: q and the floor sync every commit, sqlite3 runs WAL with "
      "synchronous=FULL, redis-server runs appendonly with appendfsync always on a private "
      "loopback port. nq never syncs.")
    A("- q is a private copy of the binary under test; every store is on the filesystem above.")
    A(f"- Scenario run times: " + ", ".join(f"{k}: {v:.0f} s" for k, v in suite.timings.items()))
    A("")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines))


def write_plots(suite):
    out = suite.out
    if not shutil.which("gnuplot"):
        log("gnuplot not found: no plots")
        return
    data = os.path.join(suite.work, "plots")
    os.makedirs(data, exist_ok=True)
    scripts = []
    by = {}
    for s in suite.summary:
        by.setdefault((s["scenario"], s["metric"]), []).append(s)

    def bars(fname, title, ylabel, rows, scale=1.0, label_fmt="%.3g"):
        dat = os.path.join(data, fname + ".dat")
        with open(dat, "w") as f:
            for s in rows:
                label = s["contender"].replace('"', "'")
                f.write(f"\"{label}\" {s['median'] * scale} {s['p25'] * scale} "
                        f"{s['p75'] * scale}\n")
        scripts.append(f"""
set output '{os.path.join(out, fname)}'
set title "{title}"
set ylabel "{ylabel}"
set yrange [0:*]
set style fill solid 0.6 border -1
set boxwidth 0.6
set xtics rotate by -20
plot '{dat}' using 0:2:xtic(1) with boxes lc rgb '#4477aa' notitle, \\
     '' using 0:2:3:4 with yerrorbars lc rgb 'black' pt 0 notitle, \\
     '' using 0:2:(sprintf('{label_fmt}', $2)) with labels offset 0,1 notitle
""")

    s1 = [s for s in suite.summary if s["scenario"] == "1"]
    if s1:
        bars("s1_enqueue.png", "One-shot enqueue: one process, one durable message "
             "(median, IQR)", "ms", s1)
    s2 = [s for s in suite.summary if s["scenario"] == "2"]
    if s2:
        bars("s2_receive_ack.png", "One-shot receive + ack (median, IQR)", "ms", s2)
    s34 = [dict(s, contender=f"{s['contender']} {'send' if s['scenario'] == '3' else 'drain'}")
           for s in suite.summary if s["scenario"] in ("3", "4") and s["unit"] == "msg/s"]
    if s34:
        bars("s3_s4_bulk.png", f"Bulk send and batched drain of {suite.cfg['bulk']:,} "
             "messages (median, IQR)", "thousand messages/s", s34, scale=1e-3, label_fmt="%.0f")
    s5 = [s for s in suite.summary if s["scenario"] == "5" and s["unit"] == "ms"]
    if s5:
        bars("s5_depth.png", "q one-shot operations by queue depth (median, IQR)", "ms",
             [dict(s, contender=f"{s['contender']}: {s['metric'].replace('one-shot ', '')}")
              for s in s5])
    s7 = [s for s in suite.summary if s["scenario"] == "7" and s["unit"] == "msg/s"]
    if s7:
        bars("s7_contention.png", f"Contention over {suite.cfg['contention_secs']} s (median)",
             "messages/s", [dict(s, contender=f"{s['contender']}: {s['metric']}") for s in s7],
             label_fmt="%.0f")
    # Wake-up: cumulative distribution.
    wake = {}
    for sc, name, metric, _, v, _ in suite.raw:
        if sc == "6" and metric in ("sender exit -> receiver exit",
                                    "one durable commit (loop twin)",
                                    "close of a watched inotify descriptor"):
            wake.setdefault(name, []).append(v)
    if wake:
        plot_parts = []
        for name, xs in wake.items():
            xs = sorted(xs)
            dat = os.path.join(data, f"wake-{name}.dat")
            with open(dat, "w") as f:
                for i, x in enumerate(xs):
                    f.write(f"{x} {(i + 1) / len(xs)}\n")
            label = {"q": "q receive --wait: sender exit to receiver exit",
                     "redis": "redis XREADGROUP BLOCK: sender exit to receiver exit",
                     "floor": "one durable LMDB commit (floor loop twin)",
                     "inotify": "close() of a watched inotify descriptor (wake_probe)"}.get(
                         name, name)
            plot_parts.append(f"'{dat}' using 1:2 with steps lw 2 title '{label}'")
        scripts.append(f"""
set output '{os.path.join(out, 's6_wakeup.png')}'
set title "Wake-up latency (cumulative distribution)"
set xlabel "ms"
set ylabel "fraction of runs"
set yrange [0:1]
set xrange [0:*]
unset xtics
set xtics
set key outside below
set arrow 1 from 5, graph 0 to 5, graph 1 nohead dt 2 lc rgb 'red'
plot {', '.join(plot_parts)}
unset arrow 1
unset xlabel
set key default
""")
    if getattr(suite, "space", None):
        parts = []
        for name, entries in suite.space.items():
            dat = os.path.join(data, f"space-{name}.dat")
            with open(dat, "w") as f:
                for i, (stage, size, _) in enumerate(entries):
                    x = (i + 1) if name != "floor" else 2 * i + 1
                    f.write(f"{x} {size / 1e6}\n")
            parts.append(f"'{dat}' using 1:2 with linespoints lw 2 title '{name}'")
        scripts.append(f"""
set output '{os.path.join(out, 's8_space.png')}'
set title "Store size after each send (odd) and drain (even) of {suite.cfg['bulk']:,} messages"
set xlabel "step: send 1, drain 1, send 2, drain 2, ..."
set ylabel "MB on disk (apparent size)"
set yrange [0:*]
set xrange [0.5:*]
set xtics 1
set key top left
plot {', '.join(parts)}
""")
    gp = os.path.join(data, "plots.gp")
    with open(gp, "w") as f:
        f.write("set terminal pngcairo size 900,560 font 'sans,10' noenhanced\nset grid ytics\n")
        f.write("".join(scripts))
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"gnuplot failed: {r.stderr.strip()[:500]}")


def replot(args):
    """Redraws the plots of a finished run from its summary.csv and raw.csv."""
    class Saved:
        pass
    suite = Saved()
    suite.out, suite.work, suite.cfg = args.out, args.work, MODES[args.mode]
    with open(os.path.join(args.out, "summary.csv")) as f:
        suite.summary = []
        for r in csv.DictReader(f):
            r = dict(r, n=int(r["n"]), median=float(r["median"]), p25=float(r["p25"]),
                     p75=float(r["p75"]), ratio=float(r["ratio"]) if r["ratio"] else None)
            suite.summary.append(r)
    with open(os.path.join(args.out, "raw.csv")) as f:
        suite.raw = [(r["scenario"], r["contender"], r["metric"], int(r["rep"]),
                      float(r["value"]), r["unit"]) for r in csv.DictReader(f)]
    space = {}
    for sc, name, metric, rep_, v, _ in suite.raw:
        if sc == "8" and metric.startswith("file bytes after "):
            space.setdefault(name, []).append((rep_, metric.endswith("drained"), v))
    suite.space = {name: [("drained" if d else "sent", int(v), 0)
                          for _, d, v in sorted(entries)] for name, entries in space.items()}
    write_plots(suite)


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
