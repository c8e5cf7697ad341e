#!/usr/bin/env bash
# Builds `luge` and `luge-bench` in the shipped (dist) profile with
# profile-guided optimization (rustc's `-Cprofile-generate` and
# `-Cprofile-use`, as the rustc book's PGO chapter describes): an
# instrumented build serves the scaling table's requests on this machine
# (the `actions/http` component and the C ping, at one connection and at
# 64, on both front ends), and the build that ships is laid out by what
# those requests ran. See docs/BENCHMARKS-ARCHIVE.md, "Laid out by a profile".
#
#   scripts/pgo.sh                 # target/x86_64-unknown-linux-gnu/dist/{luge,luge-bench}
#   PGO_SECONDS=2 scripts/pgo.sh   # the training's seconds per point (default 2)
#
# Needs what the table needs (./scripts/setup.sh, ./scripts/build-actions.sh)
# and rustup's llvm-tools component (its llvm-profdata matches rustc's
# LLVM; installed here when missing). About twice a dist build's time:
# the instrumented build, two minutes of training, the optimized build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f target/wasm/http-handler.wasm ] || ./scripts/build-actions.sh
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
[ -x "$profdata" ] || rustup component add llvm-tools
data="$PWD/target/pgo/data"
rm -rf "$data"
mkdir -p "$data"
# `--target` keeps RUSTFLAGS off build scripts and proc macros (they run
# here, at build time, and would write profiles of their own). Both
# binaries in one invocation: the crates they share are then the same
# crates (the same features, the same symbol names) in the profile and in
# the build that uses it.
build() {
    cargo build --profile dist --target "$host" "$@" \
        -p luge-executor --bin luge -p luge-benches --bin luge-bench
}
RUSTFLAGS="-Cprofile-generate=$data" build --target-dir target/pgo/generate
# The training: luge-bench serves through the same code as `luge serve`
# (LUGE_BENCH_SERVE), and stops its servers with SIGTERM, whose orderly
# exit writes each one's profile.
target/pgo/generate/"$host"/dist/luge-bench scaling --cores 1 --rounds 1 \
    --seconds "${PGO_SECONDS:-2}" --only luge --out target/pgo/training >/dev/null
ls "$data"/*.profraw >/dev/null 2>&1 || {
    echo "pgo: the training wrote no profile" >&2
    exit 1
}
"$profdata" merge -o "$data/merged.profdata" "$data"/*.profraw
RUSTFLAGS="-Cprofile-use=$data/merged.profdata" build
echo "pgo: target/$host/dist/luge and target/$host/dist/luge-bench"
