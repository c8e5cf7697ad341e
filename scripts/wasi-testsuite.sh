#!/usr/bin/env bash
# WASI 0.1 conformance: WebAssembly/wasi-testsuite's Rust and C tests
# (sources in conformance/wasi-testsuite, built here with cargo and
# Debian's clang/wasi-libc) run through `luge run` on each engine given
# (default: all three). Each engine's known failures are listed in
# scripts/wasi-testsuite/expected-<engine>.txt; anything else fails.
#
#   scripts/wasi-testsuite.sh [ENGINE...]
#
# scripts/wasi-testsuite/luge.py is the same as an adapter for the
# suite's own runner (its prebuilt tests, `run-tests -r luge.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
engines=("$@")
[ ${#engines[@]} -gt 0 ] || engines=(wasmtime wasmer wamr)
src=conformance/wasi-testsuite
out=target/wasi-testsuite
mkdir -p "$out/rust" "$out/c"

# (the suite's code, not ours: its warnings are not this build's concern)
RUSTFLAGS="-A warnings" cargo build --quiet --locked --manifest-path "$src/rust/wasm32-wasip1/Cargo.toml" \
    --target wasm32-wasip1 --bins --target-dir "$out/build"
for wasm in "$out"/build/wasm32-wasip1/debug/*.wasm; do
    cp "$wasm" "$out/rust/"
done
cp "$src"/rust/wasm32-wasip1/src/bin/*.json "$out/rust/"
rm -rf "$out/rust/fs-tests.dir" && cp -r "$src/rust/wasm32-wasip1/src/bin/fs-tests.dir" "$out/rust/"
for c in "$src"/c/src/*.c; do
    name=$(basename "$c" .c)
    [ "$out/c/$name.wasm" -nt "$c" ] ||
        clang --target=wasm32-wasi --sysroot=/usr -O0 -o "$out/c/$name.wasm" "$c"
done
cp "$src"/c/src/*.json "$out/c/"
rm -rf "$out/c/fs-tests.dir" && cp -r "$src/c/src/fs-tests.dir" "$out/c/"

# The suite's build of the workspace (scripts/cargo-linted.sh): nothing
# rebuilt after scripts/test.sh.
./scripts/cargo-linted.sh build --quiet --workspace --all-features --bin luge
status=0
for engine in "${engines[@]}"; do
    python3 scripts/wasi-testsuite/run.py target/debug/luge "$engine" "$out" || status=1
done
exit $status
