#!/usr/bin/env python3
"""Mutation test of the checker's self-test: each mutation removes one rule of
checker.py (or loosens one excuse); checker_selftest.py must fail on every
mutated copy. Prints the table; exits 1 when a mutation survives (or no longer
applies: its text is gone from checker.py, so the table must be updated)."""
import os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NOP = "(lambda *a: None)("


def off(kind, nth=1):
    """Silence the nth self.violation(KIND, ...) call."""
    return ("violation", kind, nth)


MUTATIONS = [
    ("lost", off("lost")),
    ("invented (never sent)", off("invented", 2)),
    ("invented (send failed)", off("invented", 1)),
    ("wrong-id", off("wrong-id")),
    ("one-body-two-ids", off("one-body-two-ids")),
    ("same-count", off("same-count")),
    ("redelivered-after-ack", off("redelivered-after-ack")),
    ("lease-overlap: q work's lease", off("lease-overlap", 1)),
    ("lease-overlap: q clock", off("lease-overlap", 2)),
    ("lease-overlap: real time", off("lease-overlap", 3)),
    ("unexplained: q work redelivery", off("unexplained-duplicate", 1)),
    ("unexplained: no outcome", off("unexplained-duplicate", 2)),
    ("unexplained: other outcome", off("unexplained-duplicate", 3)),
    ("unexplained: unseen deliveries (gap)", off("unexplained-duplicate", 4)),
    ("stale-while-leased", off("stale-while-leased")),
    ("acked-twice", off("acked-twice")),
    ("acked-and-dead", off("acked-and-dead")),
    ("double-ack", off("double-ack")),
    ("not-drained", off("not-drained")),
    ("dead-count", off("dead-count")),
    ("sent-counter", off("sent-counter")),
    ("expired", off("expired")),
    ("no-final-state", off("no-final-state")),
    ("unexpected-exit", off("unexpected-exit")),
    ("bad-log", off("bad-log")),
    ("bad-output", off("bad-output")),
    ("unparseable-log", off("unparseable-log")),
    ("stage-bad-output", off("stage-bad-output")),
    ("stage-without-success", off("stage-without-success")),
    ("stage-output-and-dead", off("stage-output-and-dead")),
    ("stage-output-and-ack", off("stage-output-and-ack")),
    ("stage-output-twice", off("stage-output-twice")),
    ("stage-output-missing", off("stage-output-missing")),
    # The excuses, each loosened.
    ("a kill excuses at any time", ("replace", "return any((lo is None or t >= lo) and (hi is None or t <= hi)",
                                    "return any(True")),
    ("a kill excuses only later than the event", ("replace", "(hi is None or t <= hi)", "(hi is None or t >= hi)")),
    ("q work kill excuse untimed", ("replace", "if (self.kill_between(p.ppid, p.t0 - FORK_SLACK_US, d_by)",
                                    "if (self.kill_between(p.ppid)")),
    ("receive-killed excuse untimed", ("replace", "if self.kill_between(p.pid, p.t0, d_by):",
                                       "if self.kill_between(p.pid):")),
    ("a work-ok is no ack", ("replace", "acks_ok[mid] += 1", "acks_ok[mid] += 0")),
    ("work-ok of a killed q work is an ack", ("replace", "if not (self.kill_between(d.ppid, d.t0 - FORK_SLACK_US, until)",
                                              "if not (False")),
    ("work-ok of a killed command is an ack", ("replace", "or self.kill_between(d.pid, d.t0, until)):", "or False):")),
    ("clock step excuses any redelivery", ("replace", "and p.lease_end_ms - d.recv_ms <= self.clock_step_ms):",
                                           "or True):")),
    ("stale: a superseded receipt's stale answer is wrong", ("replace",
        "if any(x.count > d.count and x.t0 < d.stale_t1 for x in ds):", "if False:")),
    ("stale: no clock-step allowance", ("replace", " - self.clock_step_ms\n", "\n")),
    ("gap: receiver capacity unbounded", ("replace", "if len(load[rcv]) < receivers[rcv][2]:", "if True:")),
    ("gap: killed q work holds 1 whatever its -j", ("replace", "work_jobs(r.get(\"what\", \"\"))", "1")),
    ("gap: killed receive holds 1 whatever its -n", ("replace", "int(r.get(\"n\") or 1)", "1")),
    ("gap: one receiver, one message twice", ("replace", "if rcv in seen or any(units[v][0] == gi or gaps[units[v][0]][0] == gaps[gi][0]",
                                              "if rcv in seen or any(units[v][0] == gi")),
    ("gap: receiver killed before the gap", ("replace", "(after_t is None or end is None or end > after_t)", "True")),
    ("gap: receiver killed after the gap", ("replace", "and (start is None or start < d.t1)]", "]")),
    ("kill_kind ignores global options", ("replace", "while rest and rest[0].startswith(\"-\"):", "while False:")),
    ("killed op: kill record at any time", ("replace", "and self.kill_between(r.get(\"pid\"), r.get(\"t0\"), r.get(\"t1\")))",
                                            "and r.get(\"pid\") in self.kills)")),
]


def mutate(src, how):
    if how[0] == "violation":
        _, kind, nth = how
        needle = f'self.violation("{kind}",'
        at = -1
        for _ in range(nth):
            at = src.find(needle, at + 1)
            if at < 0:
                return None
        return src[:at] + NOP + f'"{kind}",' + src[at + len(needle):]
    _, old, new = how
    if src.count(old) != 1:
        return None
    return src.replace(old, new)


def main():
    src = open(os.path.join(HERE, "checker.py")).read()
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for name, how in MUTATIONS:
            m = mutate(src, how)
            if m is None:
                print(f"  {name:48s} NOT APPLICABLE (checker.py changed: update this table)")
                bad += 1
                continue
            path = os.path.join(d, "checker.py")
            with open(path, "w") as f:
                f.write(m)
            p = subprocess.run([sys.executable, os.path.join(HERE, "checker_selftest.py")],
                               env=dict(os.environ, CHECKER_PY=path), capture_output=True, text=True)
            caught = [line.split(":")[1].strip() for line in p.stderr.splitlines()
                      if line.startswith("checker_selftest: ") and ": expected" in line]
            if p.returncode == 0:
                bad += 1
                print(f"  {name:48s} SURVIVED")
            else:
                print(f"  {name:48s} caught by {', '.join(caught) or p.stderr.strip()[-200:]}")
    print(f"checker_mutations: {len(MUTATIONS) - bad} of {len(MUTATIONS)} mutations caught")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
