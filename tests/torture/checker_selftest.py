#!/usr/bin/env python3
"""The checker catches what it must: each planted fault in a small synthetic
log must be reported as its violation, and the clean log must pass."""
import contextlib, importlib.util, io, json, os, subprocess, sys, tempfile

# CHECKER_PY: another checker.py to judge (a mutated copy, to see this test fail).
CHECKER = os.environ.get("CHECKER_PY") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "checker.py")
_spec = importlib.util.spec_from_file_location("checker", CHECKER)
checker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checker)
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


def dead_letter(mid, body, count=1):
    return {"id": mid, "body": body, "receive_count": count}


def killed_recv(pid, at, n=None):
    """A receive (-n N) killed before its output was logged (exit 137)."""
    r = {"op": "receive", "q": "t", "pid": pid, "t0": at * 1000, "t1": (at + 5) * 1000, "rc": 137}
    if n is not None:
        r["n"] = n
    return r


def final(dead=(), visible=0, sent=None, expired=0, dead_count=None, in_flight=0):
    stats = {"visible": visible, "in_flight": in_flight, "delayed": 0,
             "dead": len(dead) if dead_count is None else dead_count, "expired": expired}
    if sent is not None:
        stats["sent"] = sent
    return [{"op": "dlq", "q": "t", "out": list(dead)}, {"op": "final_stats", "q": "t", "out": stats}]


def abandon(mid, count, at):
    return {"op": "abandon", "receipt": f"{mid}.{count:016x}", "t0": at * 1000}


def gap(mid, body, kill_at, n=None):
    """m's delivery 2 never seen; a receive (pid 8, -n N) killed at kill_at."""
    return [send(body, mid, T0), recv(mid, body, 1, T0 + 10), abandon(mid, 1, T0 + 15),
            killed_recv(8, kill_at, n), kill(8, kill_at + 4),
            recv(mid, body, 3, T0 + 3000, pid=5), ack(mid, 3, T0 + 3010)]


def two_runs(kill_at=None, runs_at=(10, 20)):
    """Two q works (pids 30, 31) run m1 at once, both exit 0; q work 30 killed at kill_at."""
    a, b = runs_at
    recs = [send("a", "m1", T0), work_begin("m1", "a", 1, T0 + a, pid=40, ppid=30),
            work_begin("m1", "a", 2, T0 + b, pid=41, ppid=31),
            work_end("m1", 2, T0 + b + 100, pid=41, ppid=31),
            work_end("m1", 1, T0 + b + 200, pid=40, ppid=30)]
    if kill_at is not None:
        recs.append(kill(30, kill_at, "/build/q work t -j 1 -q"))
    return recs + final()


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
    "stage-output-and-dead": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10),
                               work_end("m1", 1, T0 + 20, rc=65), stage_out(("m1", 1))]
                              + final(dead=[dead_letter("m1", "a")]), "stage-output-and-dead"),
    "stage-output-and-ack": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), ack("m1", 1, T0 + 20),
                              stage_out(("m1", 1))] + final(), "stage-output-and-ack"),
    "stage-bad-output": (staged({"op": "stage_out", "q": "t.out",
                                 "out": [{"id": "o1", "body": "m1 m1.0000000000000001 x"}]}),
                         "stage-bad-output"),
    # ---- the end state ----
    "expired": (clean()[:-2] + final(expired=1), "expired"),
    "dead-count": (clean()[:-2] + final(dead_count=2), "dead-count"),
    "in-flight-after-drain": (clean()[:-2] + final(in_flight=1), "not-drained"),
    "sent-counter-clean": (clean()[:-2] + final(sent=2), None),
    "sent-counter-low": (clean()[:-2] + final(sent=1), "sent-counter"),
    "sent-counter-high": (clean()[:-2] + final(sent=3), "sent-counter"),
    "no-final-state": (clean()[:-2], "no-final-state"),
    "same-count": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), abandon("m1", 1, T0 + 15),
                    recv("m1", "a", 1, T0 + 3000, pid=5), ack("m1", 1, T0 + 3010)] + final(),
                   "same-count"),
    "wrong-id": ([send("a", "m1", T0), recv("m2", "a", 1, T0 + 10), ack("m2", 1, T0 + 20)] + final(),
                 "wrong-id"),
    "double-ack": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), ack("m1", 1, T0 + 20),
                    ack("m1", 1, T0 + 30)] + final(), "double-ack"),
    "bad-log-ack-of-nothing": (clean() + [ack("m7", 1, T0 + 40)], "bad-log"),
    "bad-send-output": (clean() + [{"op": "send", "q": "t", "pid": 1, "t0": T0 * 1000, "t1": T0 * 1000,
                                    "rc": 0, "bodies": ["x", "y"], "out": []}], "bad-output"),
    "unparseable-log": (clean() + ["{not json"], "unparseable-log"),
    # ---- gap timing: the killed receiver ran between the deliveries around the gap ----
    "gap-kill-after": (gap("m1", "a", T0 + 3100) + final(), "unexplained-duplicate"),
    "gap-kill-between": (gap("m1", "a", T0 + 1500) + final(), None),
    # One killed `receive -n 1` explains one unseen delivery, of one message...
    "gap-one-kill-two-messages": (gap("m1", "a", T0 + 1500)
                                  + gap("m2", "b", T0 + 1500)[:2] + gap("m2", "b", T0 + 1500)[2:3]
                                  + gap("m2", "b", T0 + 1500)[5:] + final(), "unexplained-duplicate"),
    # ... a killed `receive -n 2` one of each of two messages.
    "gap-one-kill-n2-two-messages": (gap("m1", "a", T0 + 1500, n=2)
                                     + gap("m2", "b", T0 + 1500)[:2] + gap("m2", "b", T0 + 1500)[2:3]
                                     + gap("m2", "b", T0 + 1500)[5:] + final(), None),
    # A killed q work -j 2 explains two, one -j 1 (with a global option first) one.
    "gap-work-kill-j2": (gap("m1", "a", T0 + 1500)[:3] + [kill(31, T0 + 1500, "/b/q work t -j 2 -q")]
                         + gap("m1", "a", T0 + 1500)[5:] + gap("m2", "b", T0 + 1500)[:3]
                         + gap("m2", "b", T0 + 1500)[5:] + final(), None),
    "gap-work-kill-j1": (gap("m1", "a", T0 + 1500)[:3] + [kill(31, T0 + 1500, "/b/q work t -j 1")]
                         + gap("m1", "a", T0 + 1500)[5:] + gap("m2", "b", T0 + 1500)[:3]
                         + gap("m2", "b", T0 + 1500)[5:] + final(), "unexplained-duplicate"),
    # (a q work is one whatever global options come first)
    "gap-work-kill-global-option": (gap("m1", "a", T0 + 1500)[:3]
                                    + [kill(31, T0 + 1500, "/b/q --lock-timeout 5s work t")]
                                    + gap("m1", "a", T0 + 1500)[5:] + final(), None),
    # One receiver never took one message twice: a killed `receive -n 2` that ran
    # across two gaps of one message explains only one of them.
    "gap-one-kill-one-message-twice": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10), abandon("m1", 1, T0 + 15),
                                        dict(killed_recv(8, T0 + 1500, n=2), t1=(T0 + 5000) * 1000),
                                        kill(8, T0 + 4990),
                                        recv("m1", "a", 3, T0 + 3000, pid=5), abandon("m1", 3, T0 + 3005),
                                        recv("m1", "a", 5, T0 + 4500, pid=5), ack("m1", 5, T0 + 4510)]
                                       + final(), "unexplained-duplicate"),
    # A receiver whose clock ran ahead: q's times say the lease was over, the
    # real times say its receive was over 5 s before the lease ended.
    "lease-overlap-real-time": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=5000),
                                 abandon("m1", 1, T0 + 15),
                                 dict(recv("m1", "a", 2, T0 + 100, pid=5),
                                      out=[dict(recv("m1", "a", 2, T0 + 100)["out"][0],
                                                last_received_at=iso(T0 + 6000),
                                                visible_until=iso(T0 + 7000))]),
                                 ack("m1", 2, T0 + 200)] + final(), "lease-overlap"),
    # A receipt a consumer received and some q work's command ran (a mixed-up
    # log): no rule explains its redelivery.
    "redelivery-after-odd-outcome": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                                      work_end("m1", 1, T0 + 20), recv("m1", "a", 2, T0 + 3000, pid=5),
                                      ack("m1", 2, T0 + 3010)] + final(), "unexplained-duplicate"),
    # ---- q work: two runs of one message at once ----
    "work-two-runs-late-kill": (two_runs(kill_at=T0 + 10_000), "lease-overlap"),
    "work-two-runs-no-kill": (two_runs(), "lease-overlap"),
    "work-two-runs-acked-twice": (two_runs(kill_at=T0 + 10_000), "acked-twice"),
    "work-two-runs-late-kill-unexplained": (two_runs(kill_at=T0 + 10_000), "unexplained-duplicate"),
    # q work 30 killed before the second run: its lease was released, its ack never came.
    "work-rerun-after-kill": (two_runs(kill_at=T0 + 15), None),
    # Its command ended (exit 0), then q work 30 was killed before it acked: one ack.
    "work-killed-before-ack": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10, pid=40, ppid=30),
                                work_end("m1", 1, T0 + 20, pid=40, ppid=30),
                                kill(30, T0 + 25, "/build/q work t -j 1"),
                                work_begin("m1", "a", 2, T0 + 40, pid=41, ppid=31),
                                work_end("m1", 2, T0 + 60, pid=41, ppid=31)] + final(), None),
    # Its command logged work_end (exit 0), then was killed before it exited:
    # q work released it, a second run settled it: one ack.
    "work-command-killed-after-end": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10, pid=40, ppid=30),
                                       work_end("m1", 1, T0 + 20, pid=40, ppid=30),
                                       kill(40, T0 + 21, "bash handler.sh"),
                                       work_begin("m1", "a", 2, T0 + 40, pid=41, ppid=30),
                                       work_end("m1", 2, T0 + 60, pid=41, ppid=30)] + final(), None),
    "work-redelivery-late-command-kill": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10),
                                           recv("m1", "a", 2, T0 + 3000, pid=5),
                                           kill(40, T0 + 4000, "bash handler.sh"),
                                           ack("m1", 2, T0 + 3010)] + final(), "unexplained-duplicate"),
    "redelivery-receiver-killed-late": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, pid=2),
                                         recv("m1", "a", 2, T0 + 3000, pid=5), kill(2, T0 + 5000),
                                         ack("m1", 2, T0 + 3010)] + final(), "unexplained-duplicate"),
    # A killed op is excused only by a kill logged while it ran.
    "ack-killed-kill-logged-later": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10),
                                      dict(ack("m1", 1, T0 + 20, rc=137), pid=6), kill(6, T0 + 9000),
                                      recv("m1", "a", 2, T0 + 3000, pid=5), ack("m1", 2, T0 + 3010)]
                                     + final(), "unexpected-exit"),
    # ---- stale only once the lease is over ----
    "stale-while-leased": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=5000),
                            ack("m1", 1, T0 + 20, rc=3, stale=["m1.0000000000000001"]),
                            recv("m1", "a", 2, T0 + 6000, pid=5), ack("m1", 2, T0 + 6010)] + final(),
                           "stale-while-leased"),
    # A rogue clock took it early (the overlap): the holder's stale answer is right.
    "stale-superseded": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=600_000),
                                       dict(recv("m1", "a", 2, T0 + 100, pid=5),
                                            out=[dict(recv("m1", "a", 2, T0 + 100)["out"][0],
                                                      last_received_at=iso(T0 + 3_700_000),
                                                      visible_until=iso(T0 + 3_701_000))]),
                                       ack("m1", 2, T0 + 200),
                                       ack("m1", 1, T0 + 300, rc=3, stale=["m1.0000000000000001"])]
                                      + final(), "only:lease-overlap"),
    "stale-after-lease": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=500),
                           ack("m1", 1, T0 + 600, rc=3, stale=["m1.0000000000000001"]),
                           recv("m1", "a", 2, T0 + 700, pid=5), ack("m1", 2, T0 + 710)] + final(), None),
    "stage-output-of-failed-run": ([send("a", "m1", T0), work_begin("m1", "a", 1, T0 + 10),
                                    work_end("m1", 1, T0 + 20, rc=1), work_begin("m1", "a", 2, T0 + 500),
                                    work_end("m1", 2, T0 + 520)] + [stage_out(("m1", 1))] + final(),
                                   "stage-without-success"),
}

# With --clock-steps 5: a delivery that came back with no outcome is excused only
# by a step: when it came at most 5 s before the previous lease ended.
STEPPED = {
    "step-redelivery-within-step": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=6000),
                                     recv("m1", "a", 2, T0 + 3000, pid=5), ack("m1", 2, T0 + 3010)]
                                    + final(), None),
    "step-redelivery-beyond-step": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=60_000),
                                     recv("m1", "a", 2, T0 + 3000, pid=5), ack("m1", 2, T0 + 3010)]
                                    + final(), "lease-overlap"),
    "step-redelivery-beyond-step-unexplained": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10,
                                                                            vt=60_000),
                                                 recv("m1", "a", 2, T0 + 3000, pid=5),
                                                 ack("m1", 2, T0 + 3010)] + final(),
                                                "unexplained-duplicate"),
    "step-stale-while-leased": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=60_000),
                                 ack("m1", 1, T0 + 20, rc=3, stale=["m1.0000000000000001"]),
                                 recv("m1", "a", 2, T0 + 61_000, pid=5), ack("m1", 2, T0 + 61_010)]
                                + final(), "stale-while-leased"),
    "step-stale-within-step": ([send("a", "m1", T0), recv("m1", "a", 1, T0 + 10, vt=3000),
                                ack("m1", 1, T0 + 20, rc=3, stale=["m1.0000000000000001"]),
                                recv("m1", "a", 2, T0 + 4000, pid=5), ack("m1", 2, T0 + 4010)]
                               + final(), None),
}
CASES = {name: (recs, want, []) for name, (recs, want) in CASES.items()}
CASES.update({name: (recs, want, ["--clock-steps", "5"]) for name, (recs, want) in STEPPED.items()})

def judge(records, args):
    """Run the checker on a log of records, in this process (fast): (exit, summary, stderr)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "ops.jsonl"), "w") as f:
            for r in records:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            c = checker.Checker(clock_steps=float(args[1]) if args else None)
            c.load(d)
            c.run()
            summary = c.report(quiet=True)
        return (0 if summary["ok"] else 1), summary, err.getvalue()


failed = 0
for name, (records, want, args) in CASES.items():
    rc, summary, stderr = judge(records, args)
    if want is None:
        ok = rc == 0
    elif want.startswith("only:"):
        ok = rc == 1 and set(summary["violations"]) == {want[5:]}
    else:
        ok = rc == 1 and summary["violations"].get(want, 0) > 0
    if not ok:
        failed += 1
        print(f"checker_selftest: {name}: expected {want or 'a pass'}, got exit {rc} "
              f"{summary['violations']}\n{stderr}", file=sys.stderr)
# The command line too: its exit status and --json summary.
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "ops.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in CASES["lost"][0])
    p = subprocess.run([sys.executable, CHECKER, d, "--json", os.path.join(d, "s.json")],
                       capture_output=True, text=True)
    if p.returncode != 1 or json.load(open(os.path.join(d, "s.json")))["violations"].get("lost") != 1:
        failed += 1
        print(f"checker_selftest: checker.py on a lost message exited {p.returncode}: {p.stderr}",
              file=sys.stderr)
print(f"checker_selftest: {len(CASES) + 1 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
