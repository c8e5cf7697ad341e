#!/usr/bin/env bash
# Builds every example action to wasm32-wasip1 into target/wasm/ (and a
# few as wasm32-wasip2 components).
# Rust actions via the actions/ workspace; C actions with Debian's clang and
# wasi-libc (packages clang, lld, wasi-libc, libclang-rt-dev-wasm32).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/wasm"
mkdir -p "$out"

cargo build --quiet --manifest-path "$root/actions/Cargo.toml" --target-dir "$root/actions/target" \
    --target wasm32-wasip1 --release --workspace --exclude luge-http-examples
cp "$root"/actions/target/wasm32-wasip1/release/*.wasm "$out/"

# Some as WebAssembly components too (WASI 0.2 `wasi:cli/command`, Rust's
# wasm32-wasip2 target): the same source, named p2-<name>.wasm.
p2=(echo notdict unicode envvars spin fail tcp)
cargo build --quiet --manifest-path "$root/actions/Cargo.toml" --target-dir "$root/actions/target" \
    --target wasm32-wasip2 --release $(printf -- '--bin %s ' "${p2[@]}")
for name in "${p2[@]}"; do
    cp "$root/actions/target/wasm32-wasip2/release/$name.wasm" "$out/p2-$name.wasm"
done

# The wasi:http/proxy handler (actions/http, a library component):
# http-handler.wasm.
cargo build --quiet --manifest-path "$root/actions/Cargo.toml" --target-dir "$root/actions/target" \
    --target wasm32-wasip2 --release -p luge-http-examples
cp "$root/actions/target/wasm32-wasip2/release/luge_http_examples.wasm" "$out/http-handler.wasm"

# The Spin app (actions/spin: spin-sdk 7 from crates.io, a WASI 0.3
# wasi:http service; its own workspace), built as `spin build` would, where
# its spin.toml finds it: `luge serve --spin actions/spin/spin.toml`. The
# same workspace's plain WASI 0.3 service and command: http3.wasm, cli3.wasm.
cargo build --quiet --manifest-path "$root/actions/spin/Cargo.toml" --target wasm32-wasip2 --release --workspace
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_http3_examples.wasm" "$out/http3.wasm"
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_cli3_examples.wasm" "$out/cli3.wasm"
# A WASI 0.3 command on wasi:sockets@0.3.0, for `luge run`'s network grants.
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_sockets3_examples.wasm" "$out/sockets3.wasm"
# A wasi:http handler of WASI's 0.2.0-rc-2023-11-10 candidate.
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_http_rc.wasm" "$out/http-rc.wasm"
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_spin_app.wasm" "$out/spin-app.wasm"
# Its event components, for luge.toml functions on triggers (luge-bench).
for component in subscriber mqtt cron; do
    cp "$root/actions/spin/target/wasm32-wasip2/release/luge_spin_$component.wasm" "$out/spin-$component.wasm"
done
# A wasmCloud messaging component (wasmcloud:messaging@0.2.0's handler).
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_messaging.wasm" "$out/messaging.wasm"
# A queue component of spin-trigger-sqs (spin:sqs@3.0.0's world).
cp "$root/actions/spin/target/wasm32-wasip2/release/luge_spin_sqs.wasm" "$out/sqs.wasm"
# A command on spin:postgres@3.0.0 (older SDKs' interface).
cp "$root/actions/spin/target/wasm32-wasip2/release/luge-spin-pg3.wasm" "$out/spin-pg3.wasm"
# A command recording its own spans through wasi:otel.
cp "$root/actions/spin/target/wasm32-wasip2/release/luge-spin-otel.wasm" "$out/spin-otel.wasm"

# A Spin app as spin-sdk 2 builds it: a wasm32-wasip1 module (Spin 2's
# fermyon:spin@2.0.0, WASI 0.2.0-rc-2023-10-18's wasi:http), likewise.
cargo build --quiet --manifest-path "$root/actions/spin/sdk2/Cargo.toml" --target wasm32-wasip1 --release
cp "$root/actions/spin/sdk2/target/wasm32-wasip1/release/luge_spin_sdk2_app.wasm" "$out/spin-sdk2.wasm"

# A Spin app as spin-sdk 3 builds it: a wasm32-wasip1 module (Spin 2's
# fermyon:spin@2.0.0), made a component when Luge loads it; built where
# its spin.toml finds it (its own workspace), and copied as spin-sdk3.wasm.
cargo build --quiet --manifest-path "$root/actions/spin/sdk3/Cargo.toml" --target wasm32-wasip1 --release
cp "$root/actions/spin/sdk3/target/wasm32-wasip1/release/luge_spin_sdk3_app.wasm" "$out/spin-sdk3.wasm"

# Python functions with componentize-py (./scripts/setup.sh installs it
# under target/tools): py-<name>.wasm, WASI 0.2 components of the world
# each is written for (wit/, Luge's one WIT root, shared with JavaScript and
# luge-wasmtime).
cpy="$root/target/tools/componentize-py"
for app in hello:command web:handler config:config-command kv:keyvalue-command; do
    name=${app%%:*}
    (cd "$root/actions/python/$name" && PYTHONPATH="$cpy" "$cpy/bin/componentize-py" \
        -d "$root/wit" -w "${app#*:}" componentize app -o "$out/py-$name.wasm" >/dev/null)
done

# JavaScript functions with componentize-js (./scripts/setup.sh installs
# it under target/tools): js-hello.wasm, a wasi:cli/command component, and
# js-web.wasm, a wasi:http/proxy handler (StarlingMonkey's fetch event).
cjs="$root/target/tools/componentize-js/node_modules/.bin/componentize-js"
(cd "$root/actions/js/hello" && "$cjs" app.js --wit "$root/wit" -n js-command \
    -d http -d fetch-event -o "$out/js-hello.wasm" >/dev/null)
(cd "$root/actions/js/web" && "$cjs" app.js --wit "$root/wit" -n handler -o "$out/js-web.wasm" >/dev/null)

# The C functions are also built natively (target/native/): the
# process-per-request baseline of the benchmarks runs the same source.
native="$root/target/native"
mkdir -p "$native"
for src in "$root"/actions/c/*.c; do
    name=$(basename "$src" .c)
    clang --target=wasm32-wasi --sysroot=/usr -O2 -o "$out/c-$name.wasm" "$src"
    cc -O2 -o "$native/c-$name" "$src"
done
# The CPU-bound Rust example natively too: the engines benchmark compares
# each engine with the same source compiled for the host.
cargo build --quiet --manifest-path "$root/actions/Cargo.toml" --target-dir "$root/actions/target" \
    --release --bin hash
cp "$root/actions/target/release/hash" "$native/hash"
echo "actions built into $out: $(ls "$out" | tr '\n' ' ')"
