"""Scenarios 5 and 9: a one-shot receive + ack costs the same with a deep queue
as with a shallow one, and so does peak RSS.
"""
import os
import time

from ..common import FILL_CHUNK, BenchError, body_for, file_bytes, log, median
from ..contenders import QQueue

def run(suite):
    small_n, big_n = suite.cfg["depth_small"], suite.cfg["depth_big"]
    reps = suite.cfg["depth_reps"]
    small = QQueue(suite.p, suite.q, os.path.join(suite.work, "depth-small.q"))
    big = QQueue(suite.p, suite.q, os.path.join(suite.work, "depth-big.q"))
    chunk = os.path.join(suite.work, "depth.lines")
    n_chunk = min(FILL_CHUNK, big_n)
    with open(chunk, "w") as f:
        for i in range(n_chunk):
            f.write(body_for(i) + "\n")
    small_lines = os.path.join(suite.work, "depth-small.lines")
    with open(small_lines, "w") as f:
        for i in range(small_n):
            f.write(body_for(i) + "\n")
    small.create()
    small.send_lines(small_lines)
    big.create()
    t0 = time.perf_counter()
    done = 0
    while done < big_n:
        part = chunk
        if big_n - done < n_chunk:
            part = os.path.join(suite.work, "depth-last.lines")
            with open(part, "w") as f:
                for i in range(big_n - done):
                    f.write(body_for(i) + "\n")
        big.send_lines(part)
        done += min(n_chunk, big_n - done)
        log(f"deep queue: {done:,}/{big_n:,} messages")
    fill_secs = time.perf_counter() - t0
    big_size = file_bytes(*big.files())[0]
    body = body_for(7)
    rss = {("small", "send"): [], ("small", "receive"): [], ("small", "ack"): [],
           ("big", "send"): [], ("big", "receive"): [], ("big", "ack"): [],
           ("-", "floor"): []}
    floor_file = os.path.join(suite.work, "depth.floor")
    sends = {"small": [], "big": []}
    faults = {"small": [], "big": []}
    send_faults = {"small": [], "big": []}

    def pair(label, queue):
        def fn():
            r1, got = queue.receive(1)
            if len(got) != 1:
                raise BenchError(f"depth {label}: receive returned {len(got)}")
            r2 = queue.ack([got[0][0]])
            # Put one back (timed apart) so the depth stays where it is.
            r3 = queue.send_one(body)
            sends[label].append(r3.ms)
            faults[label].append(r1.minflt + r2.minflt)
            # Peak RSS of the same three commands, under GNU time.
            rr, kb = suite.p.peak_rss([suite.q, "receive", queue.queue], env=queue.env,
                                     capture=True)
            rss[(label, "receive")].append(kb)
            _, kb = suite.p.peak_rss([suite.q, "ack", queue.queue, rr.out.split("\t")[1]],
                                    env=queue.env)
            rss[(label, "ack")].append(kb)
            _, kb = suite.p.peak_rss([suite.q, "send", queue.queue, body], env=queue.env)
            rss[(label, "send")].append(kb)
            send_faults[label].append(suite.p.last_faults)
            if label == "small":
                _, kb = suite.p.peak_rss([suite.floor, floor_file])
                rss[("-", "floor")].append(kb)
            return r1.ms + r2.ms
        return fn

    times = suite.alternate([("small", pair("small", small)), ("big", pair("big", big))],
                           reps=reps)
    lab = {"small": f"{small_n:,} waiting", "big": f"{big_n:,} waiting",
           "-": "one record (reference)"}
    rows = {}
    for k in ("small", "big"):
        suite.record("5", f"q, {lab[k]}", "receive+ack pair", times[k], "ms")
        suite.record("5", f"q, {lab[k]}", "send", sends[k][suite.cfg['warmup']:], "ms")
        rows[k] = suite.summarize("5", f"q, {lab[k]}", "one-shot receive + ack", times[k],
                                 "ms", ratio_to=lab["small"])
        srow = suite.summarize("5", f"q, {lab[k]}", "one-shot send",
                              sends[k][suite.cfg['warmup']:], "ms", ratio_to=lab["small"])
        rows[k + "-send"] = srow
    for k in ("small", "big"):
        xs = faults[k][suite.cfg['warmup']:]
        suite.record("5", f"q, {lab[k]}", "minor page faults of the pair", xs, "faults")
        rows[k + "-faults"] = suite.summarize("5", f"q, {lab[k]}",
                                             "minor page faults of receive + ack", xs,
                                             "faults")
    for k in ("small", "big"):
        rows[k]["ratio"] = rows[k]["median"] / rows["small"]["median"]
        rows[k + "-send"]["ratio"] = rows[k + "-send"]["median"] / rows["small-send"]["median"]
    ratio = rows["big"]["median"] / rows["small"]["median"]
    suite.target("5", f"receive+ack with {big_n:,} waiting <= 1.5x with {small_n:,}",
                f"{ratio:.2f}x ({rows['big']['median']:.2f} vs "
                f"{rows['small']['median']:.2f} ms)", ratio <= 1.5)
    suite.note("5", f"The deep file ({big_size / 1e9:.2f} GB) was filled by `q send --lines` "
                   f"in chunks of {n_chunk:,} in {fill_secs:.0f} s. Each timed pair is "
                   "followed by an untimed-for-the-pair `q send` that puts one message back, "
                   "so the depths stay constant; those sends are reported too.")
    if suite.mode != "full":
        suite.note("5", f"This is a --{suite.mode} run: the deep queue holds {big_n:,} "
                       "messages, not the 10,000,000 of the full run.")
    # Scenario 9: peak RSS from the same processes.
    w = suite.cfg["warmup"]
    rss_rows = {}
    for (k, cmd), xs in rss.items():
        xs = xs[w:]
        name = f"q {cmd}, {lab[k]}" if cmd != "floor" else f"floor, {lab[k]}"
        suite.record("9", name, "peak RSS", xs, "KiB")
        rss_rows[(k, cmd)] = suite.summarize("9", name, "peak RSS (GNU time)", xs, "KiB")
    ok = True
    figs = []
    for cmd in ("send", "receive"):
        a, b = rss_rows[("small", cmd)]["median"], rss_rows[("big", cmd)]["median"]
        figs.append(f"{cmd}: {a / 1024:.1f} MiB -> {b / 1024:.1f} MiB")
        # "Does not grow": within 10% and 1 MiB, the noise of page-cache faults.
        ok &= b <= a * 1.1 + 1024
    suite.target("9", f"peak RSS of q send / q receive the same at {small_n:,} and {big_n:,} "
                     "messages", "; ".join(figs), ok)
    fs = {k: round(median(v[w:])) for k, v in send_faults.items()}
    ks = {k: rss_rows[(k, "send")]["median"] for k in ("small", "big")}
    for k in ("small", "big"):
        suite.record("9", f"q send, {lab[k]}", "minor page faults", send_faults[k][w:],
                    "faults")
    suite.note("9", f"A q send faults {fs['small']:.0f} times at {small_n:,} messages and "
                   f"{fs['big']:.0f} times at {big_n:,} (GNU time), {fs['big'] - fs['small']:.0f} "
                   f"more for the deeper B-trees, yet its RSS is {ks['big'] - ks['small']:,.0f} "
                   "KiB larger: a fault on a file mapping whose neighbours are in the page "
                   "cache maps them too (the kernel's fault-around, 16 pages), so the "
                   "difference is a few B-tree paths' neighbourhoods, bounded by the trees' "
                   "depth, not by the number of messages.")
    suite.s5_rows, suite.s9_rows = rows, rss_rows
    for qq in (small, big):
        for f in qq.files() + [qq.path + "-lock"]:
            if os.path.exists(f) and not suite.args.keep:
                os.unlink(f)
