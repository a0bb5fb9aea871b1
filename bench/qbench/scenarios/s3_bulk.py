"""Scenarios 3 and 4: bulk send of many lines in one process, then a drain
through batched receive + ack; the store sizes go to scenario 8.
"""
import os
import time

from ..common import BODY_LEN, BenchError, file_bytes, lmdb_last_freed, rotated, log
from ..contenders import QQueue, RedisQueue, SqliteQueue
from . import s8_space

def run(suite):
    N, B = suite.cfg["bulk"], suite.cfg["batch"]
    reps = suite.cfg["bulk_reps"]
    sql = os.path.join(suite.work, "bulk.sql")
    resp = os.path.join(suite.work, "bulk.resp")
    SqliteQueue.write_bulk_sql(suite.lines, sql)
    RedisQueue.write_bulk_resp(suite.lines, resp)
    q = QQueue(suite.p, suite.q, os.path.join(suite.work, "bulk.q"))
    q.create()
    sq = SqliteQueue(suite.p, os.path.join(suite.work, "bulk.sqlite"))
    sq.create()
    suite.redis.restart()
    rq = RedisQueue(suite.p, suite.redis)
    rq.create()
    floor_file = os.path.join(suite.work, "bulk.floor")
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
    suite.q_last_freed = []
    pair_file = os.path.join(suite.work, "bulk-pair.floor")

    def sample_floor_pairs(k=10):
        for _ in range(k):
            floor_pairs.append(suite.p.run([suite.floor, pair_file]).ms +
                               suite.p.run([suite.floor, pair_file]).ms)

    def run_q():
        send["q"].append(N / (q.send_lines(suite.lines).ns / 1e9))
        sizes["q"].append(("sent",) + file_bytes(*q.files()))
        sample_floor_pairs()
        drain["q"].append(N / drain_all("q", q))
        sample_floor_pairs()
        sizes["q"].append(("drained",) + file_bytes(*q.files()))
        suite.q_last_freed.append(lmdb_last_freed(q.path))

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
        send["floor"].append(N / (suite.p.run([suite.floor, floor_file, "--lines"],
                                             stdin=suite.lines).ns / 1e9))
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
        suite.record("3", name, "bulk send", xs, unit)
        rows3[name] = suite.summarize("3", name, f"bulk send of {N:,} lines, durable", xs,
                                     unit, ratio_to="q")
    for row in rows3.values():
        row["ratio"] = row["median"] / rows3["q"]["median"]
    rows4 = {}
    for name, xs in drain.items():
        suite.record("4", name, "drain", xs, unit)
        suite.record("4", name, f"receive -n {B} + ack, per batch", batches[name], "ms")
        rows4[name] = suite.summarize("4", name, f"drain, batches of {B}", xs, unit,
                                     ratio_to="q")
    for row in rows4.values():
        row["ratio"] = row["median"] / rows4["q"]["median"]
    qs = rows3["q"]["median"]
    suite.target("3", f"bulk q send --lines of {N:,} durable >= 300,000 msg/s",
                f"{qs:,.0f} msg/s", qs >= 300_000)
    qd = rows4["q"]["median"]
    # The most any receive + ack pair of processes can do: two floor runs a batch.
    suite.record("4", "2x floor", "pair of one-shot floor runs", floor_pairs, "ms")
    fp = suite.summarize("4", "2x floor", "one-shot pair (bound: a batch needs two processes)",
                        floor_pairs, "ms")
    qb = suite.summarize("4", "q", f"receive -n {B} + ack, per batch", batches["q"], "ms",
                        ratio_to="2x floor")
    qb["ratio"] = qb["median"] / fp["median"]
    bound = B / (fp["median"] / 1e3)
    fig = (f"{qd:,.0f} msg/s; a batch takes {qb['median']:.2f} ms, {qb['ratio']:.2f}x two "
           f"floor processes ({fp['median']:.2f} ms), whose bound here is {bound:,.0f} msg/s")
    suite.target("4", f"drain of {N:,} through receive -n {B} + ack >= 100,000 msg/s", fig,
                qd >= 100_000)
    if N < 1_000_000:
        suite.note("3", f"This is a --{suite.mode} run: {N:,} messages, not the 1,000,000 of "
                       "the full run.")
    suite.note("3", f"Each round sends {N:,} lines of {BODY_LEN} bytes into the same store "
                   "(emptied by the drain of scenario 4), so round 1 grows the file and later "
                   "rounds reuse its freed pages. sqlite3: one transaction of multi-row "
                   "INSERTs (1,000 rows a statement) on stdin; redis: one XADD per message "
                   "through `redis-cli --pipe`; floor: `floor FILE --lines`, every line one "
                   "record in one durable LMDB transaction, on a fresh file each round.")
    suite.note("4", f"Each drain loop: receive up to {B} (q receive -n {B}; sqlite3 UPDATE ... "
                   f"LIMIT {B} RETURNING; redis XREADGROUP COUNT {B}), then ack those "
                   "receipts in one process (q ack with receipts on stdin; sqlite3 one "
                   "transaction of DELETEs; redis one EVAL of XACK + XDEL), until empty. "
                   "Every message is counted back.")
    suite.s3_rows, suite.s4_rows = rows3, rows4
    s8_space.run(suite, sizes, N)
