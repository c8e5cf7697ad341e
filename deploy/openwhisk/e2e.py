#!/usr/bin/env python3
"""Runs Wasm actions through a real OpenWhisk with Luge's factory.

Started by check.sh once OpenWhisk and the factory are compiled:

    e2e.py WORK

WORK is check.sh's work directory (openwhisk.cp, factory/). This script
starts `luge serve` on 127.0.0.1, then OpenWhisk's standalone server
(controller and invoker in one JVM, in-memory store, in-process messaging)
configured with Luge's WasmContainerFactory, and drives it through
OpenWhisk's REST API as `wsk` does. Every check prints one line; the exit
status is 0 only if all pass. With OW_E2E_OUT set, each activation record
fetched is written there as <activationId>.json.

OpenWhisk's standalone server runs `docker version` and `docker ps` at
start even when no container is Docker's; it runs here in a private mount
namespace (unshare) where a stand-in `docker` answers those, so no Docker
daemon is needed and the host's docker is untouched.
"""

import base64
import concurrent.futures
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
# OpenWhisk standalone's bootstrapped guest user (standalone.conf).
GUEST = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"

failures = []


def check(name, ok, detail=""):
    print(f"e2e: {'PASS' if ok else 'FAIL'}: {name}" + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(name)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, url, body=None, auth=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def wait_for(url, what, seconds, proc=None, log=None):
    end = time.time() + seconds
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            tail = open(log, errors="replace").read()[-4000:] if log else ""
            sys.exit(f"e2e: {what} exited with {proc.returncode} before answering:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            time.sleep(0.5)
    sys.exit(f"e2e: {what} did not answer {url} within {seconds} s")


class Luge:
    """`luge serve` on loopback, with a directory to grant under its fs root."""

    def __init__(self, tmp):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        root = os.path.join(tmp, "fsroot", "data")
        os.makedirs(root)
        with open(os.path.join(root, "hello.txt"), "w") as f:
            f.write("granted to the action\n")
        key = os.path.join(tmp, "luge.key")
        with open(os.path.join(key), "w") as f:
            f.write(base64.b64encode(os.urandom(32)).decode())
        os.chmod(key, 0o600)
        self.log = os.path.join(tmp, "luge.log")
        binary = os.environ.get("LUGE_BIN", os.path.join(REPO, "target", "debug", "luge"))
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{self.port}",
             "--fs-root", os.path.join(tmp, "fsroot"), "--key-file", key,
             "--cache-dir", os.path.join(tmp, "luge-cache")],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        wait_for(self.base + "/healthz", "luge serve", 30, self.proc, self.log)

    def containers(self, prefix):
        status, body = request("GET", f"{self.base}/containers?prefix={prefix}")
        assert status == 200, body
        return body["containers"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


class OpenWhisk:
    """OpenWhisk's standalone server with Luge's factory as its container factory."""

    def __init__(self, work, tmp, luge_port):
        self.work, self.tmp, self.luge_port = work, tmp, luge_port
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api/v1"
        self.runs = 0
        conf = os.path.join(tmp, "wasm.conf")
        with open(conf, "w") as f:
            f.write(f"""
include classpath("standalone.conf")
whisk {{
  spi {{
    ContainerFactoryProvider = "org.apache.openwhisk.core.containerpool.wasm.WasmContainerFactoryProvider"
    LogStoreProvider = "org.apache.openwhisk.core.containerpool.logging.DockerToActivationLogStoreProvider"
  }}
  wasm-container-factory {{
    executor-host = "127.0.0.1"
    executor-port = {luge_port}
  }}
  # Room for the 20 concurrent activations below: 20 x 128 MB sandboxes.
  container-pool.user-memory = 4096 m
}}
""")
        self.conf = conf
        docker = os.path.join(tmp, "docker")
        with open(docker, "w") as f:
            f.write("#!/bin/sh\n# Stand-in for the docker CLI OpenWhisk's standalone server runs at start.\n"
                    "case \"$1\" in version) echo 0.0.0-luge-stand-in ;; esac\nexit 0\n")
        os.chmod(docker, 0o755)
        self.docker = docker

    def start(self):
        self.runs += 1
        self.log = os.path.join(self.tmp, f"openwhisk-{self.runs}.log")
        classpath = os.path.join(self.work, "factory") + ":" + open(os.path.join(self.work, "openwhisk.cp")).read().strip()
        java = ["java", "-Xmx1g",
                "-Dwhisk.standalone.host.name=127.0.0.1",
                "-Dwhisk.standalone.host.internal=127.0.0.1",
                "-Dwhisk.standalone.host.ip=127.0.0.1",
                "-Duser.home=" + self.tmp,
                "-cp", classpath, "org.apache.openwhisk.standalone.StandaloneOpenWhisk",
                "--port", str(self.port), "--dev-mode", "--no-ui", "--no-browser",
                "--disable-color-logging",
                "-c", self.conf, "-m", os.path.join(HERE, "runtimes.json")]
        # Hide any real docker behind the stand-in, in this process's own
        # mount namespace only.
        targets = [p for p in ("/usr/bin/docker", "/usr/local/bin/docker") if os.path.exists(p)]
        if targets:
            mounts = " && ".join(f"mount --bind {self.docker} {t}" for t in targets)
        else:
            mounts = f"mount -t tmpfs tmpfs /usr/local/bin && cp {self.docker} /usr/local/bin/docker"
        self.proc = subprocess.Popen(
            ["unshare", "-rm", "sh", "-c", f'{mounts} && exec "$@"', "sh"] + java,
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(f"http://127.0.0.1:{self.port}/ping", "OpenWhisk standalone", 240, self.proc, self.log)
        # With the lean balancer (standalone's) the invoker is in-process and
        # /invokers lists none; a clustered controller lists its invokers,
        # which must all be up.
        end = time.time() + 120
        while time.time() < end:
            status, body = request("GET", f"http://127.0.0.1:{self.port}/invokers")
            if status == 200 and isinstance(body, dict) and all(v == "up" for v in body.values()):
                return
            time.sleep(1)
        sys.exit(f"e2e: OpenWhisk's invokers did not come up: {body}")

    def kill(self):
        """SIGKILL: no shutdown hook runs, so its containers stay behind in Luge."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    # --- the REST API, as wsk uses it ---

    def action_url(self, name):
        return f"{self.api}/namespaces/_/actions/{name}"

    def put_action(self, name, wasm, annotations=(), limits=None, overwrite=False):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.write(wasm, "action.wasm")
        body = {"exec": {"kind": "wasm:0.1", "code": base64.b64encode(buf.getvalue()).decode(), "binary": True},
                "annotations": [{"key": k, "value": v} for k, v in annotations]}
        if limits:
            body["limits"] = limits
        url = self.action_url(name) + ("?overwrite=true" if overwrite else "")
        return request("PUT", url, body, GUEST)

    def invoke(self, name, params, blocking=True):
        url = self.action_url(name) + ("?blocking=true" if blocking else "")
        return request("POST", url, params, GUEST, timeout=180)

    def activation(self, activation_id, seconds=60):
        end = time.time() + seconds
        while time.time() < end:
            status, body = request("GET", f"{self.api}/namespaces/_/activations/{activation_id}", auth=GUEST)
            if status == 200:
                return body
            time.sleep(0.5)
        return None


def save(record):
    out = os.environ.get("OW_E2E_OUT")
    if out and record and "activationId" in record:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, record["activationId"] + ".json"), "w") as f:
            json.dump(record, f, indent=2)


def logs_of(record):
    """The message part of each of the record's log lines (after "stream: ")."""
    lines = []
    for line in record.get("logs", []):
        _, _, rest = line.partition(" stdout: ") if " stdout: " in line else line.partition(" stderr: ")
        lines.append(rest)
    return lines


def wasm(name):
    return os.path.join(REPO, "target", "wasm", name + ".wasm")


def scenarios(ow, luge):
    # 1. Create and invoke, blocking: the result and the logs.
    status, body = ow.put_action("hello", wasm("echo"), limits={"memory": 128})
    check("create a wasm action from a zip", status == 200, f"{status} {body}")
    status, record = ow.invoke("hello", {"name": "edge", "log_lines": 50})
    save(record)
    ok = status == 200 and record["response"]["success"] and record["response"]["result"].get("name") == "edge"
    check("blocking invoke answers the action's result", ok, f"{status} {record}")
    if ok:
        record = ow.activation(record["activationId"])
        save(record)
        lines = logs_of(record)
        check("activation logs carry no sentinel", all(SENTINEL not in l for l in record["logs"]), record["logs"])
        expected = ["hello stdout"] + [f"line {i}" for i in range(50)]
        stdout = [l for l in lines if l == "hello stdout" or l.startswith("line ")]
        check("activation logs hold the function's lines, in order", stdout == expected, lines)
        check("activation logs hold stderr", "hello stderr" in lines, lines)

    # 1b. The environment OpenWhisk gives an action: the container's
    # __OW_API_HOST, the activation context, and the action's wasi.env.
    ow.put_action("context", wasm("env"), annotations=[("wasi.env", {"GREETING": "hi"})], limits={"memory": 128})
    status, record = ow.invoke("context", {})
    save(record)
    result = record.get("response", {}).get("result", {}) if isinstance(record, dict) else {}
    check("the action sees __OW_API_HOST", result.get("api_host") == f"http://127.0.0.1:{ow.port}", result)
    check("the action sees its activation context",
          result.get("activation_id") == record.get("activationId")
          and result.get("action_name") == "/guest/context" and result.get("namespace") == "guest", result)
    check("the action sees its wasi.env annotation", result.get("env", {}).get("GREETING") == "hi", result)

    # 2. Non-blocking: 202 and an activation id, the record later.
    status, body = ow.invoke("hello", {"async": True}, blocking=False)
    check("non-blocking invoke answers 202 with an activation id", status == 202 and "activationId" in body,
          f"{status} {body}")
    if status == 202:
        record = ow.activation(body["activationId"])
        save(record)
        check("the non-blocking activation's record arrives with its result",
              record is not None and record["response"]["result"].get("async") is True, record)

    # 3. An annotation granting a directory, read-only.
    grant = [{"host": "data", "guest": "/data", "mode": "ro"}]
    status, body = ow.put_action("reader", wasm("files"), annotations=[("wasi.dirs", grant)], limits={"memory": 128})
    check("create an action with a wasi.dirs annotation", status == 200, f"{status} {body}")
    status, record = ow.invoke("reader", {"path": "/data/hello.txt"})
    save(record)
    text = json.dumps(record)
    check("the granted directory is readable", status == 200 and "granted to the action" in text, text)
    status, record = ow.invoke("reader", {"path": "/data/hello.txt", "write": "x"})
    save(record)
    check("a read-only grant refuses writes", status != 200 or not record["response"]["success"], json.dumps(record))
    status, body = ow.put_action("nogrant", wasm("files"), limits={"memory": 128})
    status, record = ow.invoke("nogrant", {"path": "/data/hello.txt"})
    save(record)
    check("without the annotation there is no directory", not record["response"]["success"], json.dumps(record))

    # 4. A time limit exceeded.
    ow.put_action("sleeper", wasm("sleep"), limits={"timeout": 1000, "memory": 128})
    started = time.time()
    status, record = ow.invoke("sleeper", {"ms": 5000})
    took = time.time() - started
    save(record)
    response = record.get("response", {}) if isinstance(record, dict) else {}
    check("an action past its time limit is a developer error",
          response.get("status") == "action developer error"
          and "time limit" in json.dumps(response.get("result")), json.dumps(record))
    check("... answered near its limit, not the sleep's end", took < 4.5, f"{took:.1f} s")
    status, record = ow.invoke("sleeper", {"ms": 10})
    save(record)
    check("the action runs again after its timeout", status == 200 and record["response"]["success"],
          json.dumps(record))

    # 5. Twenty concurrent activations.
    def one(i):
        return ow.invoke("hello", {"i": i})
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    for _, record in results:
        save(record)
    good = [i for i, (status, record) in enumerate(results)
            if status == 200 and record["response"]["result"].get("i") == i]
    check("20 concurrent activations all answer their own result", len(good) == 20,
          [(s, r) for s, r in results if s != 200][:3])

    # 6. Update, then delete.
    status, body = ow.put_action("hello", wasm("c-hello"), limits={"memory": 128}, overwrite=True)
    check("update the action", status == 200, f"{status} {body}")
    status, record = ow.invoke("hello", {})
    save(record)
    check("the updated code answers", status == 200 and record["response"]["result"].get("greeting") == "hello from C",
          json.dumps(record))
    status, body = request("DELETE", ow.action_url("hello"), auth=GUEST)
    check("delete the action", status == 200, f"{status} {body}")
    status, body = ow.invoke("hello", {})
    check("a deleted action is not found", status == 404, f"{status} {body}")


def restart(ow, luge):
    before = luge.containers("wsk")
    check("the invoker's containers are listed on Luge", len(before) > 0, before)
    ow.kill()
    left = luge.containers("wsk")
    check("a killed invoker leaves its containers behind (what cleanup is for)", len(left) > 0, left)
    ow.start()
    after = luge.containers("wsk")
    check("the restarted invoker purged its previous containers", not set(after) & set(left), after)
    # The in-memory store starts empty: create and run again.
    status, body = ow.put_action("again", wasm("echo"), limits={"memory": 128})
    status, record = ow.invoke("again", {"after": "restart"})
    save(record)
    check("actions run after the invoker restarts", status == 200 and record["response"]["success"],
          json.dumps(record))
    now = luge.containers("wsk")
    check("only the new invoker's containers remain", len(now) >= 1 and not set(now) & set(left), now)
    ow.stop()
    gone = luge.containers("wsk")
    check("an invoker stopped with SIGTERM destroys its containers", gone == [], gone)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: e2e.py WORK")
    work = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="luge-ow-e2e-")
    luge = ow = None
    try:
        luge = Luge(tmp)
        ow = OpenWhisk(work, tmp, luge.port)
        ow.start()
        scenarios(ow, luge)
        restart(ow, luge)
    finally:
        if ow is not None and getattr(ow, "proc", None) is not None:
            ow.stop()
        if luge is not None:
            luge.stop()
        if os.environ.get("OW_E2E_KEEP", "0") == "1":
            print(f"e2e: logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"e2e: {len(failures)} check(s) failed: {', '.join(failures)}")
    print("e2e: all checks passed")


if __name__ == "__main__":
    main()
