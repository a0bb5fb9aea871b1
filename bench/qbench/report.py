"""The report: results.md (targets, machine, one section per scenario,
method), summary.csv and raw.csv, and the gnuplot plots; --replot redraws the
plots of a finished run."""
import csv
import os
import shutil
import subprocess

from .common import MODES, BenchError, log

def machine_description(work):
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception as e:
            return f"({e})"
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip()
    mhz = sh("grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2-").strip()
    flags = sh("grep -m1 '^flags' /proc/cpuinfo | grep -o hypervisor")
    return {
        "cpu": f"{cpu} ({mhz} MHz){', virtual machine' if flags else ''}",
        "nproc": sh("nproc"),
        "free": sh("free -m"),
        "df": sh(f"df -hT {work}"),
        "kernel": sh("uname -srvm"),
        "os": sh(". /etc/os-release && echo \"$PRETTY_NAME\""),
        "versions": sh("(sqlite3 --version | cut -d' ' -f1; redis-server --version | cut -d' ' -f3;"
                       " dpkg-query -W -f='${Version}' liblmdb0 2>/dev/null) | paste -sd' '"),
        "load": sh("cat /proc/loadavg"),
    }


def fmt_val(v, unit):
    if v != v:
        return "-"
    if unit == "ms":
        return f"{v:.2f} ms"
    if unit == "msg/s":
        return f"{v:,.0f}/s"
    if unit == "KiB":
        return f"{v / 1024:.1f} MiB"
    if unit == "faults":
        return f"{v:.0f}"
    if unit == "%":
        return f"{v:.1f}%"
    if unit == "commits":
        return f"{v:.2f}"
    if unit == "commits/s":
        return f"{v:,.0f}/s"
    if unit == "bytes":
        return f"{v:,.0f} B"
    return f"{v:g} {unit}"


TITLES = {
    "1": "One-shot enqueue (one process, one durable message)",
    "2": "One-shot receive + ack (two processes)",
    "3": "Bulk send",
    "4": "Drain through batched receive + ack",
    "5": "Depth does not matter",
    "6": "Wake-up latency of a waiting receiver",
    "7": "Contention: many producers and consumers on one file",
    "8": "Space: freed pages are reused",
    "9": "Memory: peak RSS does not grow with the queue",
}


def write_results(suite, started, finished):
    out = suite.out
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "contender", "metric", "rep", "value", "unit"])
        for row in suite.raw:
            w.writerow(row)
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "contender", "metric", "n", "median", "p25", "p75", "unit",
                    "ratio", "ratio_to"])
        for s in suite.summary:
            w.writerow([s["scenario"], s["contender"], s["metric"], s["n"],
                        f"{s['median']:.6g}", f"{s['p25']:.6g}", f"{s['p75']:.6g}", s["unit"],
                        "" if s["ratio"] is None else f"{s['ratio']:.3f}", s["ratio_to"] or ""])
    m = machine_description(suite.work)
    lines = []
    A = lines.append
    A(f"# q benchmark results ({suite.mode} run)")
    A("")
    A(f"Run {started:%Y-%m-%d %H:%M} to {finished:%H:%M} UTC ({(finished - started).seconds // 60} "
      f"min), `bench/run{'' if suite.mode == 'full' else ' --' + suite.mode}`, "
      f"{suite.q_version}. Medians of alternating runs; ratios are of medians in this same run. "
      "Summary: [summary.csv](summary.csv); every measurement is in raw.csv, written "
      "beside this file by the run (not committed).")
    A("")
    A(f"The binary measured: {suite.q_origin}.")
    A("")
    A("## Targets")
    A("")
    A("| # | target | measured | met? |")
    A("|---|---|---|---|")
    for sc, text, fig, met in suite.targets:
        A(f"| {sc} | {text} | {fig} | {'yes' if met else ('n/a' if met is None else '**no**')} |")
    A("")
    A("## Machine")
    A("")
    A(f"- CPU: {m['cpu']}, {m['nproc']} cores (nproc), shared with other work while this ran "
      f"(load average at the end: {m['load']})")
    A(f"- Kernel: {m['kernel']}; {m['os']}")
    A(f"- sqlite3, redis-server, liblmdb: {m['versions']}")
    A("- Memory (free -m):")
    A("")
    A("```")
    A(m["free"])
    A("```")
    A("")
    A("- The benchmark files' filesystem (df -hT):")
    A("")
    A("```")
    A(m["df"])
    A("```")
    A("")
    by_sc = {}
    for s in suite.summary:
        by_sc.setdefault(s["scenario"], []).append(s)
    plots = {"1": "s1_enqueue.png", "2": "s2_receive_ack.png", "3": "s3_s4_bulk.png",
             "5": "s5_depth.png", "6": "s6_wakeup.png", "7": "s7_contention.png",
             "8": "s8_space.png"}
    for sc in ["1", "2", "3", "4", "5", "6", "7", "8", "9"]:
        if sc not in by_sc:
            continue
        A(f"## {sc}. {TITLES[sc]}")
        A("")
        A("| contender | measure | n | median | p25 to p75 | ratio |")
        A("|---|---|---|---|---|---|")
        for s in by_sc[sc]:
            ratio = ("" if s["ratio"] is None or s["ratio"] <= 0
                     else f"{s['ratio']:.2f}x {s['ratio_to']}")
            A(f"| {s['contender']} | {s['metric']} | {s['n']} | {fmt_val(s['median'], s['unit'])} "
              f"| {fmt_val(s['p25'], s['unit'])} to {fmt_val(s['p75'], s['unit'])} | {ratio} |")
        A("")
        if sc == "8" and getattr(suite, "space", None):
            A("| store | round | after send | after drain |")
            A("|---|---|---|---|")
            for name, entries in suite.space.items():
                sent = [x for st, x, _ in entries if st == "sent"]
                drained = [x for st, x, _ in entries if st == "drained"]
                for i, s in enumerate(sent):
                    d = f"{drained[i]:,} B" if i < len(drained) else "-"
                    A(f"| {name} | {i + 1} | {s:,} B | {d} |")
            A("")
        for t in suite.notes.get(sc, []):
            A(t)
            A("")
        if sc in plots and os.path.exists(os.path.join(out, plots[sc])):
            A(f"![{TITLES[sc]}]({plots[sc]})")
            A("")
    if getattr(suite, "syscall_rows", None):
        A("## Where the time goes: one operation, as the kernel sees it (strace -f; page faults from wait4)")
        A("")
        A("| command | system calls | fsync/fdatasync | bytes written to files | minor page faults |")
        A("|---|---|---|---|---|")
        for row in suite.syscall_rows:
            A("| " + " | ".join(str(x) for x in row) + " |")
        A("")
        for t in suite.notes.get("sys", []):
            A(t)
            A("")
    A("## Method")
    A("")
    A("- Every process is started without a shell (posix_spawn) and timed from spawn to exit "
      "(wait4). Peak RSS is measured apart, under GNU time (wait4's figure for a "
      "posix_spawn child includes the parent's high-water mark).")
    A("- Contenders alternate run by run, with the first of each round rotating, after "
      "untimed warm-up rounds; the figures are medians with the interquartile range.")
    A("- All contenders are durable: q and the floor sync every commit, sqlite3 runs WAL with "
      "synchronous=FULL, redis-server runs appendonly with appendfsync always on a private "
      "loopback port. nq never syncs.")
    A("- q is a private copy of the binary under test; every store is on the filesystem above.")
    A(f"- Scenario run times: " + ", ".join(f"{k}: {v:.0f} s" for k, v in suite.timings.items()))
    A("")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines))


def write_plots(suite):
    out = suite.out
    if not shutil.which("gnuplot"):
        log("gnuplot not found: no plots")
        return
    data = os.path.join(suite.work, "plots")
    os.makedirs(data, exist_ok=True)
    scripts = []
    by = {}
    for s in suite.summary:
        by.setdefault((s["scenario"], s["metric"]), []).append(s)

    def bars(fname, title, ylabel, rows, scale=1.0, label_fmt="%.3g"):
        dat = os.path.join(data, fname + ".dat")
        with open(dat, "w") as f:
            for s in rows:
                label = s["contender"].replace('"', "'")
                f.write(f"\"{label}\" {s['median'] * scale} {s['p25'] * scale} "
                        f"{s['p75'] * scale}\n")
        scripts.append(f"""
set output '{os.path.join(out, fname)}'
set title "{title}"
set ylabel "{ylabel}"
set yrange [0:*]
set style fill solid 0.6 border -1
set boxwidth 0.6
set xtics rotate by -20
plot '{dat}' using 0:2:xtic(1) with boxes lc rgb '#4477aa' notitle, \\
     '' using 0:2:3:4 with yerrorbars lc rgb 'black' pt 0 notitle, \\
     '' using 0:2:(sprintf('{label_fmt}', $2)) with labels offset 0,1 notitle
""")

    s1 = [s for s in suite.summary if s["scenario"] == "1"]
    if s1:
        bars("s1_enqueue.png", "One-shot enqueue: one process, one durable message "
             "(median, IQR)", "ms", s1)
    s2 = [s for s in suite.summary if s["scenario"] == "2"]
    if s2:
        bars("s2_receive_ack.png", "One-shot receive + ack (median, IQR)", "ms", s2)
    s34 = [dict(s, contender=f"{s['contender']} {'send' if s['scenario'] == '3' else 'drain'}")
           for s in suite.summary if s["scenario"] in ("3", "4") and s["unit"] == "msg/s"]
    if s34:
        bars("s3_s4_bulk.png", f"Bulk send and batched drain of {suite.cfg['bulk']:,} "
             "messages (median, IQR)", "thousand messages/s", s34, scale=1e-3, label_fmt="%.0f")
    s5 = [s for s in suite.summary if s["scenario"] == "5" and s["unit"] == "ms"]
    if s5:
        bars("s5_depth.png", "q one-shot operations by queue depth (median, IQR)", "ms",
             [dict(s, contender=f"{s['contender']}: {s['metric'].replace('one-shot ', '')}")
              for s in s5])
    s7 = [s for s in suite.summary if s["scenario"] == "7" and s["unit"] == "msg/s"]
    if s7:
        bars("s7_contention.png", f"Contention over {suite.cfg['contention_secs']} s (median)",
             "messages/s", [dict(s, contender=f"{s['contender']}: {s['metric']}") for s in s7],
             label_fmt="%.0f")
    # Wake-up: cumulative distribution.
    wake = {}
    for sc, name, metric, _, v, _ in suite.raw:
        if sc == "6" and metric in ("sender exit -> receiver exit",
                                    "one durable commit (loop twin)",
                                    "close of a watched inotify descriptor"):
            wake.setdefault(name, []).append(v)
    if wake:
        plot_parts = []
        for name, xs in wake.items():
            xs = sorted(xs)
            dat = os.path.join(data, f"wake-{name}.dat")
            with open(dat, "w") as f:
                for i, x in enumerate(xs):
                    f.write(f"{x} {(i + 1) / len(xs)}\n")
            label = {"q": "q receive --wait: sender exit to receiver exit",
                     "redis": "redis XREADGROUP BLOCK: sender exit to receiver exit",
                     "floor": "one durable LMDB commit (floor loop twin)",
                     "inotify": "close() of a watched inotify descriptor (wake_probe)"}.get(
                         name, name)
            plot_parts.append(f"'{dat}' using 1:2 with steps lw 2 title '{label}'")
        scripts.append(f"""
set output '{os.path.join(out, 's6_wakeup.png')}'
set title "Wake-up latency (cumulative distribution)"
set xlabel "ms"
set ylabel "fraction of runs"
set yrange [0:1]
set xrange [0:*]
unset xtics
set xtics
set key outside below
set arrow 1 from 5, graph 0 to 5, graph 1 nohead dt 2 lc rgb 'red'
plot {', '.join(plot_parts)}
unset arrow 1
unset xlabel
set key default
""")
    if getattr(suite, "space", None):
        parts = []
        for name, entries in suite.space.items():
            dat = os.path.join(data, f"space-{name}.dat")
            with open(dat, "w") as f:
                for i, (stage, size, _) in enumerate(entries):
                    x = (i + 1) if name != "floor" else 2 * i + 1
                    f.write(f"{x} {size / 1e6}\n")
            parts.append(f"'{dat}' using 1:2 with linespoints lw 2 title '{name}'")
        scripts.append(f"""
set output '{os.path.join(out, 's8_space.png')}'
set title "Store size after each send (odd) and drain (even) of {suite.cfg['bulk']:,} messages"
set xlabel "step: send 1, drain 1, send 2, drain 2, ..."
set ylabel "MB on disk (apparent size)"
set yrange [0:*]
set xrange [0.5:*]
set xtics 1
set key top left
plot {', '.join(parts)}
""")
    gp = os.path.join(data, "plots.gp")
    with open(gp, "w") as f:
        f.write("set terminal pngcairo size 900,560 font 'sans,10' noenhanced\nset grid ytics\n")
        f.write("".join(scripts))
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"gnuplot failed: {r.stderr.strip()[:500]}")


def replot(args):
    """Redraws the plots of a finished run from its summary.csv and raw.csv."""
    class Saved:
        pass
    suite = Saved()
    suite.out, suite.work, suite.cfg = args.out, args.work, MODES[args.mode]
    with open(os.path.join(args.out, "summary.csv")) as f:
        suite.summary = []
        for r in csv.DictReader(f):
            r = dict(r, n=int(r["n"]), median=float(r["median"]), p25=float(r["p25"]),
                     p75=float(r["p75"]), ratio=float(r["ratio"]) if r["ratio"] else None)
            suite.summary.append(r)
    with open(os.path.join(args.out, "raw.csv")) as f:
        suite.raw = [(r["scenario"], r["contender"], r["metric"], int(r["rep"]),
                      float(r["value"]), r["unit"]) for r in csv.DictReader(f)]
    space = {}
    for sc, name, metric, rep_, v, _ in suite.raw:
        if sc == "8" and metric.startswith("file bytes after "):
            space.setdefault(name, []).append((rep_, metric.endswith("drained"), v))
    suite.space = {name: [("drained" if d else "sent", int(v), 0)
                          for _, d, v in sorted(entries)] for name, entries in space.items()}
    write_plots(suite)
