#!/usr/bin/env python3
"""A victim's request that arrives while another sandbox runs on its worker.

Starts `luge-bench serve` (bench profile) with one worker and the routes it
needs, then runs ROUNDS rounds on three kept-alive connections, all taken by
that worker (opened while it is idle):

- C: a 3 ms `spin` (deadline 100 ms, the route default);
- 0.8 ms into it, V: the victim's `c-echo` (deadline 10 ms), and at once
  B: a 20 ms `spin` (deadline 50 ms, so it runs after the victim and before
  C's remainder), on a route that has never run (`fresh`) or one that has
  (`known`).

It prints the victim's latency per round (v), when C and B were answered
(c, b; ms from the victim's request) and the victim's percentiles. The
victim waits for its request to be read (C yields for the arrival at an
epoch tick) and then for its response to be written (before B's first
quantum, or after it when B is batched with the victim).

    python3 benches/probes/victim_behind.py fresh [--rounds 60] [--pin 1]

`--pin CORE` confines the server to one core (`taskset`), where the epoch
ticker shares the worker's core. The binary is target/release/luge-bench
unless --bin names another; the modules come from target/wasm
(scripts/build-actions.sh).
"""
import argparse, json, os, socket, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUTES = 80


def config(wasm):
    s = f'[server]\nworkers = 1\n\n[[routes]]\npath = "/victim"\nmodule = "{wasm}/c-echo.wasm"\n'
    for i in range(ROUTES):
        s += f'\n[[routes]]\npath = "/burn{i}"\nmodule = "{wasm}/spin.wasm"\nlimits = {{ timeout_ms = 60000 }}\n'
    return s


def send(s, path, body, deadline_ms):
    s.sendall(
        f"POST {path} HTTP/1.1\r\nhost: x\r\nx-luge-deadline-ms: {deadline_ms}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body
    )


def read(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("the server closed a connection")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    n = int(next(l.split(b":")[1] for l in lines if l.lower().startswith(b"content-length")))
    while len(rest) < n:
        rest += s.recv(65536)
    if b" 200 " not in lines[0]:
        raise SystemExit(f"unexpected answer: {lines[0]!r} {rest[:200]!r}")


def spin(iterations):
    return json.dumps({"iterations": iterations}).encode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["fresh", "known"])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--pin", type=int)
    p.add_argument("--bin", default=os.path.join(ROOT, "target/release/luge-bench"))
    p.add_argument("--port", type=int, default=9311)
    p.add_argument("--server-arg", action="append", default=[],
                   help="passed on to `luge-bench serve` (e.g. --server-arg=--front-end=threads)")
    a = p.parse_args()
    if a.rounds > ROUTES - 2:
        raise SystemExit(f"at most {ROUTES - 2} rounds (one fresh route each)")
    work = tempfile.mkdtemp(prefix="victim-behind-")
    with open(os.path.join(work, "luge.toml"), "w") as f:
        f.write(config(os.path.join(ROOT, "target/wasm")))
    cmd = [a.bin, "serve", "--listen", f"127.0.0.1:{a.port}", "--engine", "wasmtime",
           "--config", "luge.toml", "--cache-dir", work, "--state-dir", os.path.join(work, "state")] + a.server_arg
    if a.pin is not None:
        cmd = ["taskset", "-c", str(a.pin)] + cmd
    server = subprocess.Popen(cmd, cwd=work, env=dict(os.environ, LUGE_BENCH_SERVE="1"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", a.port)).close()
                break
            except OSError:
                time.sleep(0.05)
        conns = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", a.port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(s)
        v, b, c = conns
        send(v, "/victim", b"hi", 1000); read(v)
        for s in (b, c):
            send(s, f"/burn{ROUTES - 1}", spin(1000), 1000); read(s)
        send(b, f"/burn{ROUTES - 2}", spin(1000), 1000); read(b)
        lat, rows = [], []
        for i in range(a.rounds):
            path = f"/burn{i}" if a.mode == "fresh" else f"/burn{ROUTES - 2}"
            send(c, f"/burn{ROUTES - 1}", spin(3_000_000), 1000)
            time.sleep(0.0008)
            t = time.perf_counter()
            send(v, "/victim", b"hello", 10)
            send(b, path, spin(20_000_000), 50)
            read(v); lat.append((time.perf_counter() - t) * 1000)
            read(c); ce = (time.perf_counter() - t) * 1000
            read(b); be = (time.perf_counter() - t) * 1000
            rows.append(f"v{lat[-1]:.1f}/c{ce:.1f}/b{be:.1f}")
            time.sleep(0.01)
        print(" ".join(rows))
        lat.sort()
        n = len(lat)
        print(f"{a.mode}: victim n {n} p50 {lat[n // 2]:.2f} p90 {lat[n * 9 // 10]:.2f} "
              f"max {lat[-1]:.2f} mean {sum(lat) / n:.2f} ms")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
