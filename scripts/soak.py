#!/usr/bin/env python3
"""An hour of mixed load on one `luge serve` (issue 26), loopback only.

What runs, all at once:

- clients: a C function, a Rust function, a WASI 0.2 command component, a
  wasi:http component, Python (componentize-py), a fan-out with calls,
  state writes on the local tier and on Redis over a bounded set of keys
  (`--keys` per tier, each key's last acknowledged value remembered),
  uploads and deletes of functions through the management API;
- random client aborts: requests cut off mid-body, and connections closed
  before the answer;
- `kill -9` of Luge every `--restart-every` seconds and a restart on the
  same state and store directories; Redis killed once, halfway, and
  restarted on its own data.

Pass, printed at the end and written to `--out` as JSON:

- Luge's RSS flat after warm-up: in each life of the process, the RSS at its
  end is within `--rss-slack` of the RSS after `--warmup` seconds;
- no 5xx that the function did not cause (none of these functions fails),
  outside the moments Luge or Redis is down by design;
- every key's last acknowledged write (or a later one to it) read back
  after every restart.

The keys are a bounded set, rewritten over and over, so that the state
the soak itself keeps (the local tier holds every key in memory, up to
its 100,000-key quota per namespace) stops growing within the warm-up
and the RSS check measures Luge, not the soak's own data: with a new key
per write, the first life's RSS grew by about 290 bytes per key until
the quota refused more (docs/BENCHMARKS-ARCHIVE.md, "The soak's own state").

Usage: scripts/soak.sh [--seconds 3600] (it builds what it needs).
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASM = os.path.join(ROOT, "target", "wasm")
TOKEN = "soak-operator-token-0123456789abcdef"

CONFIG = """
[server]
workers = {workers}

[[routes]]
path = "/c-echo"
module = "{wasm}/c-echo.wasm"

[[routes]]
path = "/echo"
module = "{wasm}/echo.wasm"

[[routes]]
path = "/p2-echo"
module = "{wasm}/p2-echo.wasm"

[[routes]]
path = "/web"
module = "{wasm}/http-handler.wasm"

[[routes]]
path = "/py"
module = "{wasm}/py-hello.wasm"
limits = {{ timeout_ms = 5000 }}

[[routes]]
path = "/fanout"
module = "{wasm}/fanout.wasm"
calls = ["noop"]

[[routes]]
path = "/noop"
module = "{wasm}/noop.wasm"

[[routes]]
path = "/kv"
module = "{wasm}/kv.wasm"
state = ["soak"]
limits = {{ timeout_ms = 5000 }}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Stats:
    """Counts, shared by the client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = {}
        self.server_errors = []
        self.aborts = 0
        self.refused = 0

    def count(self, kind, status):
        with self.lock:
            per = self.by_kind.setdefault(kind, {})
            per[str(status)] = per.get(str(status), 0) + 1

    def error(self, kind, status, body):
        with self.lock:
            if len(self.server_errors) < 50:
                self.server_errors.append(f"{kind}: {status} {body[:200]!r}")


class Soak:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="luge-soak-")
        self.port = free_port()
        self.redis_port = free_port()
        self.stats = Stats()
        self.acked = {"local": {}, "global": {}}
        self.acked_lock = threading.Lock()
        self.seq = 0
        # Set while Luge or Redis is down by design: errors then are expected.
        self.down = threading.Event()
        self.redis_down = threading.Event()
        self.stop = threading.Event()
        self.luge = None
        self.redis = None
        self.lives = []
        self.verifications = []

    # Processes.

    def start_redis(self):
        data = os.path.join(self.dir, "redis")
        os.makedirs(data, exist_ok=True)
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--dir", data, "--appendonly", "yes", "--appendfsync", "always",
             "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.redis_port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def start_luge(self):
        config = os.path.join(self.dir, "luge.toml")
        with open(config, "w") as f:
            f.write(CONFIG.format(workers=self.args.workers, wasm=WASM))
        token = os.path.join(self.dir, "token")
        with open(token, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(token, 0o600)
        log = open(os.path.join(self.dir, f"luge-{len(self.lives)}.log"), "w")
        env = dict(os.environ, LUGE_KEY="soak test key 0123456789abcdef0123")
        self.luge = subprocess.Popen(
            [self.args.luge, "serve", "--listen", f"127.0.0.1:{self.port}",
             "--config", config, "--token-file", token,
             "--store", os.path.join(self.dir, "store"),
             "--state-dir", os.path.join(self.dir, "state"),
             "--cache-dir", os.path.join(self.dir, "cache"),
             "--state-url", f"redis://127.0.0.1:{self.redis_port}/"],
            stdout=log, stderr=log, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    self.lives.append({"pid": self.luge.pid, "started": time.time(),
                                       "rss": []})
                    return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("luge did not start; see " + log.name)

    # Requests.

    def request(self, method, path, body=b"", headers=None, timeout=10):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def one(self, kind, method, path, body=b"", headers=None):
        try:
            status, reply = self.request(method, path, body, headers)
        except OSError:
            with self.stats.lock:
                self.stats.refused += 1
            return None
        self.stats.count(kind, status)
        if status >= 500 and not self.down.is_set() and not (
                kind.startswith("kv-global") and self.redis_down.is_set()):
            self.stats.error(kind, status, reply)
        return status, reply

    def kv_write(self, tier):
        with self.acked_lock:
            self.seq += 1
            seq = self.seq
        key = f"soak/{tier}-{seq % self.args.keys}"
        value = f"{seq}-{random.getrandbits(64):x}"
        op = {"op": "set", "key": key, "value": value, "global": tier == "global"}
        got = self.one(f"kv-{tier}", "POST", "/kv", json.dumps({"ops": [op]}).encode())
        acked = False
        if got and got[0] == 200:
            try:
                acked = json.loads(got[1])["results"][0] == "ok"
            except (ValueError, KeyError, IndexError):
                pass
        # A key is checked only while its stored value is certain: the
        # newest write to it was acknowledged, and no older one is still
        # unaccounted for. A write that failed (it may have been applied or
        # not: Luge killed in the middle) or that was acknowledged after a
        # newer one (the two may have been applied in either order) leaves
        # the key unchecked until its next acknowledged write.
        with self.acked_lock:
            known = self.acked[tier].get(key)
            if acked and (known is None or known[0] < seq):
                self.acked[tier][key] = (seq, value)
            else:
                self.acked[tier].pop(key, None)

    def abort(self):
        """A request cut off mid-body, or closed before the answer."""
        with self.stats.lock:
            self.stats.aborts += 1
        try:
            s = socket.create_connection(("127.0.0.1", self.port), 1)
            if random.random() < 0.5:
                s.sendall(b"POST /c-echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\npartial")
            else:
                s.sendall(b"POST /py HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
                time.sleep(random.random() * 0.05)
            s.close()
        except OSError:
            pass

    def upload_cycle(self):
        name = f"up{random.randrange(8)}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with open(os.path.join(WASM, "c-echo.wasm"), "rb") as f:
            module = f.read()
        got = self.one("upload", "PUT", f"/v1/functions/{name}", module, auth)
        if got and got[0] in (200, 201):
            self.one("uploaded-run", "POST", f"/fn/{name}", b"hi")
            if random.random() < 0.5:
                self.one("delete", "DELETE", f"/v1/functions/{name}", b"", auth)

    def client(self):
        mix = [
            (20, lambda: self.one("c-echo", "POST", "/c-echo", os.urandom(random.randrange(1, 4096)))),
            (10, lambda: self.one("echo", "POST", "/echo", b'{"a": 1}')),
            (10, lambda: self.one("p2-echo", "POST", "/p2-echo", b'{"a": 1}')),
            (15, lambda: self.one("web", "GET", "/web")),
            (5, lambda: self.one("py", "POST", "/py", b'{"name": "soak"}')),
            (10, lambda: self.one("fanout", "POST", "/fanout", json.dumps(
                {"calls": [{"name": "noop", "input": {}}] * random.randrange(1, 8)}).encode())),
            (10, lambda: self.kv_write("local")),
            (10, lambda: self.kv_write("global")),
            (2, self.upload_cycle),
            (3, self.abort),
        ]
        weights = [w for w, _ in mix]
        while not self.stop.is_set():
            if self.down.is_set():
                time.sleep(0.05)
                continue
            random.choices(mix, weights)[0][1]()

    # Checks.

    def holds(self, got, seq, value):
        """Whether `got`, read back, keeps the write `seq` of `value`: it is
        that value, or a later write to the same key (clients keep writing
        while a check after a Redis restart reads)."""
        if got == value:
            return True
        try:
            later = int(str(got).split("-", 1)[0])
        except ValueError:
            return False
        return later > seq and later % self.args.keys == seq % self.args.keys

    def verify(self, when):
        """Every key's last acknowledged write read back, on both tiers."""
        missing = 0
        checked = 0
        for tier in ("local", "global"):
            with self.acked_lock:
                items = list(self.acked[tier].items())
            for i in range(0, len(items), 200):
                chunk = items[i:i + 200]
                ops = [{"op": "get", "key": k, "global": tier == "global"} for k, _ in chunk]
                for attempt in range(50):
                    try:
                        status, body = self.request("POST", "/kv", json.dumps({"ops": ops}).encode())
                        if status == 200:
                            break
                    except OSError:
                        pass
                    time.sleep(0.2)
                else:
                    raise SystemExit(f"{when}: the state could not be read back")
                results = json.loads(body)["results"]
                for (key, (seq, value)), got in zip(chunk, results):
                    checked += 1
                    if not self.holds(got, seq, value):
                        missing += 1
                        if missing <= 5:
                            print(f"  {when}: {key} is {got!r}, acknowledged {value!r}", flush=True)
        self.verifications.append({"when": when, "checked": checked, "missing": missing})
        print(f"{when}: {checked} acknowledged writes read back, {missing} missing", flush=True)

    def sample(self):
        while not self.stop.is_set():
            life = self.lives[-1] if self.lives else None
            if life and not self.down.is_set():
                rss = rss_kib(life["pid"])
                if rss:
                    life["rss"].append((time.time() - life["started"], rss))
            self.stop.wait(5)

    def run(self):
        a = self.args
        self.start_redis()
        self.start_luge()
        clients = [threading.Thread(target=self.client, daemon=True) for _ in range(a.clients)]
        sampler = threading.Thread(target=self.sample, daemon=True)
        for t in clients + [sampler]:
            t.start()
        started = time.time()
        next_restart = started + a.restart_every
        redis_at = started + a.seconds / 2
        redis_done = False
        while time.time() - started < a.seconds:
            time.sleep(1)
            now = time.time()
            if not redis_done and now >= redis_at:
                print(f"{now - started:.0f} s: kill -9 Redis", flush=True)
                self.redis_down.set()
                self.redis.send_signal(signal.SIGKILL)
                self.redis.wait()
                time.sleep(5)
                self.start_redis()
                time.sleep(3)
                self.redis_down.clear()
                redis_done = True
                self.verify(f"{now - started:.0f} s, after Redis's restart")
            if now >= next_restart and now - started < a.seconds - 30:
                print(f"{now - started:.0f} s: kill -9 Luge", flush=True)
                self.down.set()
                self.luge.send_signal(signal.SIGKILL)
                self.luge.wait()
                self.start_luge()
                self.verify(f"{now - started:.0f} s, after Luge's restart")
                self.down.clear()
                next_restart = now + a.restart_every
        self.stop.set()
        for t in clients:
            t.join(timeout=15)
        self.verify("the end")
        self.luge.send_signal(signal.SIGTERM)
        self.luge.wait(timeout=30)
        self.redis.send_signal(signal.SIGTERM)
        self.redis.wait(timeout=30)
        return self.report(time.time() - started)

    def report(self, wall):
        a = self.args
        lives = []
        flat = True
        for i, life in enumerate(self.lives):
            samples = life["rss"]
            warm = [rss for t, rss in samples if t >= a.warmup]
            if len(warm) < 2:
                lives.append({"life": i, "samples": len(samples)})
                continue
            growth = (warm[-1] - warm[0]) / warm[0]
            ok = growth <= a.rss_slack
            flat = flat and ok
            lives.append({"life": i, "rss_after_warmup_mib": round(warm[0] / 1024, 1),
                          "rss_at_end_mib": round(warm[-1] / 1024, 1),
                          "rss_max_mib": round(max(warm) / 1024, 1),
                          "growth": round(growth, 3), "flat": ok})
        requests = sum(sum(v.values()) for v in self.stats.by_kind.values())
        missing = sum(v["missing"] for v in self.verifications)
        result = {
            "seconds": round(wall),
            "requests": requests,
            "by_kind": self.stats.by_kind,
            "aborted_by_client": self.stats.aborts,
            "refused_connections_while_down": self.stats.refused,
            "server_errors": self.stats.server_errors,
            "lives": lives,
            "verifications": self.verifications,
            "passed": flat and not self.stats.server_errors and missing == 0,
        }
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
        print(json.dumps({k: result[k] for k in (
            "seconds", "requests", "aborted_by_client", "lives", "passed")}, indent=2))
        for e in self.stats.server_errors[:10]:
            print("5xx:", e)
        return 0 if result["passed"] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--luge", required=True, help="the luge binary")
    p.add_argument("--seconds", type=float, default=3600)
    p.add_argument("--restart-every", type=float, default=600)
    p.add_argument("--warmup", type=float, default=60,
                   help="seconds of each life before its RSS is the baseline")
    p.add_argument("--rss-slack", type=float, default=0.10)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--keys", type=int, default=10_000,
                   help="state keys per tier, rewritten over and over")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--out", default=os.path.join(ROOT, "target", "soak.json"))
    sys.exit(Soak(p.parse_args()).run())


if __name__ == "__main__":
    main()
