#!/usr/bin/env python3
"""A bounded HTTP load for the autoscaling check: CONCURRENCY clients,
each sending GET PATH to 127.0.0.1:PORT with Host HOST one after another,
until SECONDS have passed, at most REQUESTS in all.

    load.py PORT HOST PATH CONCURRENCY SECONDS [REQUESTS] [--pace S]

`--pace S` makes each client wait S seconds between its requests (a
trickle, not a flood). Every request is counted: answered 200, or lost
(any other status, a refused or dropped connection, a timeout), with the
reason. Prints one JSON line: sent, ok, lost, the first reasons, and the
latency p50/p99/max in ms. Only 127.0.0.1 is ever a target.
"""

import http.client
import json
import sys
import threading
import time


def main():
    args = sys.argv[1:]
    pace = 0.0
    if "--pace" in args:
        i = args.index("--pace")
        pace = float(args[i + 1])
        del args[i : i + 2]
    port, host, path = int(args[0]), args[1], args[2]
    concurrency, seconds = int(args[3]), float(args[4])
    budget = int(args[5]) if len(args) > 5 else 1_000_000
    # Bounded: a check never floods, whatever it is asked.
    concurrency = min(concurrency, 64)
    seconds = min(seconds, 600.0)
    until = time.monotonic() + seconds
    lock = threading.Lock()
    state = {"sent": 0, "ok": 0, "lost": 0, "reasons": [], "latencies": []}

    def take():
        with lock:
            if state["sent"] >= budget or time.monotonic() >= until:
                return False
            state["sent"] += 1
            return True

    def client():
        connection = None
        while take():
            started = time.monotonic()
            reason = None
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
                connection.request("GET", path, headers={"Host": host})
                response = connection.getresponse()
                body = response.read()
                if response.status != 200:
                    reason = f"{response.status}: {body[:120]!r}"
                if response.getheader("Connection", "").lower() == "close":
                    connection.close()
                    connection = None
            except Exception as e:  # every failure is a lost request
                reason = f"{type(e).__name__}: {e}"
                if connection is not None:
                    connection.close()
                connection = None
            elapsed = (time.monotonic() - started) * 1000
            with lock:
                state["latencies"].append(elapsed)
                if reason is None:
                    state["ok"] += 1
                else:
                    state["lost"] += 1
                    if len(state["reasons"]) < 5:
                        state["reasons"].append(reason)
            if pace:
                time.sleep(pace)
        if connection is not None:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies = sorted(state.pop("latencies"))

    def at(q):
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1)

    state.update(p50_ms=at(0.50), p99_ms=at(0.99), max_ms=round(latencies[-1], 1) if latencies else None)
    print(json.dumps(state))


if __name__ == "__main__":
    main()
