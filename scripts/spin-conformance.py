#!/usr/bin/env python3
"""Runs Spin's conformance suite (fermyon/conformance-tests) against Luge.

Each test is a directory of the suite's `tests/`: a `spin.toml` with
placeholders, a `test.json5` of requests and the exact responses expected,
and the preconditions (services) it needs. This does what the suite's own
runner (its `test-environment` crate, which Spin and SpinKube's shim use)
does, with Luge in place of `spin up`:

- the components are built from the checkout (`cargo build --release
  --target wasm32-unknown-unknown`, as the suite's `archive` does) and
  copied next to the manifest, which is how `%{source=NAME}` is filled;
- each precondition's service is started on a free loopback port: the
  suite's own `http-echo.py` and `tcp-echo.py`, and Redis, Mosquitto and
  PostgreSQL (with the suite's `postgres-init/*.sql`, user `postgres`,
  password `postgres`, database `spin_dev`, as its Dockerfile sets up)
  from Debian's packages; `%{port=N}` becomes the port of the service that
  stands for the guest port N (80, 7, 6379, 1883, 5432);
- `luge serve --spin spin.toml` serves the app on a free port, and each
  invocation is sent and checked as the suite's `assert_response` checks
  it: the status, the body, every expected header (names and values
  compared in lower case, `optional` ones may be absent), and no other
  header.

One line per test (`PASS name` or `FAIL name: why`), then `N/M passed`.
Exits 1 when any test failed. Loopback only; every service and Luge are
stopped when their test ends.
"""

import argparse
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import json5

TEMPLATE = re.compile(r"%\{(.*?)\}")
# How long a service or Luge may take to listen, seconds.
START_TIMEOUT = 60
# How long one request may take, seconds.
REQUEST_TIMEOUT = 60


class Failed(Exception):
    """A test failed; the message says why."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, process, what):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise Failed(f"{what} exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise Failed(f"{what} did not listen on {port} within {START_TIMEOUT} s")


class Services:
    """The services of one test, each on a free loopback port, by guest port."""

    def __init__(self, suite, work):
        self.suite = suite
        self.work = work
        self.ports = {}
        self.processes = []
        # Directories to remove when the test ends.
        self.cleanup = []

    def __enter__(self):
        return self

    def __exit__(self, *_):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for directory in self.cleanup:
            shutil.rmtree(directory, ignore_errors=True)

    def spawn(self, args, **kwargs):
        process = subprocess.Popen(args, **kwargs)
        self.processes.append(process)
        return process

    def start(self, kind):
        services = self.suite / "crates/test-environment/services"
        if kind in ("http-echo", "tcp-echo"):
            # The suite's own script: it prints `PORT=(GUEST,HOST)` and then
            # `READY`, and logs each request after (to a file: a closed pipe
            # would end the script at its first log line).
            out = self.work / f"{kind}.log"
            process = self.spawn(
                [sys.executable, "-u", str(services / f"{kind}.py")],
                stdout=out.open("wb"),
                stderr=subprocess.STDOUT,
                cwd=self.work,
            )
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise Failed(f"{kind} ended before it was ready")
                lines = out.read_text(errors="replace").splitlines()
                if "READY" in lines:
                    for line in lines:
                        found = re.match(r"PORT=\((\d+),(\d+)\)", line.strip())
                        if found:
                            self.ports[int(found[1])] = int(found[2])
                    return
                time.sleep(0.05)
            raise Failed(f"{kind} was not ready within {START_TIMEOUT} s")
        elif kind == "redis":
            port = free_port()
            process = self.spawn(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.work)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_listening(port, process, "redis-server")
            self.ports[6379] = port
        elif kind == "mqtt":
            port = free_port()
            config = self.work / "mosquitto.conf"
            config.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
            process = self.spawn(
                ["mosquitto", "-c", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_listening(port, process, "mosquitto")
            self.ports[1883] = port
        elif kind == "postgres":
            self.ports[5432] = self.postgres(services / "postgres-init")
        elif kind in ("key-value-store", "sqlite"):
            # Served by Luge itself (the app's default stores).
            pass
        else:
            raise Failed(f"unknown precondition {kind!r}")

    def postgres(self, init):
        """A fresh cluster as the suite's image makes it; its port."""
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not bins:
            raise Failed("no PostgreSQL under /usr/lib/postgresql (scripts/setup.sh installs it)")
        bin_dir = bins[-1].parent
        root = os.geteuid() == 0
        # PostgreSQL refuses to run as root: the cluster is then nobody's.
        as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"] if root else []
        home = Path(tempfile.mkdtemp(prefix="luge-conformance-pg-"))
        self.cleanup.append(home)
        pwfile = home / "pw"
        pwfile.write_text("postgres\n")
        if root:
            shutil.chown(home, "nobody", "nogroup")
            shutil.chown(pwfile, "nobody", "nogroup")
        data = home / "data"
        subprocess.run(
            as_user + [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                       "--auth=scram-sha-256", "--no-sync", "-E", "UTF8", f"--pwfile={pwfile}"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        port = free_port()
        process = self.spawn(
            as_user + [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                       "-h", "127.0.0.1", "-F", "-k", str(home)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(port, process, "postgres")
        env = dict(os.environ, PGPASSWORD="postgres")
        connect = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
        subprocess.run(as_user + [str(bin_dir / "createdb")] + connect + ["spin_dev"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        for script in sorted(init.glob("*.sql")):
            subprocess.run(
                as_user + [str(bin_dir / "psql")] + connect
                + ["-d", "spin_dev", "-v", "ON_ERROR_STOP=1", "-q", "-f", "-"],
                check=True, env=env, stdin=script.open("rb"),
                stdout=subprocess.DEVNULL,
            )
        return port

    def port(self, guest):
        if guest not in self.ports:
            raise Failed(f"no port {guest} exposed by any service")
        return self.ports[guest]


def fill(text, services, sources, work):
    """Fills `%{source=NAME}` and `%{port=N}` as the suite's runner does."""
    def replace(match):
        key, _, value = match[1].partition("=")
        key, value = key.strip(), value.strip()
        if key == "source":
            if value not in sources:
                raise Failed(f"no such component {value!r}")
            wasm = sources[value]
            shutil.copy(wasm, work / wasm.name)
            return wasm.name
        if key == "port":
            return str(services.port(int(value)))
        raise Failed(f"unknown template key {key!r}")
    return TEMPLATE.sub(replace, text)


def build_components(suite):
    """Builds the suite's components; each component's name to its .wasm."""
    subprocess.run(
        ["cargo", "build", "--quiet", "--release", "--target=wasm32-unknown-unknown",
         "--manifest-path", str(suite / "Cargo.toml"),
         *[arg for d in sorted((suite / "components").iterdir()) if d.is_dir()
           for arg in ("-p", tomllib.loads((d / "Cargo.toml").read_text())["package"]["name"])]],
        check=True,
    )
    out = suite / "target/wasm32-unknown-unknown/release"
    sources = {}
    for component in sorted((suite / "components").iterdir()):
        if not component.is_dir():
            continue
        package = tomllib.loads((component / "Cargo.toml").read_text())["package"]["name"]
        sources[component.name] = out / (package.replace("-", "_") + ".wasm")
    return sources


def send(port, request, services):
    """Sends one invocation's request; (status, headers, body)."""
    method = request.get("method", "GET").upper()
    path = request.get("path", "/")
    headers = []
    for header in request.get("headers", []):
        value = TEMPLATE.sub(lambda m: str(services.port(int(m[1].split("=", 1)[1]))), header["value"])
        headers.append((header["name"], value))
    body = request.get("body")
    body = body.encode() if body is not None else None
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if not any(name.lower() == "host" for name, _ in headers):
            connection.putheader("Host", f"127.0.0.1:{port}")
        for name, value in headers:
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        connection.close()


def check(expected, status, headers, body):
    """The suite's `assert_response`."""
    want_status = expected.get("status", 200)
    text = body.decode("utf-8", "replace")
    if status != want_status:
        raise Failed(f"actual status {status} != expected status {want_status} - body: {text}")
    want_body = expected.get("body") or ""
    if text != want_body:
        raise Failed(f"actual body != expected body: actual {text!r}, expected {want_body!r}")
    actual = {name.lower(): value.lower() for name, value in headers}
    for header in expected.get("headers", []):
        name = header["name"].lower()
        value = actual.pop(name, None)
        if value is None:
            if header.get("optional", False):
                continue
            raise Failed(f"expected header {header['name']!r} not found in response")
        if header.get("value") is not None and value != header["value"].lower():
            raise Failed(f"header {header['name']!r} has unexpected value {value!r} != {header['value'].lower()!r}")
    if actual:
        raise Failed(f"unexpected headers: {actual}")


def run_test(test, luge, sources, keep):
    config = json5.loads((test / "test.json5").read_text())
    work = Path(tempfile.mkdtemp(prefix=f"{test.name}-"))
    try:
        with Services(test.parent.parent, work) as services:
            for precondition in config.get("preconditions", []):
                services.start(precondition["kind"])
            manifest = fill((test / "spin.toml").read_text(), services, sources, work)
            (work / "spin.toml").write_text(manifest)
            port = free_port()
            log = (work / "luge.log").open("wb")
            process = services.spawn(
                [str(Path(luge).resolve()), "serve", "--spin", str(work / "spin.toml"), "--listen", f"127.0.0.1:{port}",
                 "--state-dir", str(work / "state")],
                cwd=work, stdout=log, stderr=subprocess.STDOUT,
                env=dict(os.environ, RUST_BACKTRACE="0"),
            )
            try:
                wait_listening(port, process, "luge")
            except Failed as failed:
                lines = (work / "luge.log").read_text(errors="replace").strip().splitlines()
                said = [line for line in lines if line.startswith("luge: error")] or lines[-3:]
                raise Failed(f"{failed}: {' | '.join(said)}") from None
            for index, invocation in enumerate(config["invocations"]):
                try:
                    status, headers, body = send(port, invocation["request"], services)
                    check(invocation["response"], status, headers, body)
                except Failed as failed:
                    raise Failed(f"invocation {index}: {failed}") from None
                except OSError as error:
                    raise Failed(f"invocation {index}: {error}") from None
    finally:
        if keep:
            print(f"  kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, type=Path, help="a checkout of fermyon/conformance-tests")
    parser.add_argument("--luge", required=True, help="the luge binary")
    parser.add_argument("--only", action="append", default=[], help="run only this test (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep each test's work directory")
    args = parser.parse_args()
    suite = args.suite.resolve()
    sources = build_components(suite)
    tests = sorted(d for d in (suite / "tests").iterdir() if (d / "test.json5").exists())
    if args.only:
        tests = [t for t in tests if t.name in args.only]
    passed = 0
    for test in tests:
        try:
            run_test(test, args.luge, sources, args.keep)
        except (Failed, subprocess.CalledProcessError) as failed:
            print(f"FAIL {test.name}: {failed}", flush=True)
        else:
            passed += 1
            print(f"PASS {test.name}", flush=True)
    print(f"{passed}/{len(tests)} passed")
    sys.exit(0 if passed == len(tests) and tests else 1)


if __name__ == "__main__":
    main()
