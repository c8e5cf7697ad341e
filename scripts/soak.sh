#!/usr/bin/env bash
# An hour of mixed load on one `luge serve`, with kill -9 restarts of Luge
# every 10 minutes and of Redis once (issue 26); loopback only, bounded,
# not part of CI. Passes when Luge's RSS stays flat after warm-up, no 5xx
# comes from Luge itself, and every acknowledged state write survives each
# restart. Figures in target/soak.json (see scripts/soak.py for options:
# `scripts/soak.sh --seconds 300 --restart-every 60` is a short run).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { echo "soak: needs redis-server (apt install redis-server)" >&2; exit 2; }
[ -f target/wasm/py-hello.wasm ] || ./scripts/build-actions.sh
if [ -z "${LUGE_BIN:-}" ]; then
    cargo build --profile bench -p luge-executor
    LUGE_BIN=target/release/luge
fi
exec python3 scripts/soak.py --luge "$LUGE_BIN" "$@"
