"""Scenario 8: freed pages are reused: the store sizes after each bulk round of
scenarios 3 and 4.
"""


def run(suite, sizes, N):
    S = "8"
    for name, entries in sizes.items():
        for i, (stage, size, alloc) in enumerate(entries):
            suite.raw.append((S, name, f"file bytes after {stage}", i // (2 if name != "floor"
                                                                        else 1) + 1,
                             size, "bytes"))
            suite.raw.append((S, name, f"allocated bytes after {stage}",
                             i // (2 if name != "floor" else 1) + 1, alloc, "bytes"))
    suite.space = sizes
    qs = sizes["q"]
    sent = [s for stage, s, _ in qs if stage == "sent"]
    drained = [s for stage, s, _ in qs if stage == "drained"]
    last = max(sent[1:] + drained[1:]) if len(sent) > 1 else None
    suite.summarize(S, "q", "file bytes per message (after round 1 send)", [sent[0] / N],
                   "bytes")
    for name in ("sqlite3", "redis", "floor"):
        s = [x for stage, x, _ in sizes[name] if stage == "sent"]
        suite.summarize(S, name, "store bytes per message (after round 1 send)", [s[0] / N],
                       "bytes")
    if last is not None:
        r1 = max(sent[0], drained[0])
        r2 = max(sent[1], drained[1])
        fig = (f"after round 1: {r1:,} B ({r1 / N:.0f} B/message); largest later: {last:,} B "
               f"({(last - r1) / r1 * 100:+.2f}%)")
        if last > r1:
            fig += f", of which {last - r2:+,} B after round 2"
            freed = [f for f in suite.q_last_freed if f]
            if freed:
                pages = max(p for p, _ in freed)
                psize = freed[0][1]
                fig += (f"; LMDB cannot reuse the pages freed by the commit just before a "
                        f"round (up to {pages} pages = {pages * psize:,} B here), so the "
                        f"file grows once by at most that and then stays flat")
        suite.target(S, f"{len(sent)} rounds of {N:,} sent + drained: file no larger than "
                       "after round 1", fig, last <= r1)
    suite.note(S, "Sizes are the files' apparent sizes (st_size); for sqlite3 the database "
                 "plus -wal and -shm; for redis the append-only files (automatic AOF rewrite "
                 "is off, so it only grows; a rewrite would shrink it).")
