#!/usr/bin/env python3
"""The torture checker: reads the operation logs of a scenario and proves (or
refutes) q's delivery promise.

Usage: checker.py LOGDIR [--clock-steps MAX_SECONDS] [--json SUMMARY_FILE] [--quiet]

Every *.jsonl file in LOGDIR holds one JSON object a line, one per operation:

  {"op":"send","q":Q,"pid":P,"t0":us,"t1":us,"rc":RC,"bodies":[...],"out":[{"id":..,"duplicate":..}]}
  {"op":"receive","q":Q,"pid":P,"t0":us,"t1":us,"rc":RC,"out":[<q receive --json objects>]}
  {"op":"ack","q":Q,"pid":P,"t0":us,"t1":us,"rc":RC,"receipts":[...],"stale":[...]}
  {"op":"extend","q":Q,"pid":P,"t0":us,"t1":us,"rc":RC,"receipt":R,"out":{"visible_until":..}}
  {"op":"nack","q":Q,"pid":P,"t0":us,"t1":us,"rc":RC,"receipt":R}
  {"op":"abandon","receipt":R,"t0":us}          a consumer drops a delivery on purpose (a crash)
  {"op":"work_begin","q":Q,"id":ID,"receipt":R,"count":N,"body":B,"pid":P,"ppid":W,"t0":us}
  {"op":"work_end","receipt":R,"pid":P,"ppid":W,"t1":us,"rc":RC}   the handler's exit status
  {"op":"kill","pid":P,"t0":us,"what":CMD}      the killer sent SIGKILL (CMD: its first words)
  {"op":"dlq","q":Q,"out":[<q dlq list --json objects>]}       final dead letters
  {"op":"final_stats","q":Q,"out":{<q stats --json>}}          after the drain
  {"op":"config","allow":{"send":[0,75],...}}   extra exit codes a scenario expects
  {"op":"stage_out","q":DST,"out":[<q peek --json objects>]}   q work --to: DST at the end,
                                                each body "ID RECEIPT" of the run that wrote it

t0/t1 are microseconds since the epoch (bash's $EPOCHREALTIME) around the
process; q's own times (last_received_at, visible_until) are milliseconds.

The promise checked (the issue's contract):
  1. every message whose send exited 0 is acked (or done by a `q work` handler)
     or in the dead-letter queue at the end;
  2. nothing is delivered that was never sent: every delivered body belongs to a
     send that exited 0 or was killed (outcome unknown); one body, one id;
  3. no two deliveries of one message overlap while both leases are unexpired:
     a delivery's receive time (q's clock) is at or after the previous
     delivery's lease end (as extended), unless that one was released by nack;
     and, in real time, the new delivery's process did not end before the old
     lease ran out; a `q work` delivery's lease (kept by its heartbeat) lasts
     until its command ended, unless that q work was killed first;
  4. every duplicate delivery is explained: by a lease that ran out (the ack
     came late: stale), a nack, a crash (a consumer abandoned it, or its ack,
     its receive or its `q work` was killed); never after a successful ack.
     A crash excuses only what the kill log proves: the redelivered delivery's
     own process (its receive, its ack or nack, its `q work` or command) has a
     "kill" record logged while it ran and at or before the redelivery; a
     receive-count gap (deliveries never seen) needs a killed receiver that
     ran between the deliveries around the gap, one per unseen delivery, and a
     killed receiver explains at most as many unseen deliveries (of different
     messages) as it could take (`receive -n N`: N; `q work -j N`: N; a
     command: 1). A process that died of a signal nobody logged sending is a
     crash of q, never an excuse. With --clock-steps, a delivery that came back
     with no outcome is excused only when it came at most the largest step
     before its lease ended;
  5. the queue is empty after the drain (visible, in flight, delayed all 0),
     its dead count matches the dead letters listed, nothing expired; no
     message is both acked (exit 0) and dead-lettered, none acked twice (a
     `q work` run that exited 0 counts as an ack unless its q work was killed
     before it could ack); an ack answered "stale" came after the lease ended
     (by q's clock, within the largest step with --clock-steps) or after a
     later delivery of its message;
  6. no command exited with a code the scenario did not allow;
  7. q work --to (when the log has stage_out): every output on DST was written
     by a run of its message that exited 0, no message has two outputs, none
     has an output and a consumer's ack or a dead letter, and every message
     settled by q work (its run exited 0, never acked by a consumer nor
     dead-lettered) has its output: exactly once per ack, never without it.
Exit status 0 when every check holds, 1 when any fails, 2 on unusable logs.
"""
import argparse
import collections
import datetime
import glob
import json
import os
import sys

# Died of a signal (bash's wait: 128 + N). Whether the killer sent it is
# Checker.killed(): only a logged kill is an excuse.
SIGNALLED = lambda rc: rc is not None and (rc >= 128 or rc < 0)

# A q work killed just after it started a command, before the command logged
# work_begin, still ends that delivery's lease: its kill may come this long
# (us) before the work_begin record.
FORK_SLACK_US = 1_000_000

DEFAULT_ALLOWED = {
    "send": {0},
    "receive": {0, 1},
    "ack": {0, 3},
    "extend": {0, 3},
    "nack": {0, 3},
}


def kill_kind(what):
    """What the killer killed, from the first words of its command line: "work"
    (a q work), "command" (a command q work runs) or "q" (any other q command)."""
    words = what.split()
    if words and os.path.basename(words[0]) == "q":
        # The command is the first word that is no global option or its value
        # (q --lock-timeout 5s work ...).
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if "=" not in rest[0] else rest[1:]
        return "work" if rest and rest[0] == "work" else "q"
    return "command"


def work_jobs(what):
    """How many messages a killed `q work` could hold: its -j (1 when not shown)."""
    words = what.split()
    for i, w in enumerate(words):
        if w in ("-j", "--jobs") and i + 1 < len(words) and words[i + 1].isdigit():
            return int(words[i + 1])
        if w.startswith("--jobs=") and w[7:].isdigit():
            return int(w[7:])
        if w.startswith("-j") and w[2:].isdigit():
            return int(w[2:])
    return 1


def parse_time_ms(text):
    if text is None:
        return None
    # RFC 3339 UTC with milliseconds: 2026-11-30T08:00:00.000Z
    dt = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(round(dt.timestamp() * 1000))


class Delivery:
    __slots__ = ("id", "receipt", "count", "body", "recv_ms", "lease_end_ms", "t0", "t1",
                 "source", "pid", "ppid", "outcome", "outcome_t", "nacked_t0", "extends",
                 "stale_t1", "maybe_settled_t0")

    def __init__(self, **kw):
        self.outcome = None  # 'acked', 'stale', 'nacked', 'abandoned', 'ack-killed', 'work-ok', ...
        self.outcome_t = None
        self.nacked_t0 = None
        self.extends = []
        self.stale_t1 = None          # end of the first ack answered "stale"
        self.maybe_settled_t0 = None  # start of a killed ack or nack (it may have committed)
        for k, v in kw.items():
            setattr(self, k, v)


class Checker:
    def __init__(self, clock_steps=None):
        # Largest clock step of the run (seconds), or None: clocks were not stepped.
        self.clock_steps = clock_steps is not None
        self.clock_step_ms = int((clock_steps or 0) * 1000)
        self.violations = collections.defaultdict(list)
        self.allowed = {k: set(v) for k, v in DEFAULT_ALLOWED.items()}
        self.records = []
        self.stats = collections.Counter()
        self.kills = collections.defaultdict(list)   # pid -> times (us) of its kill records

    def kill_between(self, pid, lo=None, hi=None):
        """The killer logged a kill of pid at a time in [lo, hi] (None: unbounded)."""
        return any((lo is None or t >= lo) and (hi is None or t <= hi)
                   for t in self.kills.get(pid, ()))

    def killed(self, r):
        """The operation of record r died of a signal that the killer logged
        sending while it ran."""
        return (SIGNALLED(r.get("rc"))
                and self.kill_between(r.get("pid"), r.get("t0"), r.get("t1")))

    def violation(self, kind, text):
        self.violations[kind].append(text)

    def load(self, logdir):
        files = sorted(glob.glob(os.path.join(logdir, "*.jsonl")))
        if not files:
            print(f"checker: no *.jsonl logs in {logdir}", file=sys.stderr)
            sys.exit(2)
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        # A consumer killed mid-append can leave a torn last line;
                        # anything else is q printing something that is not JSON.
                        self.violation("unparseable-log",
                                       f"{os.path.basename(path)}:{n}: {e}: {line[:200]}")
                        continue
                    self.records.append(rec)
        for rec in self.records:
            if rec.get("op") == "config":
                for op, codes in rec.get("allow", {}).items():
                    self.allowed.setdefault(op, set()).update(codes)

    def run(self):
        sends_ok = {}           # body -> id (send exited 0)
        sends_unknown = set()   # bodies of killed sends
        sends_failed = {}       # body -> rc (send failed with a definite error)
        ids_by_body = collections.defaultdict(set)
        deliveries = collections.defaultdict(list)  # id -> [Delivery]
        by_receipt = {}
        acks_ok = collections.Counter()            # id -> successful acks
        killed_receives = 0
        final_stats = {}
        stage_out = None                           # q work --to: DST's messages at the end
        dead = {}                                  # id -> body
        work_kills = 0
        rc_count = collections.Counter()

        recs = sorted(self.records, key=lambda r: (r.get("t0") or r.get("t1") or 0))
        for r in recs:
            if r.get("op") == "kill":
                self.kills[r["pid"]].append(r["t0"])
                self.stats["kills"] += 1
        work_begun_pids = {r.get("pid") for r in recs if r.get("op") == "work_begin"}
        # Killed processes that may have taken a delivery nobody logged (a
        # receive killed before its output was logged, a q work, a command of
        # q work killed before it logged work_begin): (start us or None, end us,
        # how many messages it could have taken).
        blind_receivers = []
        for r in recs:
            op = r.get("op")
            rc = r.get("rc")
            if op in self.allowed:
                rc_count[(op, rc)] += 1
                self.stats["ops"] += 1
                if not self.killed(r) and rc not in self.allowed[op]:
                    how = (f"died of signal {rc - 128} that no kill record explains"
                           if SIGNALLED(rc) else f"exited {rc}")
                    self.violation("unexpected-exit",
                                   f"{op} pid {r.get('pid')} {how}: {r.get('err', '')[:300]}")
                if op == "receive" and self.killed(r):
                    blind_receivers.append((r.get("t0"), r.get("t1"), int(r.get("n") or 1)))
            if op == "kill":
                kind = kill_kind(r.get("what", ""))
                if kind == "work":
                    work_kills += 1
                    blind_receivers.append((None, r.get("t0"), work_jobs(r.get("what", ""))))
                elif kind == "command" and r["pid"] not in work_begun_pids:
                    blind_receivers.append((None, r.get("t0"), 1))

        for r in recs:
            op = r.get("op")
            rc = r.get("rc")
            if op == "send":
                bodies = r.get("bodies", [])
                if rc == 0:
                    out = r.get("out") or []
                    if len(out) != len(bodies):
                        self.violation("bad-output", f"send of {len(bodies)} bodies printed "
                                                     f"{len(out)} ids (pid {r.get('pid')})")
                    for body, o in zip(bodies, out):
                        sends_ok[body] = o["id"]
                        ids_by_body[body].add(o["id"])
                elif self.killed(r):
                    sends_unknown.update(bodies)
                else:
                    for body in bodies:
                        sends_failed[body] = rc
            elif op == "receive":
                if self.killed(r):
                    killed_receives += 1
                if rc != 0:
                    continue
                for m in r.get("out") or []:
                    d = Delivery(id=m["id"], receipt=m["receipt"], count=m["receive_count"],
                                 body=m.get("body"), recv_ms=parse_time_ms(m.get("last_received_at")),
                                 lease_end_ms=parse_time_ms(m.get("visible_until")),
                                 t0=r["t0"], t1=r["t1"], source="receive", pid=r.get("pid"),
                                 ppid=None)
                    deliveries[d.id].append(d)
                    by_receipt[d.receipt] = d
                    ids_by_body[d.body].add(d.id)
            elif op == "work_begin":
                d = Delivery(id=r["id"], receipt=r["receipt"], count=int(r["count"]),
                             body=r.get("body"), recv_ms=None, lease_end_ms=None,
                             t0=r["t0"], t1=r["t0"], source="work", pid=r.get("pid"),
                             ppid=r.get("ppid"))
                deliveries[d.id].append(d)
                by_receipt[d.receipt] = d
                ids_by_body[d.body].add(d.id)
            elif op == "dlq":
                for m in r.get("out") or []:
                    dead[m["id"]] = m.get("body")
                    ids_by_body[m.get("body")].add(m["id"])
            elif op == "final_stats":
                final_stats = r.get("out") or {}
            elif op == "stage_out":
                stage_out = (stage_out or []) + list(r.get("out") or [])

        # Outcomes of deliveries (second pass: receipts are known now).
        for r in recs:
            op = r.get("op")
            rc = r.get("rc")
            if op == "ack":
                stale = set(r.get("stale") or [])
                for receipt in r.get("receipts", []):
                    d = by_receipt.get(receipt)
                    if d is None:
                        self.violation("bad-log", f"ack of a receipt never delivered: {receipt}")
                        continue
                    if rc == 0 or (rc == 3 and receipt not in stale):
                        if d.outcome == "acked":
                            self.violation("double-ack", f"receipt {receipt} acked twice")
                        d.outcome, d.outcome_t = "acked", r["t1"]
                        acks_ok[d.id] += 1
                    elif rc == 3:
                        d.outcome, d.outcome_t = "stale", r["t1"]
                        if d.stale_t1 is None:
                            d.stale_t1 = r["t1"]
                    elif self.killed(r):
                        d.outcome = d.outcome or "ack-killed"
                        if d.maybe_settled_t0 is None:
                            d.maybe_settled_t0 = r["t0"]
                    else:
                        d.outcome = d.outcome or f"ack-failed-{rc}"
            elif op == "extend":
                d = by_receipt.get(r.get("receipt"))
                if d is None:
                    continue
                until = parse_time_ms((r.get("out") or {}).get("visible_until")) if rc == 0 else None
                if rc == 0 or self.killed(r):
                    # extend sets the lease to now + BY (it may shorten it); a killed
                    # one may or may not have done so.
                    d.extends.append((r["t0"], rc, until))
            elif op == "nack":
                d = by_receipt.get(r.get("receipt"))
                if d is None:
                    continue
                if rc == 0:
                    d.outcome, d.outcome_t, d.nacked_t0 = "nacked", r["t1"], r["t0"]
                elif self.killed(r):
                    d.outcome = d.outcome or "nack-killed"
                    d.nacked_t0 = d.nacked_t0 or r["t0"]   # it may have released it
                elif rc == 3:
                    d.outcome = d.outcome or "stale"
                    if d.stale_t1 is None:
                        d.stale_t1 = r["t1"]
            elif op == "abandon":
                d = by_receipt.get(r.get("receipt"))
                if d is not None:
                    d.outcome = d.outcome or "abandoned"
            elif op == "work_end":
                d = by_receipt.get(r.get("receipt"))
                if d is not None:
                    d.outcome = "work-ok" if r.get("rc") == 0 else f"work-exit-{r.get('rc')}"
                    d.outcome_t = r.get("t1")

        for ds in deliveries.values():
            for d in ds:
                for _, rc, until in sorted(d.extends, key=lambda e: e[0]):
                    if d.lease_end_ms is None and d.source != "receive":
                        break
                    d.lease_end_ms = until if rc == 0 else None
                    if d.lease_end_ms is None:
                        break  # unknown from here on

        # ---- "stale" only once the lease is over ------------------------------------
        # (or once a later delivery superseded it: whether that one came too
        # early is the lease-overlap rule's to judge)
        for ds in deliveries.values():
            for d in ds:
                if d.stale_t1 is None or d.lease_end_ms is None:
                    continue
                if any(x.count > d.count and x.t0 < d.stale_t1 for x in ds):
                    continue
                if d.nacked_t0 is not None and d.nacked_t0 < d.stale_t1:
                    continue  # released by a nack first
                if d.maybe_settled_t0 is not None and d.maybe_settled_t0 < d.stale_t1:
                    continue  # a killed ack before it may have settled it
                # The ack was over (real time) before the lease ended (q's clock);
                # a clock stepped ahead by up to the largest step may end it early.
                early = d.lease_end_ms - d.stale_t1 / 1000.0 - self.clock_step_ms
                if early > 1:
                    self.violation("stale-while-leased",
                                   f"{d.id}: an ack or nack of receipt {d.receipt} was answered "
                                   f"stale by {d.stale_t1 / 1000.0:.0f} ms (real), while its lease "
                                   f"ran until {d.lease_end_ms}")

        # ---- 2. nothing invented; one body, one id ----------------------------------
        delivered_bodies = {}
        for mid, ds in deliveries.items():
            for d in ds:
                delivered_bodies.setdefault(d.body, mid)
        for body, ids in ids_by_body.items():
            if len(ids) > 1:
                self.violation("one-body-two-ids", f"body {body!r} appears under ids {sorted(ids)}")
        for mid, body in list(dead.items()) + [(m, b) for b, m in delivered_bodies.items()]:
            if body in sends_ok or body in sends_unknown:
                continue
            if body in sends_failed:
                self.violation("invented", f"message {mid} ({body!r}) delivered although its send "
                                           f"failed with exit {sends_failed[body]}")
            else:
                self.violation("invented", f"message {mid} ({body!r}) was never sent")
        for body, mid in sends_ok.items():
            if body in delivered_bodies and delivered_bodies[body] != mid:
                self.violation("wrong-id", f"body {body!r} sent as {mid} delivered as "
                                           f"{delivered_bodies[body]}")

        # ---- 3 + 4. leases and duplicates -----------------------------------------
        dup = collections.Counter()
        gaps = []   # (id, delivery before, delivery after, unseen, candidate receivers)
        for mid, ds in deliveries.items():
            ds.sort(key=lambda d: (d.count, d.t0))
            prev_count = 0
            for k, d in enumerate(ds):
                if d.count <= prev_count:
                    if d.count == prev_count and k > 0:
                        self.violation("same-count", f"{mid}: two deliveries with receive count "
                                                     f"{d.count} ({ds[k-1].receipt}, {d.receipt})")
                gap = d.count - prev_count - 1
                if gap > 0:
                    # Deliveries we never saw: each needs its own killed receiver
                    # that ran between the deliveries around the gap.
                    after_t = ds[k - 1].t0 if k > 0 else None
                    found = [i for i, (start, end, _) in enumerate(blind_receivers)
                             if (after_t is None or end is None or end > after_t)
                             and (start is None or start < d.t1)]
                    gaps.append((mid, prev_count, d.count, gap, found))
                prev_count = d.count
                if k == 0:
                    continue
                p = ds[k - 1]
                self.stats["duplicates"] += 1
                # Never after a successful ack.
                if p.outcome == "acked":
                    self.violation("redelivered-after-ack",
                                   f"{mid}: delivered again (count {d.count}, receipt {d.receipt}) "
                                   f"after receipt {p.receipt} was acked (exit 0)")
                    continue
                # Leases must not overlap.
                released = p.outcome == "nacked" or p.nacked_t0 is not None
                # The latest real time the new delivery can have happened: its
                # receive's end, or when its q work's command began.
                d_by = d.t1 if d.source == "receive" else d.t0
                if (not released and p.source == "work" and p.outcome_t is not None
                        and not self.clock_steps and d_by < p.outcome_t
                        and not self.kill_between(p.ppid, p.t0 - FORK_SLACK_US, d_by)):
                    # q work's heartbeat holds the lease while its command runs;
                    # only the death of that q work ends it before.
                    self.violation("lease-overlap",
                                   f"{mid}: delivery {d.count} ({d.source}, pid {d.pid}) came by "
                                   f"{d_by / 1000.0:.0f} ms (real) while delivery {p.count}'s "
                                   f"command (pid {p.pid}, q work pid {p.ppid}) ran until "
                                   f"{p.outcome_t / 1000.0:.0f} ms, its q work not killed")
                if not released:
                    if p.lease_end_ms is not None and d.recv_ms is not None:
                        # q hands a message out only once its lease has ended by the
                        # receiver's own clock: this holds even when clocks step.
                        early = p.lease_end_ms - d.recv_ms
                        if 0 < early <= self.clock_step_ms:
                            # Another process, its clock stepped ahead, ended the
                            # lease early (its write moved the lease to `ready`).
                            self.stats["early_by_clock_step"] += 1
                        elif early > 0:
                            self.violation("lease-overlap",
                                           f"{mid}: delivery {d.count} received at "
                                           f"{d.recv_ms} (q clock) while delivery {p.count}'s "
                                           f"lease ran until {p.lease_end_ms}")
                    if (p.lease_end_ms is not None and not self.clock_steps
                            and d.t1 / 1000.0 < p.lease_end_ms - 1):
                        self.violation("lease-overlap",
                                       f"{mid}: delivery {d.count} ({d.source}, pid {d.pid}) was over "
                                       f"at {d.t1 / 1000.0:.0f} ms (real) before delivery {p.count}'s "
                                       f"lease ended at {p.lease_end_ms}")
                # Explain it.
                if p.outcome == "nacked" or p.outcome == "nack-killed":
                    dup["nack"] += 1
                elif p.outcome == "stale":
                    dup["lease ran out (stale ack)"] += 1
                elif p.outcome in ("abandoned", "ack-killed"):
                    dup["crash (consumer dropped it)"] += 1
                elif (p.outcome or "").startswith("ack-failed"):
                    # (the ack's exit code is reported as unexpected-exit)
                    dup["its ack failed"] += 1
                elif p.outcome is not None and p.outcome.startswith("work-exit"):
                    dup["q work released it (handler failed)"] += 1
                elif p.source == "work":
                    # Handler killed, or q work killed (before or after its ack):
                    # only a logged kill of that q work or that command excuses it.
                    if (self.kill_between(p.ppid, p.t0 - FORK_SLACK_US, d_by)
                            or self.kill_between(p.pid, p.t0, d_by)):
                        dup["crash (q work or its command killed)"] += 1
                    else:
                        self.violation("unexplained-duplicate",
                                       f"{mid}: delivery {p.count} ran under q work pid {p.ppid} "
                                       f"(command pid {p.pid}, outcome {p.outcome}); neither was "
                                       f"killed, yet it came back (delivery {d.count})")
                elif p.outcome is None:
                    if self.kill_between(p.pid, p.t0, d_by):
                        dup["crash (receive killed after printing)"] += 1
                    elif (self.clock_steps and p.lease_end_ms is not None and d.recv_ms is not None
                          and p.lease_end_ms - d.recv_ms <= self.clock_step_ms):
                        dup["clock step forward"] += 1
                    else:
                        self.violation("unexplained-duplicate",
                                       f"{mid}: delivery {p.count} (receipt {p.receipt}) had no ack, "
                                       f"nack or crash, yet was delivered again")
                else:
                    self.violation("unexplained-duplicate",
                                   f"{mid}: delivery {p.count} ended as {p.outcome}, then came back")

        self.match_gaps(gaps, blind_receivers, dup)

        # A q work run that exited 0 is acked by its q work, unless that q work
        # was killed before it could ack (before the message came back), or its
        # command was, between its work_end record and its exit.
        for mid, ds in deliveries.items():
            for k, d in enumerate(ds):
                if d.outcome != "work-ok":
                    continue
                nxt = ds[k + 1] if k + 1 < len(ds) else None
                until = None if nxt is None else (nxt.t1 if nxt.source == "receive" else nxt.t0)
                if not (self.kill_between(d.ppid, d.t0 - FORK_SLACK_US, until)
                        or self.kill_between(d.pid, d.t0, until)):
                    acks_ok[mid] += 1

        # ---- 1. nothing lost -----------------------------------------------------
        settled = set(dead)
        for mid, ds in deliveries.items():
            if any(d.outcome == "acked" for d in ds):
                settled.add(mid)
            last = max(ds, key=lambda d: d.count)
            # q work acks after its command succeeded; an ack that was killed may
            # have committed before it died. Either settles the message when it
            # never came back (the drain proves it is not in the queue).
            if last.outcome in ("work-ok", "ack-killed"):
                settled.add(mid)
                self.stats["settled_unconfirmed"] += 1
        for mid, n in acks_ok.items():
            if n > 1:
                self.violation("acked-twice", f"{mid}: {n} of its deliveries were acked (exit 0)")
            if n > 0 and mid in dead:
                self.violation("acked-and-dead", f"{mid}: acked (exit 0) and also in the "
                                                 f"dead-letter queue")
        lost = []
        for body, mid in sends_ok.items():
            if mid not in settled:
                seen = len(deliveries.get(mid, []))
                lost.append(f"{mid} ({body!r}, delivered {seen} times, "
                            f"last outcome {deliveries[mid][-1].outcome if seen else None})")
        for text in lost:
            self.violation("lost", f"sent (exit 0) but never acked nor dead-lettered: {text}")

        if stage_out is not None:
            self.check_stage(stage_out, deliveries, by_receipt, dead, sends_ok)

        # ---- 5. the end state ------------------------------------------------------
        if final_stats:
            for key in ("visible", "in_flight", "delayed"):
                if final_stats.get(key, 0) != 0:
                    self.violation("not-drained", f"after the drain, {key} = {final_stats.get(key)}")
            if final_stats.get("dead", 0) != len(dead):
                self.violation("dead-count", f"stats say {final_stats.get('dead')} dead, "
                                             f"dlq list shows {len(dead)}")
            n_sent = final_stats.get("sent")
            if n_sent is not None and not (len(sends_ok) <= n_sent <= len(sends_ok) + len(sends_unknown)):
                self.violation("sent-counter", f"the sent counter is {n_sent}; sends that exited 0: "
                                               f"{len(sends_ok)}, killed: {len(sends_unknown)}")
            if final_stats.get("expired", 0) != 0:
                self.violation("expired", f"{final_stats.get('expired')} messages expired (retention)")
        else:
            self.violation("no-final-state", "the log has no final_stats record (drain did not finish)")

        s = self.stats
        s["sent_ok"] = len(sends_ok)
        s["sent_unknown"] = len(sends_unknown)
        s["sent_failed"] = len(sends_failed)
        s["messages_delivered"] = len(deliveries)
        s["deliveries"] = sum(len(v) for v in deliveries.values())
        s["acked"] = sum(1 for ds in deliveries.values() if any(d.outcome == "acked" for d in ds))
        s["dead_letters"] = len(dead)
        s["killed_receives"] = killed_receives
        self.dup_reasons = dup
        self.rc_count = rc_count

    def match_gaps(self, gaps, receivers, dup):
        """Each unseen delivery needs its own killed receiver among its candidates;
        a receiver explains at most as many as it could take, each of another
        message (a bipartite matching, by augmenting paths)."""
        units = []  # (gap index, candidates)
        for gi, (mid, _, _, n, found) in enumerate(gaps):
            units += [(gi, found)] * n
        load = collections.defaultdict(list)   # receiver -> units assigned to it

        def assign(u, seen):
            gi, cands = units[u]
            for rcv in cands:
                if rcv in seen or any(units[v][0] == gi or gaps[units[v][0]][0] == gaps[gi][0]
                                      for v in load[rcv]):
                    continue
                seen.add(rcv)
                if len(load[rcv]) < receivers[rcv][2]:
                    load[rcv].append(u)
                    return True
                for v in list(load[rcv]):
                    load[rcv].remove(v)
                    load[rcv].append(u)
                    if assign(v, seen):
                        return True
                    load[rcv].remove(u)
                    load[rcv].append(v)
            return False

        explained = collections.Counter()
        for u in range(len(units)):
            if assign(u, set()):
                explained[units[u][0]] += 1
        for gi, (mid, before, after, n, found) in enumerate(gaps):
            if explained[gi] >= n:
                dup["crash (unseen delivery, its receiver killed)"] += n
            else:
                self.violation("unexplained-duplicate",
                               f"{mid}: deliveries {before + 1}..{after - 1} were never seen, and "
                               f"the {len(found)} receiver(s) killed between delivery {before} and "
                               f"{after} explain only {explained[gi]} of them (each explains one "
                               f"message per message it could take)")

    # ---- 7. q work --to: output exactly once per ack, never without it --------------
    def check_stage(self, outputs, deliveries, by_receipt, dead, sends_ok):
        per_id = collections.Counter()
        for o in outputs:
            parts = (o.get("body") or "").split()
            if len(parts) != 2:
                self.violation("stage-bad-output", f"output {o.get('id')}: body {o.get('body')!r}")
                continue
            mid, receipt = parts
            per_id[mid] += 1
            d = by_receipt.get(receipt)
            if d is None or d.source != "work" or d.id != mid or d.outcome != "work-ok":
                self.violation("stage-without-success",
                               f"{mid}: output of receipt {receipt}, whose run did not exit 0 "
                               f"({d.outcome if d else 'never delivered'})")
            if mid in dead:
                self.violation("stage-output-and-dead", f"{mid}: dead-lettered, yet has an output")
            if any(x.outcome == "acked" for x in deliveries.get(mid, [])):
                self.violation("stage-output-and-ack",
                               f"{mid}: acked by a consumer, yet has an output")
        for mid, n in per_id.items():
            if n > 1:
                self.violation("stage-output-twice", f"{mid}: {n} outputs on the stage's queue")
        for mid in sends_ok.values():
            ds = deliveries.get(mid, [])
            if mid in dead or any(d.outcome in ("acked", "ack-killed") for d in ds):
                continue  # a consumer's ack (a killed one may have committed) or a dead letter
            if any(d.outcome == "work-ok" for d in ds) and per_id[mid] == 0:
                self.violation("stage-output-missing",
                               f"{mid}: settled by q work but has no output on the stage's queue")
        self.stats["stage_outputs"] = len(outputs)

    def report(self, quiet=False):
        s = self.stats
        summary = {
            "ok": not self.violations,
            "ops": s["ops"], "kills": s["kills"], "sent_ok": s["sent_ok"],
            "sent_unknown": s["sent_unknown"], "sent_failed": s["sent_failed"],
            "delivered_messages": s["messages_delivered"], "deliveries": s["deliveries"],
            "acked": s["acked"], "dead_letters": s["dead_letters"],
            "duplicates": s["duplicates"], "duplicate_reasons": dict(self.dup_reasons),
            "early_by_clock_step": s["early_by_clock_step"],
            "violations": {k: len(v) for k, v in self.violations.items()},
        }
        if not quiet or self.violations:
            print("checker: " + json.dumps(summary, sort_keys=True))
        for kind, items in sorted(self.violations.items()):
            print(f"checker: VIOLATION {kind}: {len(items)}", file=sys.stderr)
            for text in items[:8]:
                print(f"    {text}", file=sys.stderr)
        return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logdir")
    ap.add_argument("--clock-steps", type=float, metavar="MAX_SECONDS",
                    help="the wall clock was stepped by up to MAX_SECONDS: leases are judged on "
                         "q's clocks only, and a delivery up to MAX_SECONDS before the previous "
                         "lease ended counts as explained by a forward step")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    c = Checker(clock_steps=a.clock_steps)
    c.load(a.logdir)
    c.run()
    summary = c.report(quiet=a.quiet)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, sort_keys=True)
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
