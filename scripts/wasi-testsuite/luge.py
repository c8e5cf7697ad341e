"""wasi-testsuite runtime adapter for Luge (`luge run`).

The engine is LUGE_ENGINE (wasmtime, wasmer, wasmer-singlepass, wamr;
default wasmtime); the binary is LUGE (default `luge` on PATH). Used by
scripts/wasi-testsuite.sh, and with the suite's own runner on its built
tests (`run-tests -r luge.py -t DIR`): WASI 0.1, and WASI 0.3 commands
(cli, clocks, filesystem, random, sockets, http clients) on Wasmtime.
"""
import os
import shlex
import subprocess
from typing import Dict, List, Optional, Tuple

LUGE = shlex.split(os.getenv("LUGE", "luge"))
ENGINE = os.getenv("LUGE_ENGINE", "wasmtime")


def get_name() -> str:
    return "luge-" + ENGINE


def get_version() -> str:
    result = subprocess.run(LUGE + ["--version"], encoding="UTF-8",
                            capture_output=True, check=True)
    return result.stdout.split()[1]


def get_wasi_versions() -> List[str]:
    # WASI 0.3 components run on Wasmtime only.
    if ENGINE == "wasmtime":
        return ["wasm32-wasip1", "wasm32-wasip3"]
    return ["wasm32-wasip1"]


def get_wasi_worlds() -> List[str]:
    return ["wasi:cli/command"]


def compute_argv(test_path: str,
                 args_env_root: Tuple[List[str], Dict[str, str], Optional[str]],
                 proposals: List[str],
                 wasi_world: str,
                 wasi_version: str) -> List[str]:
    args, env, root = args_env_root
    argv = LUGE + ["run", "--engine", ENGINE]
    # As the suite's Wasmtime adapter gives `-S inherit-network` and
    # `-S http`: the host's network, and HTTP requests to the suite's
    # servers (on loopback, so named exactly: a wildcard grant reaches
    # public addresses only).
    if "sockets" in proposals:
        argv += ["--inherit-network"]
    # The suite writes to a test's stdin as it runs (and reads what the
    # test printed first): this process's stdin, read as the module reads
    # it, on Wasmtime.
    if ENGINE == "wasmtime":
        argv += ["--stdin", "-"]
    if "http" in proposals:
        argv += ["--allow-outbound", "http://127.0.0.1:*",
                 "--allow-outbound", "http://localhost:*"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    if root:
        argv += ["--dir", f"{root}::/"]
    return argv + [test_path, "--"] + args
