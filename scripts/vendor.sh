#!/usr/bin/env bash
# Each directory of vendor/ is one crate exactly as published on crates.io
# with the patches of vendor/patches/NAME applied, and nothing else
# (vendor/README.md says what they change and why):
#
#   vendor/wasmtime  wasmtime 48.0.8
#   vendor/rdkafka   rdkafka 0.39.0
#
#   scripts/vendor.sh          rebuild every vendor/NAME from its crate
#   scripts/vendor.sh --check  fail if one differs (run by test.sh)
#
# A crate comes from cargo's download cache, crates.io, or cargo fetching
# it, and is checked against the checksum crates.io's index gives for it.
set -euo pipefail
cd "$(dirname "$0")/.."
# name version sha256 (crates.io's checksum of the .crate)
crates=(
    "wasmtime 48.0.8 a2afcadb2e7d0417cb8f3f322c66eff49338b288f22290c0ca0bd3e9570732aa"
    "rdkafka 0.39.0 d7956f9ac12b5712e50372d9749a3102f4810a8d42481c5eae3748d36d585bcf"
)
mode=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One crate: fetched, checked, unpacked and patched under $tmp.
vendor() {
    local name=$1 version=$2 sha256=$3
    local crate="$name-$version"
    cached() {
        ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$crate.crate" 2>/dev/null | head -1 || true
    }
    if [ -z "$(cached)" ] && ! curl -sSfL --retry 3 -o "$tmp/$crate.crate" \
        "https://static.crates.io/crates/$name/$crate.crate"; then
        # No direct download (a registry mirror only): let cargo fetch it
        # into its cache through whatever source it is configured with.
        rm -f "$tmp/$crate.crate"
        mkdir -p "$tmp/fetch-$name/src"
        printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n%s = { version = "=%s", default-features = false }\n' \
            "$name" "$version" >"$tmp/fetch-$name/Cargo.toml"
        touch "$tmp/fetch-$name/src/lib.rs"
        cargo fetch --quiet --manifest-path "$tmp/fetch-$name/Cargo.toml"
    fi
    if [ -n "$(cached)" ] && [ ! -s "$tmp/$crate.crate" ]; then
        cp "$(cached)" "$tmp/$crate.crate"
    fi
    echo "$sha256  $tmp/$crate.crate" | sha256sum -c --quiet
    tar -xzf "$tmp/$crate.crate" -C "$tmp"
    for p in vendor/patches/"$name"/*.patch; do
        patch -s -p1 -d "$tmp/$crate" <"$p"
    done

    if [ "$mode" = "--check" ]; then
        if ! diff -r "$tmp/$crate" "vendor/$name"; then
            echo "vendor/$name is not $crate with vendor/patches/$name applied" >&2
            exit 1
        fi
        echo "vendor/$name: $crate with $(ls vendor/patches/"$name"/*.patch | wc -l) patch(es)"
    else
        rm -rf "vendor/$name"
        cp -r "$tmp/$crate" "vendor/$name"
        echo "vendor/$name rebuilt from $crate"
    fi
}

for row in "${crates[@]}"; do
    # shellcheck disable=SC2086
    vendor $row
done
