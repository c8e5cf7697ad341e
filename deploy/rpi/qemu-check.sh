#!/usr/bin/env bash
# Runs the aarch64 build under qemu-user: the x86 `luge-precompile` makes an
# artifact for aarch64, the aarch64 `luge` loads it at /init and runs it.
# Also checks that the benches compile for aarch64. Used by CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=aarch64-unknown-linux-gnu
PROFILE=${PROFILE:-dev} deploy/rpi/build.sh
dir=target/$target/$([ "${PROFILE:-dev}" = dev ] && echo debug || echo "$PROFILE")
if ! command -v qemu-aarch64 >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-user
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# The benches compile for aarch64 (dev profile, sharing the build above;
# `cargo bench --target ...` on the Pi side for figures).
cargo build --target "$target" -p luge-benches --benches

work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
export LUGE_KEY="raspberry pi check key 0123456789"
cargo build --quiet -p luge-precompile
./target/debug/luge-precompile target/wasm/echo.wasm -o "$work/echo.luge" --target "$target"

qemu-aarch64 -L /usr/aarch64-linux-gnu "$dir/luge" serve --listen 127.0.0.1:0 \
    --cache-dir "$work/cache" --max-sandboxes 8 --workers 1 --no-pin 2> "$work/stderr" &
pid=$!
for _ in $(seq 300); do
    addr=$(sed -n 's/^luge listening on http:\/\///p' "$work/stderr")
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { cat "$work/stderr"; exit 1; }
printf '{"value":{"main":"main","binary":true,"code":"%s"}}' "$(base64 -w0 "$work/echo.luge")" > "$work/init.json"
init=$(curl -s -XPOST "http://$addr/pi/init" -d @"$work/init.json")
run=$(curl -s -XPOST "http://$addr/pi/run" -d '{"value":{"on":"aarch64"}}')
engine=$(curl -s "http://$addr/healthz")
echo "init: $init"; echo "run: $run"; echo "healthz: $engine"
[ "$init" = '{"ok":true}' ] && [ "$run" = '{"on":"aarch64"}' ] && grep -q "$target" <<<"$engine"
echo "aarch64 build under qemu: init from an x86-precompiled artifact and run OK"
