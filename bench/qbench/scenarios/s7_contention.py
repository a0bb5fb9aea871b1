"""Scenario 7: many producers and consumers (shell loops of one-shot q
commands) on one file: nothing lost, and what it costs in commits.
"""
import os
import shutil
import subprocess
import time

from ..common import BenchError, lmdb_txnid, log, rotated
from ..contenders import QQueue

def run(suite):
    S = "7"
    secs = suite.cfg["contention_secs"]
    procs = suite.cfg["contention_procs"]
    results = []
    for r in range(suite.cfg["contention_rounds"]):
        for n in rotated([1, procs], r):
            log(f"contention: {n} producers + {n} consumers for {secs} s")
            results.append((n, contention_run(suite, n, secs, f"{r}-{n}")))
    rows = {}
    for n in (1, procs):
        runs = [res for k, res in results if k == n]
        for metric in ("sent/s", "acked/s"):
            xs = [res[metric] for res in runs]
            suite.record(S, f"{n}+{n} processes", metric, xs, "msg/s")
            label = ("1 producer + 1 consumer" if n == 1
                     else f"{n} producers + {n} consumers")
            rows[(n, metric)] = suite.summarize(S, label,
                                               metric.replace("/s", " per second"), xs,
                                               "msg/s", ratio_to="1 producer + 1 consumer")
    for n in (1, procs):
        for metric in ("sent/s", "acked/s"):
            rows[(n, metric)]["ratio"] = rows[(n, metric)]["median"] / rows[(1, metric)]["median"]
        xs = [res["commits/msg"] for k, res in results if k == n]
        suite.record(S, f"{n}+{n} processes", "commits per message", xs, "commits")
        label = "1 producer + 1 consumer" if n == 1 else f"{n} producers + {n} consumers"
        rows[(n, "commits")] = suite.summarize(S, label, "durable commits per message acked",
                                              xs, "commits")
        xs = [res["empty receives"] / max(1, res["commits"]) * 100 for k, res in results
              if k == n]
        suite.record(S, f"{n}+{n} processes", "empty receive commits", xs, "%")
        rows[(n, "empty")] = suite.summarize(S, label, "commits that were receives finding "
                                            "nothing (% of commits)", xs, "%")
        xs = [res["commits/s"] for k, res in results if k == n]
        suite.record(S, f"{n}+{n} processes", "commits per second", xs, "commits/s")
        rows[(n, "commits/s")] = suite.summarize(S, label, "durable commits per second", xs,
                                                "commits/s")
    errors = sum(res["errors"] for _, res in results)
    lost = sum(res["lost"] for _, res in results)
    dups = sum(res["duplicates"] for _, res in results)
    total = sum(res["sent"] for _, res in results)
    multi = rows[(procs, "acked/s")]["median"]
    single = rows[(1, "acked/s")]["median"]
    suite.target(S, f"{procs} producers + {procs} consumers, {secs} s: no errors, nothing lost",
                f"{total:,} messages sent over all runs, {errors} errors, {lost} lost, "
                f"{dups} delivered twice; {multi:,.0f} acked/s vs {single:,.0f} with one of "
                f"each ({multi / single:.2f}x); "
                f"{rows[(procs, 'commits')]['median']:.1f} commits per message vs "
                f"{rows[(1, 'commits')]['median']:.1f}, "
                f"{rows[(procs, 'empty')]['median']:.0f}% of commits receives that found "
                f"nothing vs {rows[(1, 'empty')]['median']:.0f}%", errors == 0 and lost == 0)
    if errors or lost:
        suite.broken.append(f"contention: {lost} messages lost, {errors} commands failed")
    suite.note(S, "Producers are shell loops of one-shot `q send QUEUE BODY` with unique "
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
    suite.s7_rows = rows


def contention_run(suite, n, secs, tag):
    d = os.path.join(suite.work, f"contention-{tag}")
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    q = QQueue(suite.p, suite.q, os.path.join(d, "c.q"))
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
  if "{suite.q}" send bench "$body" >/dev/null 2>&4; then echo "$body" >&3; else echo "send rc=$?" >&4; fi
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
  "{suite.q}" receive bench -n 10 --wait 1s >"$batch" 2>&4
  rc=$?
  if (( rc == 1 )); then
[ -e "{d}/stop" ] && break
continue
  elif (( rc != 0 )); then
echo "receive rc=$rc" >&4; sleep 0.1; continue
  fi
  echo >&5
  if cut -f2 "$batch" | "{suite.q}" ack bench 2>&4; then
cut -f4 "$batch" >&3
  else
echo "ack rc=$?" >&4
  fi
done
date +%s%N >"{d}/end.$id"
""")
    os.chmod(producer, 0o755)
    os.chmod(consumer, 0o755)
    env = dict(suite.p.env, Q_FILE=q.path)
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
    if not suite.args.keep:
        shutil.rmtree(d)
    return {"sent": len(sent), "acked": len(acked), "errors": len(errors), "lost": lost,
            "duplicates": dups, "remaining": remaining, "commits": commits,
            "commits/msg": commits / max(1, len(acked)), "commits/s": commits / t_all,
            "empty receives": empty, "batches": batches,
            "sent/s": len(sent) / secs, "acked/s": len(acked) / t_all,
            "secs": t_all, "prod_secs": t_prod}
