#!/usr/bin/env bash
# Runs the aarch64 build under qemu-user: the x86 `luge-precompile` makes an
# artifact for aarch64, the aarch64 `luge` loads it at /init and runs it.
# Also checks that the benches compile for aarch64 (unless BENCHES=0, as
# CI runs it). Used by CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=aarch64-unknown-linux-gnu
# Both engines in one build: Wasmtime (native code precompiled on x86) and
# WAMR (the interpreter, for the smallest boards).
export ENGINES=wasmtime,wamr
# BENCHES=1 compiles the benches for aarch64 too, in the same build
# (`cargo bench --target ...` on the Pi side for figures); CI leaves them
# out (BENCHES=0 in .ci/run: they hold no aarch64-specific code, build on
# x86 in the suite, and cost CI minutes it has few of). The profile is the
# dev one with unoptimized dependencies (Cargo.toml, `cross-check`): this
# check builds everything once and runs it for seconds.
profile=${PROFILE:-cross-check}
PROFILE=$profile BENCHES=${BENCHES:-1} deploy/rpi/build.sh
dir=target/$target/$([ "$profile" = dev ] && echo debug || echo "$profile")
if ! command -v qemu-aarch64 >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-user
fi

work=$(mktemp -d)
# The data directory (shared state) is this check's own.
export XDG_DATA_HOME="$work"
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
export LUGE_KEY="raspberry pi check key 0123456789"
# The x86 precompiler: LUGE_PRECOMPILE names one already built (CI keeps
# the test suite's and frees the rest of the x86 build for the disk);
# otherwise it is built with the workspace's feature set, as the test suite
# builds it (no second build of its dependencies).
precompile=${LUGE_PRECOMPILE:-}
if [ -z "$precompile" ]; then
    cargo build --quiet --workspace --all-features --bin luge-precompile
    precompile=./target/debug/luge-precompile
fi
[ -x "$precompile" ] || { echo "qemu check: no x86 precompiler at $precompile"; exit 1; }
for engine in wasmtime wamr; do
    "$precompile" target/wasm/echo.wasm -o "$work/echo-$engine.luge" \
        --engine "$engine" --target "$target"
done

# Stops the check with MESSAGE.
fail() { echo "qemu check failed: $*"; exit 1; }

# Starts the aarch64 luge on ENGINE under qemu; sets $pid and $addr.
start() {
    qemu-aarch64 -L /usr/aarch64-linux-gnu "$dir/luge" serve --engine "$1" --listen 127.0.0.1:0 \
        --cache-dir "$work/cache-$1" --max-sandboxes 8 --workers 1 --no-pin 2> "$work/stderr-$1" &
    pid=$!
    wait_addr "$work/stderr-$1" || { cat "$work/stderr-$1"; exit 1; }
}

# Sets $addr from the announcement in FILE (stderr of luge); fails after 30 s.
wait_addr() {
    addr=""
    for _ in $(seq 300); do
        addr=$(sed -n 's/^luge listening on http:\/\///p' "$1")
        [ -n "$addr" ] && return 0
        sleep 0.1
    done
    return 1
}

# POSTs an init of FILE (base64) with ANNOTATIONS to /ID/init.
init() {
    printf '{"value":{"main":"main","binary":true,"code":"%s","annotations":%s}}' \
        "$(base64 -w0 "$2")" "$3" > "$work/init.json"
    curl -s -XPOST "http://$addr/$1/init" -d @"$work/init.json"
}

for engine in wasmtime wamr; do
    start "$engine"
    ok=$(init pi "$work/echo-$engine.luge" '{}')
    run=$(curl -s -XPOST "http://$addr/pi/run" -d '{"value":{"on":"aarch64"}}')
    health=$(curl -s "http://$addr/healthz")
    echo "$engine: init: $ok; run: $run; healthz: $health"
    [ "$ok" = '{"ok":true}' ] || fail "$engine: init"
    [ "$run" = '{"on":"aarch64"}' ] || fail "$engine: run"
    grep -q "\"engine\":\"$engine [^\"]* for $target\"" <<<"$health" || fail "$engine: engine"
    # The time limit holds on the Pi too (WAMR: its watchdog thread).
    ok=$(init spin target/wasm/spin.wasm '{"limits.timeout_ms":500}')
    spin=$(curl -s -XPOST "http://$addr/spin/run" -d '{"value":{}}')
    echo "$engine: endless loop: $spin"
    [ "$ok" = '{"ok":true}' ] || fail "$engine: init of spin"
    grep -q "exceeded its time limits of 500 milliseconds" <<<"$spin" || fail "$engine: time limit"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done

# A Raspberry Pi OS kernel with 4 KiB pages gives a process 512 GiB of
# addresses (39 bits). qemu-user shares the x86 host's, so the limit is set
# with ulimit -v: `luge serve` with its default --max-sandboxes must size its
# pool to fit, say so, and serve.
(
    ulimit -v 536870912
    exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$dir/luge" serve --listen 127.0.0.1:0 \
        --cache-dir "$work/cache-pi" --workers 1 --no-pin
) 2> "$work/stderr-pi" &
pid=$!
wait_addr "$work/stderr-pi" || { cat "$work/stderr-pi"; fail "default flags under a 512 GiB address space: no start"; }
sized=$(sed -n 's/.*engine ready.*sandboxes=\([0-9]*\).*/\1/p' "$work/stderr-pi")
ok=$(init pi "$work/echo-wasmtime.luge" '{}')
run=$(curl -s -XPOST "http://$addr/pi/run" -d '{"value":{"on":"512 GiB"}}')
echo "defaults under a 512 GiB address space: pool of $sized sandboxes; init: $ok; run: $run"
[ "$ok" = '{"ok":true}' ] || fail "512 GiB: init"
[ "$run" = '{"on":"512 GiB"}' ] || fail "512 GiB: run"
[ "${sized:-0}" -ge 32 ] || fail "512 GiB: pool of ${sized:-?} sandboxes, fewer than 32"
kill "$pid"
wait "$pid" 2>/dev/null || true

echo "aarch64 build under qemu: Wasmtime and WAMR run artifacts precompiled on x86 and stop endless loops; defaults start and serve under a Pi's 512 GiB address space"
