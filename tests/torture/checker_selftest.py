#!/usr/bin/env python3
"""The checker catches what it must: each planted fault in a small synthetic
log must be reported as its violation, and the clean log must pass."""
import json, os, subprocess, sys, tempfile

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checker.py")
T0 = 1_800_000_000_000  # ms


def iso(ms):
    import datetime
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def send(body, mid, at, rc=0):
    r = {"op": "send", "q": "t", "pid": 1, "t0": at * 1000, "t1": (at + 2) * 1000, "rc": rc,
         "bodies": [body]}
    if rc == 0:
        r["out"] = [{"id": mid, "duplicate": False}]
    return r


def recv(mid, body, count, at, vt=1000, pid=2):
    return {"op": "receive", "q": "t", "pid": pid, "t0": at * 1000, "t1": (at + 2) * 1000, "rc": 0,
            "out": [{"id": mid, "receipt": f"{mid}.{count:016x}", "body": body, "receive_count": count,
                     "visible_until": iso(at + 1 + vt), "last_received_at": iso(at + 1)}]}


def ack(mid, count, at, rc=0, stale=()):
    return {"op": "ack", "q": "t", "pid": 3, "t0": at * 1000, "t1": (at + 2) * 1000, "rc": rc,
            "receipts": [f"{mid}.{count:016x}"], "stale": list(stale)}


def kill(pid, at, what="/build/q receive t -n 1"):
    return {"op": "kill", "pid": pid, "t0": at * 1000, "what": what}


def work_begin(mid, body, count, at, pid=40, ppid=30):
    return {"op": "work_begin", "q": "t", "id": mid, "receipt": f"{mid}.{count:016x}",
            "count": count, "body": body, "pid": pid, "ppid": ppid, "t0": at * 1000}


def work_end(mid, count, at, rc=0, pid=40, ppid=30):
    return {"op": "work_end", "receipt": f"{mid}.{count:016x}", "pid": pid, "ppid": ppid,
            "t1": at * 1000, "rc": rc}


def killed_recv(pid, at):
    """A receive killed before its output was logged (exit 137)."""
    return {"op": "receive", "q": "t", "pid": pid, "t0": at * 1000, "t1": (at + 5) * 1000,
            "rc": 137}


def dead_letter(mid, body, count=1):
    return {"id": mid, "body": body, "receive_count": count}


def final(dead=(), visible=0):
    return [{"op": "dlq", "q": "t", "out": list(dead)},
            {"op": "final_stats", "q": "t", "out": {"visible": visible, "in_flight": 0, "delayed": 0,
                                                    "dead": len(dead), "expired": 0}}]


def clean():
    return [send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), ack("m1", 1, T0 + 20),
            send("b", "m2", T0), recv("m2", "b", 1, T0 + 10),
            {"op": "abandon", "receipt": "m2.0000000000000001", "t0": (T0 + 15) * 1000},
            recv("m2", "b", 2, T0 + 2000), ack("m2", 2, T0 + 2010)] + final()


def stage_out(*pairs):
    """q work --to: DST's messages, each body "ID RECEIPT" of the run that wrote it."""
    return {"op": "stage_out", "q": "t.out",
            "out": [{"id": f"o{i}", "body": f"{mid} {mid}.{count:016x}"}
                    for i, (mid, count) in enumerate(pairs)]}


def staged(*extra):
    """m1 run by q work (exit 0, settled by its ack), m2 acked by a consumer."""
    return [send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10), work_end("m1", 1, T0 + 20),
            send("b", "m2", T0), recv("m2", "b", 1, T0 + 10), ack("m2", 1, T0 + 20)] + list(extra) + final()


CASES = {
    "clean": (clean(), None),
    "lost": ([send("a", "m1", T0)] + final(), "lost"),
    "lost-after-delivery": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                             {"op": "abandon", "receipt": "m1.0000000000000001", "t0": 0}] + final(), "lost"),
    "invented": (clean()[:-2] + [recv("m9", "never-sent", 1, T0 + 50), ack("m9", 1, T0 + 60)] + final(),
                 "invented"),
    "failed-send-delivered": ([send("a", "m1", T0, rc=74), recv("m1", "a", 1, T0 + 10),
                               ack("m1", 1, T0 + 20)] + final(), "invented"),
    "lease-overlap": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=5000),
                       {"op": "abandon", "receipt": "m1.0000000000000001", "t0": 0},
                       recv("m1", "a", 2, T0 + 100), ack("m1", 2, T0 + 200)] + final(), "lease-overlap"),
    "redelivered-after-ack": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), ack("m1", 1, T0 + 20),
                               recv("m1", "a", 2, T0 + 3000), ack("m1", 2, T0 + 3010)] + final(),
                              "redelivered-after-ack"),
    "unexplained-duplicate": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                               recv("m1", "a", 2, T0 + 3000), ack("m1", 2, T0 + 3010)] + final(),
                              "unexplained-duplicate"),
    "unseen-delivery-no-crash": ([send("a", "m1", T0), recv("m1", "a", 3, T0 + 10),
                                  ack("m1", 3, T0 + 20)] + final(), "unexplained-duplicate"),
    "not-drained": (clean()[:-2] + final(visible=3), "not-drained"),
    "unexpected-exit": (clean() + [{"op": "receive", "q": "t", "pid": 9, "t0": 0, "t1": 0, "rc": 74}],
                        "unexpected-exit"),
    # ---- the checker excuses only what the logs prove ----
    # A redelivery after a delivery with no outcome: its receive (pid 2) was
    # killed after printing: excused; a kill of some other process is not.
    "redelivery-receiver-killed": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, pid=2),
                                    kill(2, T0 + 13), recv("m1", "a", 2, T0 + 3000, pid=5),
                                    ack("m1", 2, T0 + 3010)] + final(), None),
    "redelivery-other-killed": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, pid=2),
                                 kill(7, T0 + 13), recv("m1", "a", 2, T0 + 3000, pid=5),
                                 ack("m1", 2, T0 + 3010)] + final(), "unexplained-duplicate"),
    # q work's command began, never ended, nothing was killed: not a crash.
    "work-redelivery-no-kill": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10),
                                 recv("m1", "a", 2, T0 + 3000, pid=5), ack("m1", 2, T0 + 3010)]
                                + final(), "unexplained-duplicate"),
    "work-redelivery-command-killed": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10),
                                        kill(40, T0 + 50, "bash handler.sh"),
                                        recv("m1", "a", 2, T0 + 3000, pid=5),
                                        ack("m1", 2, T0 + 3010)] + final(), None),
    # An ack that died of a signal nobody sent (a crash of q): reported, no excuse.
    "ack-signalled-unlogged": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                                ack("m1", 1, T0 + 20, rc=139), recv("m1", "a", 2, T0 + 3000, pid=5),
                                ack("m1", 2, T0 + 3010)] + final(), "unexpected-exit"),
    # A receive-count gap (delivery 2 never seen): only a receiver killed
    # between deliveries 1 and 3 explains it, one kill per unseen delivery.
    "gap-receiver-killed": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                             {"op": "abandon", "receipt": "m1.0000000000000001", "t0": (T0 + 15) * 1000},
                             killed_recv(8, T0 + 1500), kill(8, T0 + 1504),
                             recv("m1", "a", 3, T0 + 3000, pid=5), ack("m1", 3, T0 + 3010)]
                            + final(), None),
    "gap-kill-elsewhere": ([send("a", "m1", T0), killed_recv(8, T0 - 500), kill(8, T0 - 496),
                            recv("m1", "a", 1, T0 + 10),
                            {"op": "abandon", "receipt": "m1.0000000000000001", "t0": (T0 + 15) * 1000},
                            recv("m1", "a", 3, T0 + 3000, pid=5), ack("m1", 3, T0 + 3010)] + final(),
                           "unexplained-duplicate"),
    "gap-two-unseen-one-kill": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                                 {"op": "abandon", "receipt": "m1.0000000000000001", "t0": (T0 + 15) * 1000},
                                 killed_recv(8, T0 + 1500), kill(8, T0 + 1504),
                                 recv("m1", "a", 4, T0 + 6000, pid=5), ack("m1", 4, T0 + 6010)]
                                + final(), "unexplained-duplicate"),
    # Collected acks are checked.
    "acked-and-dead": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), ack("m1", 1, T0 + 20)]
                       + final(dead=[dead_letter("m1", "a")]), "acked-and-dead"),
    "acked-twice": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                     recv("m1", "a", 2, T0 + 2000, pid=5), ack("m1", 1, T0 + 2100),
                     ack("m1", 2, T0 + 2200)] + final(), "acked-twice"),
    "one-body-two-ids": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), ack("m1", 1, T0 + 20),
                          recv("m2", "a", 1, T0 + 30), ack("m2", 1, T0 + 40)] + final(), "one-body-two-ids"),
    # q work --to: the output exactly once per ack, never without it.
    "stage-clean": (staged(stage_out(("m1", 1))), None),
    "stage-output-missing": (staged(stage_out()), "stage-output-missing"),
    "stage-output-twice": (staged(stage_out(("m1", 1), ("m1", 1))), "stage-output-twice"),
    "stage-output-without-ack": (staged(stage_out(("m1", 1), ("m2", 1))), "stage-without-success"),
    "stage-output-of-failed-run": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10),
                                    work_end("m1", 1, T0 + 20, rc=1), work_begin("m1", "a", 2, T0 + 500),
                                    work_end("m1", 2, T0 + 520)] + [stage_out(("m1", 1))] + final(),
                                   "stage-without-success"),
}

failed = 0
for name, (records, want) in CASES.items():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "ops.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        p = subprocess.run([sys.executable, CHECKER, d, "--json", os.path.join(d, "s.json")],
                           capture_output=True, text=True)
        summary = json.load(open(os.path.join(d, "s.json")))
        if want is None:
            ok = p.returncode == 0
        else:
            ok = p.returncode == 1 and summary["violations"].get(want, 0) > 0
        if not ok:
            failed += 1
            print(f"checker_selftest: {name}: expected {want or 'a pass'}, got exit {p.returncode} "
                  f"{summary['violations']}\n{p.stderr}", file=sys.stderr)
print(f"checker_selftest: {len(CASES) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
