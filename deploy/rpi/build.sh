#!/usr/bin/env bash
# Cross-builds `luge` and `luge-precompile` for a 64-bit Raspberry Pi OS
# (aarch64-unknown-linux-gnu) on an x86-64 Debian host, with Debian's cross
# linker. Output: target/aarch64-unknown-linux-gnu/$PROFILE/{luge,luge-precompile}.
#
#   PROFILE=dist deploy/rpi/build.sh           # what a Pi should run (the default)
#   PROFILE=dev deploy/rpi/build.sh            # quicker, for checks
#   ENGINES=wamr deploy/rpi/build.sh           # WAMR only: the smallest build
#   ENGINES=wasmtime,wamr deploy/rpi/build.sh  # both; pick with --engine
#   BENCHES=1 deploy/rpi/build.sh              # and compile the benches
set -euo pipefail
cd "$(dirname "$0")/../.."
target=aarch64-unknown-linux-gnu
profile=${PROFILE:-dist}
engines=${ENGINES:-wasmtime}
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross
fi
if [[ ",$engines," == *,wamr,* ]] && ! command -v cmake >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq cmake
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
# WAMR's CMake build cross-compiles through the cmake crate, which hands
# CMake the target's C compiler (CC_aarch64_unknown_linux_gnu) and system.
# The engines, as features of both binaries' packages. Without default
# features the binaries keep the system's malloc: the executor's default
# `mimalloc` feature trades about 7 MB of resident memory per process for
# CPU, the wrong trade on a Pi (executor/Cargo.toml).
features=""
for engine in ${engines//,/ }; do
    features+="luge-executor/$engine,luge-precompile/$engine,"
done
# BENCHES=1 also compiles the benches for the target, in the same cargo
# run: one feature resolution for both, so no crate is compiled twice (a
# second run for the benches alone compiled Wasmtime and 90 more crates
# again, 4 of CI's minutes).
benches=()
[ "${BENCHES:-0}" = 1 ] && benches=(-p luge-benches --benches)
cargo build --profile "$profile" --target "$target" -p luge-executor -p luge-precompile \
    --bin luge --bin luge-precompile "${benches[@]}" \
    --no-default-features --features "${features%,}"
dir=target/$target/$([ "$profile" = dev ] && echo debug || echo "$profile")
ls -l "$dir/luge" "$dir/luge-precompile"
