#!/usr/bin/env python3
"""q serve under load (issue 28): SendMessage, and ReceiveMessage + DeleteMessage,
per second and their latency (p50, p99), with 1, 8 and 64 concurrent keep-alive
clients, durable, with group commit on and off; beside the same work done by
one-shot `q send` / `q receive` + `q ack` processes, by sqlite3 (one connection a
client, WAL, synchronous=FULL) and by redis (appendfsync always, one connection a
client: XADD; XREADGROUP + XACK/XDEL). Contenders alternate per round; medians.

  bench/serve_load.py --q build/q [--clients 1,8,64] [--n 2000] [--rounds 3]

Clients are threads spread over up to 8 processes (so the client's GIL is not
the bottleneck); on a 2-core machine they share the cores with the server, as
an app on the same host would. The load average is printed before and after.
"""
import argparse, http.client, json, multiprocessing as mp, os, shutil, socket, sqlite3, \
    statistics, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


# ---- clients: each returns a list of per-operation latencies (ms) ----------

class Sqs:
    def __init__(self, port, queue):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.url = f"http://127.0.0.1:{port}/000000000000/{queue}"

    def call(self, action, body):
        self.c.request("POST", "/", json.dumps(body), {
            "X-Amz-Target": "AmazonSQS." + action, "Content-Type": "application/x-amz-json-1.0"})
        r = self.c.getresponse()
        out = json.loads(r.read() or b"{}")
        if r.status != 200:
            raise RuntimeError(f"{action}: {r.status} {out}")
        return out

    def send(self, body):
        self.call("SendMessage", {"QueueUrl": self.url, "MessageBody": body})

    def take(self):
        out = self.call("ReceiveMessage", {"QueueUrl": self.url, "MaxNumberOfMessages": 1})
        msgs = out.get("Messages", [])
        if not msgs:
            return False
        self.call("DeleteMessage", {"QueueUrl": self.url, "ReceiptHandle": msgs[0]["ReceiptHandle"]})
        return True


class Sqlite:
    def __init__(self, path):
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")

    def send(self, body):
        self.db.execute("INSERT INTO q (body, visible_at) VALUES (?, 0)", (body,))

    def take(self):
        now = time.time()
        row = self.db.execute(
            "UPDATE q SET visible_at = ? WHERE id = (SELECT id FROM q WHERE visible_at <= ? "
            "ORDER BY id LIMIT 1) RETURNING id", (now + 30, now)).fetchone()
        if not row:
            return False
        self.db.execute("DELETE FROM q WHERE id = ?", (row[0],))
        return True


class Redis:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")
        self.name = f"c{os.getpid()}-{threading.get_ident()}"

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() if isinstance(x, str) else x for x in args))
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"redis: {line!r}")

    def send(self, body):
        self.cmd("XADD", "jobs", "*", "b", body)

    def take(self):
        r = self.cmd("XREADGROUP", "GROUP", "g", self.name, "COUNT", "1", "STREAMS", "jobs", ">")
        if not r or not r[0][1]:
            return False
        mid = r[0][1][0][0]
        self.cmd("XACK", "jobs", "g", mid)
        self.cmd("XDEL", "jobs", mid)
        return True


def make_client(kind, target):
    if kind == "serve":
        return Sqs(target, "jobs")
    if kind == "sqlite3":
        return Sqlite(target)
    if kind == "redis":
        return Redis(target)
    raise ValueError(kind)


def worker(kind, target, op, threads, per_thread, out):
    lat, errors = [], []
    lock = threading.Lock()

    def run():
        c = make_client(kind, target)
        mine = []
        try:
            for i in range(per_thread):
                t0 = time.perf_counter()
                if op == "send":
                    c.send(f"job {i} " + "x" * 90)
                elif not c.take():
                    break
                mine.append((time.perf_counter() - t0) * 1e3)
        except Exception as e:  # reported, and the row fails
            with lock:
                errors.append(repr(e))
        with lock:
            lat.extend(mine)
    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((lat, errors))


def drive(kind, target, op, clients, n):
    """n operations by `clients` concurrent clients; returns (ops/s, p50, p99)."""
    procs = min(clients, 8)
    per_thread = max(1, n // clients)
    q = mp.Queue()
    ps = []
    for p in range(procs):
        threads = clients // procs + (1 if p < clients % procs else 0)
        ps.append(mp.Process(target=worker, args=(kind, target, op, threads, per_thread, q)))
    t0 = time.perf_counter()
    for p in ps:
        p.start()
    lat, errors = [], []
    for _ in ps:
        l, e = q.get()
        lat += l
        errors += e
    secs = time.perf_counter() - t0
    for p in ps:
        p.join()
    if errors:
        raise RuntimeError(f"{kind} {op}: {errors[:3]}")
    return len(lat) / secs, pct(lat, 0.5), pct(lat, 0.99)


def one_shot(q, qfile, op, clients, n):
    """The same work by one-shot q processes, `clients` at a time."""
    lat = []
    lock = threading.Lock()
    per = max(1, n // clients)
    dn = subprocess.DEVNULL

    def run():
        mine = []
        for i in range(per):
            t0 = time.perf_counter()
            if op == "send":
                subprocess.run([q, "-f", qfile, "send", "jobs", f"job {i}"], stdout=dn, check=True)
            else:
                r = subprocess.run([q, "-f", qfile, "receive", "jobs", "--json"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    break
                receipt = json.loads(r.stdout.splitlines()[0])["receipt"]
                subprocess.run([q, "-f", qfile, "ack", "jobs", receipt], stdout=dn, check=True)
            mine.append((time.perf_counter() - t0) * 1e3)
        with lock:
            lat.extend(mine)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=run) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return len(lat) / (time.perf_counter() - t0), pct(lat, 0.5), pct(lat, 0.99)


def start_serve(q, qfile, extra):
    log = qfile + ".serve.log"
    p = subprocess.Popen([q, "-f", qfile, "serve", "--listen", "127.0.0.1:0", "--insecure-no-auth",
                          "--max-connections", "256"] + extra, stderr=open(log, "w"))
    for _ in range(400):
        text = open(log).read()
        if " on http://" in text:
            port = int(text.split(" on http://127.0.0.1:")[1].split()[0])
            return p, port, log
        time.sleep(0.025)
    raise RuntimeError(f"q serve did not start: {open(log).read()}")


def stop_serve(p, log):
    p.terminate()
    p.wait(timeout=60)
    last = open(log).read().strip().splitlines()[-1]
    return last.split("; ", 1)[1] if "; " in last else last


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--q", default=os.path.join(HERE, "..", "build", "q"))
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--n", type=int, default=2000, help="operations per row and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="serve,nogc,oneshot,sqlite3,redis")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="q-serve-bench.")
    # A private, stripped copy beside its q-serve (as the .deb ships them).
    for name in ("q", "q-serve"):
        shutil.copy2(os.path.join(os.path.dirname(os.path.abspath(args.q)), name), os.path.join(work, name))
        subprocess.run(["strip", "--strip-debug", os.path.join(work, name)], check=True)
    q = os.path.join(work, "q")
    clients = [int(c) for c in args.clients.split(",")]
    only = set(args.only.split(","))
    redis_port = free_port()
    redis = None
    if "redis" in only:
        redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                  "--dir", work, "--appendonly", "yes", "--appendfsync", "always",
                                  "--save", ""], stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", redis_port)).close()
                break
            except OSError:
                time.sleep(0.025)
    print(f"load before: {load()}; q: {args.q}; {args.rounds} rounds of {args.n} operations a row",
          file=sys.stderr)
    results = {}  # (contender, op, clients) -> list of (rate, p50, p99)
    notes = {}
    try:
        for r in range(args.rounds):
            for c in clients:
                order = [x for x in ["serve", "nogc", "oneshot", "sqlite3", "redis"] if x in only]
                order = order[r % len(order):] + order[:r % len(order)]
                for who in order:
                    for op in ("send", "take"):
                        n = args.n if who != "oneshot" else max(c, args.n // 10)
                        key = (who, op, c)
                        if who in ("serve", "nogc"):
                            qfile = os.path.join(work, f"{who}-{r}-{c}.q")
                            if op == "send":
                                subprocess.run([q, "-f", qfile, "create", "jobs"], stdout=subprocess.DEVNULL, check=True)
                            p, port, log = start_serve(q, qfile, [] if who == "serve" else ["--no-group-commit"])
                            try:
                                res = drive("serve", port, op, c, n)
                            finally:
                                notes[key] = stop_serve(p, log)
                        elif who == "oneshot":
                            qfile = os.path.join(work, f"oneshot-{r}-{c}.q")
                            if op == "send":
                                subprocess.run([q, "-f", qfile, "create", "jobs"], stdout=subprocess.DEVNULL, check=True)
                            res = one_shot(q, qfile, op, c, n)
                        elif who == "sqlite3":
                            path = os.path.join(work, f"s-{r}-{c}.db")
                            if op == "send":
                                db = sqlite3.connect(path)
                                db.execute("PRAGMA journal_mode=WAL")
                                db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body TEXT, visible_at REAL)")
                                db.execute("CREATE INDEX q_visible ON q (visible_at, id)")
                                db.commit()
                                db.close()
                            res = drive("sqlite3", path, op, c, n)
                        else:
                            if op == "send":
                                rc = Redis(redis_port)
                                rc.cmd("DEL", "jobs")
                                rc.cmd("XGROUP", "CREATE", "jobs", "g", "$", "MKSTREAM")
                            res = drive("redis", redis_port, op, c, n)
                        results.setdefault(key, []).append(res)
                        print(f"  round {r + 1} {who:8} {op:4} {c:3} clients: {res[0]:8.0f}/s "
                              f"p50 {res[1]:.2f} ms p99 {res[2]:.2f} ms", file=sys.stderr)
    finally:
        if redis:
            redis.terminate()
            redis.wait()
    names = {"serve": "q serve (group commit)", "nogc": "q serve --no-group-commit",
             "oneshot": "q send / q receive + q ack processes", "sqlite3": "sqlite3 (WAL, FULL)",
             "redis": "redis (appendfsync always)"}
    print(f"\nload after: {load()}\n")
    print("| contender | clients | SendMessage /s | p50 ms | p99 ms | Receive+Delete /s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for c in clients:
        for who in names:
            if (who, "send", c) not in results:
                continue
            row = [names[who], str(c)]
            for op in ("send", "take"):
                xs = results[(who, op, c)]
                row += [f"{statistics.median(x[0] for x in xs):,.0f}", f"{statistics.median(x[1] for x in xs):.2f}",
                        f"{statistics.median(x[2] for x in xs):.2f}"]
            print("| " + " | ".join(row) + " |")
    for c in clients:
        for who in ("serve", "nogc"):
            for op in ("send", "take"):
                if (who, op, c) in notes:
                    print(f"- {names[who]}, {c} clients, {op}: {notes[(who, op, c)]} (last round)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
