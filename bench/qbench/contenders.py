"""The contenders: q and what users would pick instead, each behind the same
small interface (create, send_one, receive, ack, files): a q queue file, an
SQLite table the way SQLite-based queues do it, and a Redis stream with a
consumer group on a private durable redis-server."""
import os
import shutil
import signal
import socket
import subprocess
import time

from .common import VISIBILITY_MS, BenchError

class QQueue:
    name = "q"

    def __init__(self, procs, qbin, path, queue="bench"):
        self.p, self.qbin, self.path, self.queue = procs, qbin, path, queue
        self.env = {"Q_FILE": path}

    def create(self):
        for f in (self.path, self.path + "-lock"):
            if os.path.exists(f):
                os.unlink(f)
        self.p.run([self.qbin, "create", self.queue, "--max-receives", "0"], env=self.env)

    def send_one(self, body):
        return self.p.run([self.qbin, "send", self.queue, body], env=self.env)

    def send_lines(self, lines_file):
        return self.p.run([self.qbin, "send", self.queue, "--lines", "-q"], env=self.env,
                          stdin=lines_file)

    def receive(self, n=1):
        """Returns (Result, [(receipt, body)])."""
        r = self.p.run([self.qbin, "receive", self.queue, "-n", str(n)], env=self.env,
                       capture=True, ok=(0, 1))
        got = []
        if r.rc == 0:
            for line in r.out.splitlines():
                parts = line.split("\t", 3)
                got.append((parts[1], parts[3]))
        return r, got

    def ack(self, receipts):
        if len(receipts) <= 8:
            return self.p.run([self.qbin, "ack", self.queue] + receipts, env=self.env)
        stdin = os.path.join(self.p.work, "receipts")
        with open(stdin, "w") as f:
            f.write("\n".join(receipts) + "\n")
        return self.p.run([self.qbin, "ack", self.queue], env=self.env, stdin=stdin)

    def depth(self):
        import json
        out = self.p.check_output([self.qbin, "stats", self.queue, "--json"], env=self.env)
        s = json.loads(out.splitlines()[0])
        return int(s.get("visible", 0)) + int(s.get("in_flight", 0)) + int(s.get("delayed", 0))

    def files(self):
        return [self.path]


NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"


class SqliteQueue:
    """A queue the way SQLite-based queues (goqite, litequeue, ...) do it: one
    table with visible-at and receive-count columns and an index, WAL mode, and
    synchronous=FULL so that a commit is durable like q's."""
    name = "sqlite3"
    SCHEMA = ("PRAGMA journal_mode=WAL;"
              "CREATE TABLE messages(id INTEGER PRIMARY KEY, queue TEXT NOT NULL, "
              "body BLOB NOT NULL, visible_at INTEGER NOT NULL, "
              "receive_count INTEGER NOT NULL DEFAULT 0, receipt TEXT);"
              "CREATE INDEX messages_ready ON messages(queue, visible_at, id);")

    def __init__(self, procs, path):
        self.p, self.path = procs, path

    def argv(self, *sql):
        return ["sqlite3", "-batch", "-init", "/dev/null", "-cmd", "PRAGMA synchronous=FULL",
                "-cmd", ".timeout 10000", self.path] + list(sql)

    def create(self):
        for f in self.files():
            if os.path.exists(f):
                os.unlink(f)
        out = self.p.check_output(self.argv(self.SCHEMA))
        if out.strip() != "wal":
            raise BenchError(f"sqlite3: journal_mode WAL not set: {out!r}")

    def send_one(self, body):
        return self.p.run(self.argv(
            f"INSERT INTO messages(queue, body, visible_at) VALUES('bench', '{body}', {NOW_MS})"))

    @staticmethod
    def write_bulk_sql(lines_file, sql_file):
        """One big transaction of multi-row INSERTs (1000 rows a statement)."""
        with open(lines_file) as src, open(sql_file, "w") as out:
            out.write("BEGIN;\n")
            rows = []
            for line in src:
                rows.append(f"('bench','{line.rstrip(chr(10))}',0)")
                if len(rows) == 1000:
                    out.write("INSERT INTO messages(queue, body, visible_at) VALUES "
                              + ",".join(rows) + ";\n")
                    rows = []
            if rows:
                out.write("INSERT INTO messages(queue, body, visible_at) VALUES "
                          + ",".join(rows) + ";\n")
            out.write("COMMIT;\n")

    def send_bulk(self, sql_file):
        return self.p.run(self.argv(), stdin=sql_file)

    def receive(self, n=1):
        sql = (f"UPDATE messages SET visible_at = {NOW_MS} + {VISIBILITY_MS}, "
               "receive_count = receive_count + 1, receipt = lower(hex(randomblob(8))) "
               "WHERE id IN (SELECT id FROM messages WHERE queue = 'bench' AND "
               f"visible_at <= {NOW_MS} ORDER BY visible_at, id LIMIT {n}) "
               "RETURNING id, receipt, receive_count, body")
        r = self.p.run(self.argv(sql), capture=True)
        got = []
        for line in r.out.splitlines():
            parts = line.split("|", 3)
            got.append((f"{parts[0]}|{parts[1]}", parts[3]))
        return r, got

    def ack(self, receipts):
        stmts = []
        for rc in receipts:
            mid, nonce = rc.split("|")
            stmts.append(f"DELETE FROM messages WHERE id = {int(mid)} AND receipt = '{nonce}';")
        if len(stmts) == 1:
            return self.p.run(self.argv(stmts[0]))
        stdin = os.path.join(self.p.work, "ack.sql")
        with open(stdin, "w") as f:
            f.write("BEGIN;\n" + "\n".join(stmts) + "\nCOMMIT;\n")
        return self.p.run(self.argv(), stdin=stdin)

    def files(self):
        return [self.path, self.path + "-wal", self.path + "-shm"]


ACK_LUA = ("local ids = {unpack(ARGV, 2)} "
           "redis.call('XACK', KEYS[1], ARGV[1], unpack(ids)) "
           "return redis.call('XDEL', KEYS[1], unpack(ids))")


class RedisServer:
    """A private redis-server on a free loopback port, durable like q
    (appendonly, appendfsync always), in its own directory; stopped at exit."""

    def __init__(self, work):
        self.dir = os.path.join(work, "redis")
        self.proc = None
        self.port = None

    def start(self):
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        for _ in range(5):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            log_file = open(os.path.join(self.dir, "redis.log"), "a")
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", self.dir,
                 "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                 "--auto-aof-rewrite-percentage", "0", "--daemonize", "no",
                 "--protected-mode", "yes", "--unixsocket", ""],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent)
            for _ in range(200):
                if self.proc.poll() is not None:
                    break
                # INFO, not PING: the server answering must be ours (its pid), not
                # one another run started on the port that was free a moment ago.
                r = subprocess.run(["redis-cli", "-p", str(port), "INFO", "server"],
                                   capture_output=True, text=True)
                if f"process_id:{self.proc.pid}\r" in r.stdout or \
                        f"process_id:{self.proc.pid}\n" in r.stdout:
                    self.port = port
                    return
                time.sleep(0.02)
            self.stop()
        raise BenchError(f"redis-server did not start; see {self.dir}/redis.log")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self):
        self.stop()
        self.start()


def _die_with_parent():
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    os.setpgid(0, 0)


class RedisQueue:
    """The Redis way to get at-least-once delivery with acks: a stream with a
    consumer group (XADD, XREADGROUP, XACK + XDEL in one Lua call)."""
    name = "redis"

    def __init__(self, procs, server):
        self.p, self.server = procs, server

    def cli(self, *args):
        return ["redis-cli", "-p", str(self.server.port)] + list(args)

    def create(self):
        self.p.run(self.cli("DEL", "q"), capture=True)
        out = self.p.check_output(self.cli("XGROUP", "CREATE", "q", "g", "0", "MKSTREAM"))
        if out.strip() != "OK":
            raise BenchError(f"redis XGROUP CREATE: {out!r}")

    def send_one(self, body):
        return self.p.run(self.cli("XADD", "q", "*", "b", body), capture=True)

    @staticmethod
    def write_bulk_resp(lines_file, resp_file):
        def bulk(s):
            b = s.encode()
            return b"$%d\r\n%s\r\n" % (len(b), b)
        head = b"*5\r\n" + bulk("XADD") + bulk("q") + bulk("*") + bulk("b")
        with open(lines_file) as src, open(resp_file, "wb") as out:
            for line in src:
                out.write(head + bulk(line.rstrip("\n")))

    def send_bulk(self, resp_file):
        r = self.p.run(self.cli("--pipe"), stdin=resp_file, capture=True)
        if "errors: 0" not in r.out:
            raise BenchError(f"redis-cli --pipe: {r.out.strip()}")
        return r

    def receive(self, n=1):
        r = self.p.run(self.cli("XREADGROUP", "GROUP", "g", "c", "COUNT", str(n), "STREAMS", "q",
                                ">"), capture=True)
        lines = r.out.splitlines()
        got = []
        # Flat output: stream name, then id, field, value per entry.
        for i in range(1, len(lines) - 2, 3):
            got.append((lines[i], lines[i + 2]))
        return r, got

    def ack(self, receipts):
        r = self.p.run(self.cli("EVAL", ACK_LUA, "1", "q", "g", *receipts), capture=True)
        if r.out.strip() != str(len(receipts)):
            raise BenchError(f"redis ack: {r.out.strip()!r}, expected {len(receipts)}")
        return r

    def files(self):
        return [self.server.dir]
