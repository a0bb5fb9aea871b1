"""Scenario 1: one-shot enqueue, one process per durable message, against the
floor, sqlite3, redis-cli and nq.
"""
import os

from ..common import body_for, log, median, paired
from ..contenders import QQueue, RedisQueue, SqliteQueue

def run(suite):
    S = "1"
    q = QQueue(suite.p, suite.q, os.path.join(suite.work, "s1.q"))
    q.create()
    sq = SqliteQueue(suite.p, os.path.join(suite.work, "s1.sqlite"))
    sq.create()
    rq = RedisQueue(suite.p, suite.redis)
    rq.create()
    floor_file = os.path.join(suite.work, "s1.floor")
    twin_file = os.path.join(suite.work, "s1.twin")
    nqdir = os.path.join(suite.work, "nq")
    os.makedirs(nqdir, exist_ok=True)
    body = body_for(0)
    nq_env = {"NQDIR": nqdir}
    twin = []

    def run_twin():
        r = suite.p.run([suite.floor, twin_file, "-n", "5"], capture=True)
        twin.append(int(r.out.strip()) / 1e6)
        return r

    def run_nq():
        r = suite.p.run(["nq", "-q", "-c", "true", body], env=nq_env)
        # Let the job finish (untimed) so it does not run beside the next contender.
        suite.p.run(["nq", "-w"], env=nq_env)
        return r

    contenders = [
        ("floor", lambda: suite.p.run([suite.floor, floor_file])),
        ("q", lambda: q.send_one(body)),
        ("sqlite3", lambda: sq.send_one(body)),
        ("redis", lambda: rq.send_one(body)),
        ("nq", run_nq),
        ("floor loop twin", run_twin),
        ("q --version", lambda: suite.p.run([suite.q, "--version"])),
    ]
    times = suite.alternate(contenders)
    times["floor loop twin (per commit)"] = twin[suite.cfg["warmup"]:]
    unit = "ms"
    for name, xs in times.items():
        metric = {"floor loop twin": "wall of a 5-commit process",
                  "floor loop twin (per commit)": "one commit inside a process"}.get(
                      name, "wall per process")
        suite.record(S, name, metric, xs, unit)
    rows = {}
    for name in ["floor", "q", "sqlite3", "redis", "nq", "floor loop twin (per commit)",
                 "q --version"]:
        rows[name] = suite.summarize(S, name, "one-shot enqueue" if name in
                                    ("floor", "q", "sqlite3", "redis", "nq") else "reference",
                                    times[name], unit, ratio_to="floor")
    fl = rows["floor"]["median"]
    for row in rows.values():
        row["ratio"] = row["median"] / fl
    qm = rows["q"]["median"]
    cm = rows["floor loop twin (per commit)"]["median"]
    pr, pd = paired(times["q"], times["floor"])
    suite.target(S, "q send <= 1.3x floor",
                f"{qm / fl:.2f}x ({qm:.2f} vs {fl:.2f} ms); per round: {pr:.2f}x, "
                f"{pd:+.2f} ms; one durable commit inside a process: {cm:.2f} ms",
                qm / fl <= 1.3)
    sm, rm = rows["sqlite3"]["median"], rows["redis"]["median"]
    suite.target(S, "q send faster than sqlite3 and redis-cli",
                f"q {qm:.2f} ms, sqlite3 {sm:.2f} ms ({qm / sm:.2f}x), redis-cli {rm:.2f} ms "
                f"({qm / rm:.2f}x)", qm < sm and qm < rm)
    suite.note(S, "nq is not durable (no fsync) and forks the job; it is shown for the cost of "
                 "an enqueue only. `floor loop twin (per commit)` is one durable LMDB commit "
                 "inside a running process: the part of the floor that is not process "
                 "start-up. `q --version` is a q process that opens no queue file (it builds "
                 "the whole command tree, so it need not be cheaper than a send). \"Per "
                 "round\" in the targets is the median of the ratios and differences of runs "
                 "made moments apart, a check on the ratio of medians.")
    suite.s1_rows = rows
    startup_regression_check(suite, q, floor_file, body)


# One-shot send against the floor, in every run: a ratio, so it follows the
# machine's speed, not a time. It compares the 10th percentiles of alternating
# runs (the runs least slowed by a neighbour: in ctest, other tests run beside
# it) and logs the medians' ratio too. A miss is measured again, longer, before
# it counts. 1.5x is below what the per-open private directory of links cost
# (1.5-1.6x); q now costs 1.3-1.45x here (a 6 MB static binary's start-up over
# the floor's small dynamic one), too close to 1.5x for a check that must not
# fail CI on a loaded machine: so --smoke reports it (bench_smoke's output,
# "startup check") and the timed runs (--quick, full) fail on it. Set
# Q_BENCH_STARTUP_STRICT=1 to make --smoke fail on it as well.
REGRESSION_LIMIT = 1.5


def low(xs, p=0.10):
    xs = sorted(xs)
    return xs[int(len(xs) * p)]


def startup_regression_check(suite, q, floor_file, body):
    contenders = [("floor", lambda: suite.p.run([suite.floor, floor_file])),
                  ("q", lambda: q.send_one(body))]
    ratio = None
    for pairs in (60, 180):
        times = suite.alternate(contenders, reps=pairs, warmup=3)
        ratio = low(times["q"]) / low(times["floor"])
        qm, fl = median(times["q"]), median(times["floor"])
        log(f"startup check: q send {low(times['q']):.2f} ms, floor {low(times['floor']):.2f} ms "
            f"(10th percentiles of {pairs} alternating pairs): {ratio:.2f}x, limit "
            f"{REGRESSION_LIMIT}x (medians {qm:.2f} and {fl:.2f} ms: {qm / fl:.2f}x)")
        if ratio <= REGRESSION_LIMIT:
            break
    met = ratio <= REGRESSION_LIMIT
    suite.target("1", f"regression check: q send <= {REGRESSION_LIMIT}x floor", f"{ratio:.2f}x", met)
    strict = suite.mode != "smoke" or os.environ.get("Q_BENCH_STARTUP_STRICT") == "1"
    if not met and strict:
        suite.broken.append(f"one-shot q send is {ratio:.2f}x the floor, over the "
                            f"{REGRESSION_LIMIT}x regression limit (twice measured): something "
                            "made every command's start-up slower (bench/README.md, scenario 1)")
