"""Runs WebAssembly/wasi-testsuite's WASI 0.1 tests (built by
scripts/wasi-testsuite.sh into SUITE/<lang>/<test>.wasm beside their
.json specs) through `luge run` on ENGINE, each in a fresh copy of its
root directory, the way the suite's runner does: `args`, `env` and `root`
(granted at /) from the spec; pass = the spec's exit code (default 0) and
stdout (when the spec has one).

The failures must be exactly the engine's expected ones
(expected-<engine>.txt beside this file): a new failure fails the run, and
so does a test listed that now passes (update the list).

Usage: python3 run.py LUGE ENGINE SUITE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

luge, engine, suite = sys.argv[1], sys.argv[2], Path(sys.argv[3])
here = Path(__file__).parent
expected_file = here / f"expected-{engine.replace('-singlepass', '')}.txt"
expected = set()
if expected_file.exists():
    expected = {line.split("#")[0].strip() for line in expected_file.read_text().splitlines()}
    expected.discard("")

failed, passed = [], []
for wasm in sorted(suite.glob("*/*.wasm")):
    name = f"{wasm.parent.name}/{wasm.stem}"
    spec_file = wasm.with_suffix(".json")
    spec = json.loads(spec_file.read_text()) if spec_file.exists() else {}
    argv = [luge, "run", "--engine", engine, "--timeout-ms", "20000"]
    for key, value in spec.get("env", {}).items():
        argv += ["--env", f"{key}={value}"]
    with tempfile.TemporaryDirectory() as scratch:
        if "root" in spec:
            root = Path(scratch) / "root"
            shutil.copytree(wasm.parent / spec["root"], root, symlinks=True)
            argv += ["--dir", f"{root}::/"]
        argv += [str(wasm), "--"] + spec.get("args", [])
        run = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL,
                             timeout=60, env={**os.environ, "RUST_BACKTRACE": "0"})
    ok = run.returncode == spec.get("exit_code", 0)
    if "stdout" in spec:
        ok = ok and run.stdout.decode(errors="replace") == spec["stdout"]
    (passed if ok else failed).append(name)
    if not ok and name not in expected:
        print(f"FAIL {name} (status {run.returncode})")
        print("  " + run.stderr.decode(errors="replace").strip().replace("\n", "\n  "))

total = len(passed) + len(failed)
print(f"wasi-testsuite on luge {engine}: {len(passed)} of {total} passed")
new_failures = sorted(set(failed) - expected)
now_passing = sorted(expected & set(passed))
for name in now_passing:
    print(f"now passes, remove it from {expected_file.name}: {name}")
if new_failures:
    print(f"{len(new_failures)} unexpected failures: {' '.join(new_failures)}")
sys.exit(1 if new_failures or now_passing or total == 0 else 0)
