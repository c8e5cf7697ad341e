#!/usr/bin/env bash
# Spin's conformance suite (fermyon/conformance-tests, the suite Spin and
# SpinKube's shim check a runtime with) against `luge serve --spin`:
#
#   SPIN_CONFORMANCE_SRC=/path/to/conformance-tests scripts/spin-conformance.sh [--only NAME]
#
# Prints one line per test and `N/M passed`; fails unless all pass. Without
# SPIN_CONFORMANCE_SRC it says so and exits 0 (CI has no checkout; the
# checkout is fetched, not committed, as the OpenWhisk checks take theirs).
# LUGE names the binary to test (default: a debug build made here).
# Needs what scripts/setup.sh installs (Redis, Mosquitto, PostgreSQL) and
# the wasm32-unknown-unknown Rust target, added here.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -z "${SPIN_CONFORMANCE_SRC:-}" ]]; then
    echo "scripts/spin-conformance.sh: SKIPPED: SPIN_CONFORMANCE_SRC is not set (no checkout of fermyon/conformance-tests); no test ran"
    exit 0
fi

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    rustup target add wasm32-unknown-unknown
fi
# The suite's test files are JSON5: the json5 package, pinned, under
# target/tools (not system-wide).
tools="$repo/target/tools/json5"
if [[ ! -d "$tools/json5" ]]; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$tools" json5==0.12.1
fi
if [[ -z "${LUGE:-}" ]]; then
    cargo build --quiet --manifest-path "$repo/Cargo.toml" -p luge-executor --bin luge
    LUGE="$repo/target/debug/luge"
fi
exec env PYTHONPATH="$tools" python3 "$repo/scripts/spin-conformance.py" \
    --suite "$SPIN_CONFORMANCE_SRC" --luge "$(realpath "$LUGE")" "$@"
