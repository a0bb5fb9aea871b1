"""Where the time goes: the system calls, syncs, bytes written and page faults
of one operation (strace -f).
"""
import os
import shutil

from ..common import body_for, median
from ..contenders import QQueue, RedisQueue, SqliteQueue

def run(suite):
    """What one operation costs the kernel: system calls, syncs, bytes written to
    files, page faults (strace -f, and wait4 for the faults)."""
    import re
    if not shutil.which("strace"):
        suite.syscall_rows = None
        return
    q = QQueue(suite.p, suite.q, os.path.join(suite.work, "sys.q"))
    q.create()
    q.send_lines(suite.lines)
    sq = SqliteQueue(suite.p, os.path.join(suite.work, "sys.sqlite"))
    sq.create()
    rq = RedisQueue(suite.p, suite.redis)
    rq.create()
    body = body_for(3)
    floor_file = os.path.join(suite.work, "sys.floor")
    suite.p.run([suite.floor, floor_file])

    def fresh_ack():
        rr = suite.p.run([suite.q, "receive", "bench"], env=q.env, capture=True)
        return [suite.q, "ack", "bench", rr.out.split("\t")[1]]
    cmds = [("floor FILE", [suite.floor, floor_file], None, None),
            ("q send", [suite.q, "send", "bench", body], q.env, None),
            ("q receive", [suite.q, "receive", "bench"], q.env, None),
            ("q ack", fresh_ack, q.env, None),
            ("q --version", [suite.q, "--version"], None, None),
            ("sqlite3 INSERT", sq.argv(
                f"INSERT INTO messages(queue, body, visible_at) VALUES('bench','{body}',0)"),
             None, None),
            ("redis-cli XADD (client only)", rq.cli("XADD", "q", "*", "b", body), None, None)]
    call = re.compile(r"^\d+\s+(\w+)\((\d+)?.*\)\s+=\s+(-?\d+)")
    unfinished = re.compile(r"^\d+\s+(\w+)\(.*<unfinished \.\.\.>")
    rows = []
    for name, argv, env, stdin in cmds:
        make = argv if callable(argv) else (lambda a=argv: a)
        faults = [suite.p.run(make(), env=env, stdin=stdin).minflt for _ in range(3)]
        out = os.path.join(suite.work, "strace.out")
        suite.p.run(["strace", "-f", "-qq", "-o", out] + make(), env=env, stdin=stdin)
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
    suite.syscall_rows = rows
    suite.note("sys", "Bytes written count writes to files other than stdout and stderr "
                     "(for redis-cli, that is nothing: the server does the writing). A "
                     "q send changes several B-trees (the message header, the body, the "
                     "ready and age indexes, the queue record and the sequence counter), so "
                     "its commit writes more pages than the floor's one record.")
