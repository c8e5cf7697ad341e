#!/usr/bin/env python3
"""What happens to a Deployment and its pods, stamped as it reaches this
machine: `kubectl get -w` on the Deployment and on its pods (label
app=NAME), one line per change until SIGTERM:

    MS replicas N        the Deployment's spec.replicas became N
    MS created POD       a pod appeared
    MS scheduled POD     it was given the node
    MS running POD       its container started
    MS ready POD         it became Ready (its endpoint serves)

MS is milliseconds since the epoch on this machine's clock, the one the
check's requests are timed on.

    timeline.py NAME
"""

import json
import signal
import subprocess
import sys
import threading
import time


def stamp():
    return int(time.time() * 1000)


# The watches, ended with this process.
WATCHES = []


def objects(command):
    """Each JSON object `kubectl -w -o json` prints, as it arrives."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    WATCHES.append(process)
    decoder = json.JSONDecoder()
    buffer = ""
    for line in process.stdout:
        buffer += line
        # An object ends with a line holding only `}`.
        if line.rstrip("\n") != "}":
            continue
        try:
            obj, _ = decoder.raw_decode(buffer.strip())
        except ValueError:
            continue
        buffer = ""
        yield obj


def main():
    name = sys.argv[1]
    lock = threading.Lock()

    def say(what):
        with lock:
            print(f"{stamp()} {what}", flush=True)

    def deployment():
        last = None
        for obj in objects(["kubectl", "get", "deployment", name, "-w", "-o", "json"]):
            replicas = obj.get("spec", {}).get("replicas")
            if replicas != last:
                last = replicas
                say(f"replicas {replicas}")

    def pods():
        seen = {}
        for obj in objects(["kubectl", "get", "pods", "-l", f"app={name}", "-w", "-o", "json"]):
            pod = obj["metadata"]["name"]
            marks = seen.setdefault(pod, set())
            status = obj.get("status", {})
            now = []
            now.append("created")
            if obj.get("spec", {}).get("nodeName"):
                now.append("scheduled")
            for container in status.get("containerStatuses") or []:
                if "running" in (container.get("state") or {}):
                    now.append("running")
            for condition in status.get("conditions") or []:
                if condition.get("type") == "Ready" and condition.get("status") == "True":
                    now.append("ready")
            for mark in now:
                if mark not in marks:
                    marks.add(mark)
                    say(f"{mark} {pod}")

    for watch in (deployment, pods):
        threading.Thread(target=watch, daemon=True).start()
    def end(*_):
        for process in WATCHES:
            process.terminate()
        sys.exit(0)

    signal.signal(signal.SIGTERM, end)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
