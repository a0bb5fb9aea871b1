"""Scenario 2: one-shot receive + ack (two processes) against two floor runs.
"""
import os

from ..common import BenchError, body_for, median, paired
from ..contenders import QQueue, RedisQueue, SqliteQueue

def run(suite):
    S = "2"
    need = suite.cfg["reps"] + suite.cfg["warmup"] + 10
    fill = os.path.join(suite.work, "s2.lines")
    with open(fill, "w") as f:
        for i in range(need):
            f.write(body_for(i) + "\n")
    q = QQueue(suite.p, suite.q, os.path.join(suite.work, "s2.q"))
    q.create()
    q.send_lines(fill)
    sq = SqliteQueue(suite.p, os.path.join(suite.work, "s2.sqlite"))
    sq.create()
    sql = os.path.join(suite.work, "s2.sql")
    SqliteQueue.write_bulk_sql(fill, sql)
    sq.send_bulk(sql)
    rq = RedisQueue(suite.p, suite.redis)
    rq.create()
    resp = os.path.join(suite.work, "s2.resp")
    RedisQueue.write_bulk_resp(fill, resp)
    rq.send_bulk(resp)
    floor_file = os.path.join(suite.work, "s2.floor")
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
        a = suite.p.run([suite.floor, floor_file])
        b = suite.p.run([suite.floor, floor_file])
        return a.ms + b.ms

    contenders = [("2x floor", floor_pair), ("q", pair("q", q)),
                  ("sqlite3", pair("sqlite3", sq)), ("redis", pair("redis", rq))]
    times = suite.alternate(contenders)
    rows = {}
    for name, xs in times.items():
        suite.record(S, name, "receive+ack pair", xs, "ms")
        rows[name] = suite.summarize(S, name, "one-shot receive + ack", xs, "ms",
                                    ratio_to="2x floor")
    w = suite.cfg["warmup"]
    for name in ("q", "sqlite3", "redis"):
        rec = [a for a, _ in parts[name][w:]]
        ack = [b for _, b in parts[name][w:]]
        suite.record(S, name, "receive process", rec, "ms")
        suite.record(S, name, "ack process", ack, "ms")
        suite.note(S, f"{name}: receive {median(rec):.2f} ms + ack {median(ack):.2f} ms "
                     "(medians).")
    fl = rows["2x floor"]["median"]
    for row in rows.values():
        row["ratio"] = row["median"] / fl
    qm = rows["q"]["median"]
    pr, pd = paired(times["q"], times["2x floor"])
    suite.target(S, "q receive + q ack <= 1.3x two floor runs",
                f"{qm / fl:.2f}x ({qm:.2f} vs {fl:.2f} ms); per round: {pr:.2f}x, "
                f"{pd:+.2f} ms", qm / fl <= 1.3)
    suite.s2_rows = rows
