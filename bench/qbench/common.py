"""What every part of the benchmark shares: the sizes per mode, the process
runner (posix_spawn + wait4), the statistics, file sizes, LMDB's commit
counter and the message bodies."""
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
