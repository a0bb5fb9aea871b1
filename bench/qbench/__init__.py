"""The q benchmark suite: common (processes, statistics), contenders (q,
sqlite3, redis), scenarios (one module each) and report (results.md, CSV,
plots). bench/bench.py runs them."""
