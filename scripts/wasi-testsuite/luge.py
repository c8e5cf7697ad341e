"""wasi-testsuite runtime adapter for Luge (`luge run`).

The engine is LUGE_ENGINE (wasmtime, wasmer, wasmer-singlepass, wamr;
default wasmtime); the binary is LUGE (default `luge` on PATH). Used by
scripts/wasi-testsuite.sh.
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
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    if root:
        argv += ["--dir", f"{root}::/"]
    return argv + [test_path, "--"] + args
