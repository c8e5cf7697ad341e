#!/usr/bin/env bash
# vendor/wasmtime is Wasmtime 48.0.8 exactly as published on crates.io with
# the patches of vendor/patches/wasmtime applied, and nothing else
# (vendor/README.md says what they change and why).
#
#   scripts/vendor-wasmtime.sh          rebuild vendor/wasmtime from the crate
#   scripts/vendor-wasmtime.sh --check  fail if it differs (run by test.sh)
#
# The crate comes from cargo's download cache, crates.io, or cargo fetching
# it, and is checked against the checksum crates.io's index gives for it.
set -euo pipefail
cd "$(dirname "$0")/.."
crate=wasmtime-48.0.8
sha256=a2afcadb2e7d0417cb8f3f322c66eff49338b288f22290c0ca0bd3e9570732aa
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cached() {
    ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$crate.crate" 2>/dev/null | head -1 || true
}
if [ -z "$(cached)" ] && ! curl -sSfL --retry 3 -o "$tmp/$crate.crate" \
    "https://static.crates.io/crates/wasmtime/$crate.crate"; then
    # No direct download (a registry mirror only): let cargo fetch it into
    # its cache through whatever source it is configured with.
    rm -f "$tmp/$crate.crate"
    mkdir -p "$tmp/fetch/src"
    printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nwasmtime = { version = "=%s", default-features = false }\n' \
        "${crate#wasmtime-}" >"$tmp/fetch/Cargo.toml"
    touch "$tmp/fetch/src/lib.rs"
    cargo fetch --quiet --manifest-path "$tmp/fetch/Cargo.toml"
fi
if [ -n "$(cached)" ] && [ ! -s "$tmp/$crate.crate" ]; then
    cp "$(cached)" "$tmp/$crate.crate"
fi
echo "$sha256  $tmp/$crate.crate" | sha256sum -c --quiet
tar -xzf "$tmp/$crate.crate" -C "$tmp"
for p in vendor/patches/wasmtime/*.patch; do
    patch -s -p1 -d "$tmp/$crate" <"$p"
done

if [ "${1:-}" = "--check" ]; then
    if ! diff -r "$tmp/$crate" vendor/wasmtime; then
        echo "vendor/wasmtime is not $crate with vendor/patches/wasmtime applied" >&2
        exit 1
    fi
    echo "vendor/wasmtime: $crate with $(ls vendor/patches/wasmtime/*.patch | wc -l) patch(es)"
else
    rm -rf vendor/wasmtime
    cp -r "$tmp/$crate" vendor/wasmtime
    echo "vendor/wasmtime rebuilt from $crate"
fi
