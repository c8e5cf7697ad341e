#!/usr/bin/env bash
# Cross-builds `luge` and `luge-precompile` for a 64-bit Raspberry Pi OS
# (aarch64-unknown-linux-gnu) on an x86-64 Debian host, with Debian's cross
# linker. Output: target/aarch64-unknown-linux-gnu/$PROFILE/{luge,luge-precompile}.
#
#   PROFILE=release deploy/rpi/build.sh        # what a Pi should run
#   PROFILE=dev deploy/rpi/build.sh            # quicker, for checks
set -euo pipefail
cd "$(dirname "$0")/../.."
target=aarch64-unknown-linux-gnu
profile=${PROFILE:-release}
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
# The Wasmtime engine only: WAMR's CMake build would need a cross CMake
# toolchain file (see deploy/rpi/README.md).
cargo build --profile "$profile" --target "$target" -p luge-executor -p luge-precompile
dir=target/$target/$([ "$profile" = dev ] && echo debug || echo "$profile")
ls -l "$dir/luge" "$dir/luge-precompile"
