#!/usr/bin/env bash
# Luge's one WIT root, wit/: refreshes wit/deps from the crates that define
# each package (as Wasmtime's ci/vendor-wit.sh does from its sources), or,
# with --check, fails when a vendored file differs from its source (CI runs
# the check from scripts/test.sh). The sources are fetched by cargo into
# its registry cache, at the versions pinned here:
#
# - wasmtime-wasi-http 48.0.8: the WASI 0.2 packages, relabelled 0.2.10
#   (see wit/worlds.wit);
# - wasmtime-wasi-keyvalue 48.0.8 and wasmtime-wasi-config 48.0.8:
#   wasi:keyvalue 0.2.0-draft, wasi:config 0.2.0-rc.1;
# - spin-sdk 3.1.1: Spin 2's unversioned fermyon:spin, only its Redis
#   types and inbound-redis (a Redis trigger's older export),
#   fermyon:spin@2.0.0's interfaces Luge serves (what spin-sdk 2 and 3
#   import: key-value, variables, sqlite, redis, mqtt, postgres, mysql),
#   and
#   spin:postgres@3.0.0 (what spin-sdk 3 and 4 import);
# - spin-sdk 2.2.0: WASI's 0.2.0-rc-2023-10-18 candidate (what spin-sdk 2
#   imports and exports), as deps/PACKAGE-2023-10-18, unchanged;
# - spin-sdk 5.1.0: spin:postgres@4.0.0 (what spin-sdk 5 imports, and
#   wit-bindgen against Spin 3's WIT: its synchronous functions);
# - spin-sdk 7.0.0: wasi:keyvalue 0.2.0-draft2, wasi:config
#   0.2.0-draft-2024-09-27, Spin's interfaces and wasi:otel 0.2.0-rc.2
#   (its uses of wasi:clocks relabelled 0.2.10, as the WASI packages are);
# - by hand, as no crate ships them: deps/spin-cron, the cron.wit of
#   fermyon/spin-trigger-cron at 328d368, and deps/spin-mqtt-trigger, the
#   spin-mqtt.wit of spinframework/spin-trigger-mqtt at 6382318, and
#   deps/spin-postgres41, spin:postgres@4.1.0 from spinframework/spin's
#   wit/ at 94a8fc8 (no spin-sdk ships it), and deps/PACKAGE-2023-11-10,
#   WASI's 0.2.0-rc-2023-11-10 candidate from the same wit/ (Wasmtime
#   15.0.1's; kept as they are here), and deps/wasmcloud-messaging,
#   wasmcloud:messaging@0.2.0 written out from wasmCloud's published
#   signatures, and deps/spin-sqs, spin:sqs@3.0.0 written out from
#   spinframework/spin-trigger-sqs's published signatures (its sqs3.wit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-refresh}"
case "$mode" in refresh | --check) ;; *) echo "usage: $0 [--check]" >&2; exit 2 ;; esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sources/src" "$work/deps"
touch "$work/sources/src/lib.rs"
cat > "$work/sources/Cargo.toml" <<'TOML'
[package]
name = "luge-wit-sources"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
wasmtime-wasi-http = "=48.0.8"
wasmtime-wasi-keyvalue = "=48.0.8"
wasmtime-wasi-config = "=48.0.8"
spin-sdk = { version = "=7.0.0", default-features = false }
TOML
# Spin 2's unversioned fermyon:spin (its Redis trigger's export), from the
# last spin-sdk that ships it, fetched apart (one crate of a name per
# manifest).
mkdir -p "$work/spin2/src"
touch "$work/spin2/src/lib.rs"
cat > "$work/spin2/Cargo.toml" <<'TOML'
[package]
name = "luge-wit-spin2"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
spin-sdk = { version = "=3.1.1", default-features = false }
TOML
# WASI 0.2.0-rc-2023-10-18, from spin-sdk 2.2.0, likewise apart.
mkdir -p "$work/spin22/src"
touch "$work/spin22/src/lib.rs"
cat > "$work/spin22/Cargo.toml" <<'TOML'
[package]
name = "luge-wit-spin22"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
spin-sdk = { version = "=2.2.0", default-features = false }
TOML
# spin:postgres@4.0.0, from the spin-sdk that ships it, likewise apart.
mkdir -p "$work/spin5/src"
touch "$work/spin5/src/lib.rs"
cat > "$work/spin5/Cargo.toml" <<'TOML'
[package]
name = "luge-wit-spin5"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
spin-sdk = { version = "=5.1.0", default-features = false }
TOML
cargo fetch --quiet --manifest-path "$work/sources/Cargo.toml"
cargo fetch --quiet --manifest-path "$work/spin2/Cargo.toml"
cargo fetch --quiet --manifest-path "$work/spin5/Cargo.toml"
cargo fetch --quiet --manifest-path "$work/spin22/Cargo.toml"
# Each source crate's directory in the registry cache.
src() {
    cargo metadata --format-version 1 --manifest-path "$work/sources/Cargo.toml" |
        python3 -c 'import json, sys, os
name = sys.argv[1]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == name:
        print(os.path.dirname(p["manifest_path"]))' "$1"
}
http="$(src wasmtime-wasi-http)"
keyvalue="$(src wasmtime-wasi-keyvalue)"
config="$(src wasmtime-wasi-config)"
spin="$(src spin-sdk)"
spin2="$(cargo metadata --format-version 1 --manifest-path "$work/spin2/Cargo.toml" |
    python3 -c 'import json, sys, os
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "spin-sdk":
        print(os.path.dirname(p["manifest_path"]))')"

for package in cli clocks filesystem http io random sockets; do
    sed -E 's/@0\.2\.[0-9]+/@0.2.10/g; s/version = 0\.2\.(1[1-9]|[2-9][0-9])/version = 0.2.10/g' \
        "$http/wit/deps/$package.wit" > "$work/deps/$package.wit"
done
cp -r "$keyvalue/wit/deps/keyvalue" "$work/deps/keyvalue-draft"
cp -r "$spin/wit/deps/wasi-keyvalue-2024-10-17" "$work/deps/keyvalue-draft2"
cp -r "$config/wit/deps/config" "$work/deps/config-rc1"
cp -r "$spin/wit/deps/wasi-runtime-config-2024-09-27" "$work/deps/config-draft"
for package in key-value@3.0.0 variables@3.0.0 sqlite@3.1.0 redis@3.0.0 postgres@4.2.0 mysql@3.0.0 mqtt@3.0.0; do
    cp -r "$spin/wit/deps/spin-$package" "$work/deps/spin-${package%@*}"
done

mkdir -p "$work/deps/otel"
for file in "$spin/wit/deps/otel@0.2.0-rc.2/"*.wit; do
    sed -E 's/(wasi:clocks\/[a-z-]+)@0\.2\.0\b/\1@0.2.10/g' "$file" > "$work/deps/otel/$(basename "$file")"
done

mkdir -p "$work/deps/fermyon-spin"
{ echo "package fermyon:spin;"; echo; cat "$spin2/wit/deps/spin@unversioned/redis-types.wit"; } \
    > "$work/deps/fermyon-spin/redis-types.wit"
cp "$spin2/wit/deps/spin@unversioned/inbound-redis.wit" "$work/deps/fermyon-spin/inbound-redis.wit"
# fermyon:spin@2.0.0: the interfaces Luge serves, under a package line of
# their own (the package's world.wit, which also names llm, postgres and
# mysql and WASI release candidates, is not taken). Written before WIT
# renamed float32 and float64 (the same types).
mkdir -p "$work/deps/fermyon-spin2"
echo "package fermyon:spin@2.0.0;" > "$work/deps/fermyon-spin2/package.wit"
for interface in key-value variables sqlite redis mqtt rdbms-types postgres mysql; do
    sed -E 's/\bfloat32\b/f32/g; s/\bfloat64\b/f64/g' \
        "$spin2/wit/deps/spin@2.0.0/$interface.wit" > "$work/deps/fermyon-spin2/$interface.wit"
done
spin5="$(cargo metadata --format-version 1 --manifest-path "$work/spin5/Cargo.toml" |
    python3 -c 'import json, sys, os
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "spin-sdk":
        print(os.path.dirname(p["manifest_path"]))')"
cp -r "$spin5/wit/deps/spin-postgres@4.0.0" "$work/deps/spin-postgres40"
# Written before WIT renamed float32 and float64 (the same types).
mkdir -p "$work/deps/spin-postgres3"
sed -E 's/\bfloat32\b/f32/g; s/\bfloat64\b/f64/g' \
    "$spin2/wit/deps/spin-postgres@3.0.0/postgres.wit" > "$work/deps/spin-postgres3/postgres.wit"

spin22="$(cargo metadata --format-version 1 --manifest-path "$work/spin22/Cargo.toml" |
    python3 -c 'import json, sys, os
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "spin-sdk":
        print(os.path.dirname(p["manifest_path"]))')"
for package in cli clocks filesystem http io random sockets; do
    cp -r "$spin22/wit-2023-10-18/deps/$package" "$work/deps/$package-2023-10-18"
done

# Vendored by hand (see above): kept as they are.
for package in spin-cron spin-mqtt-trigger spin-postgres41 spin-sqs wasmcloud-messaging \
    cli-2023-11-10 clocks-2023-11-10 filesystem-2023-11-10 http-2023-11-10 \
    io-2023-11-10 random-2023-11-10 sockets-2023-11-10; do
    cp -r "$root/wit/deps/$package" "$work/deps/$package"
done

if [ "$mode" = --check ]; then
    if ! diff -r "$work/deps" "$root/wit/deps" >"$work/diff"; then
        cat "$work/diff" >&2
        echo "wit/deps differs from its sources: run scripts/vendor-wit.sh" >&2
        exit 1
    fi
    echo "wit/deps matches its sources"
else
    rm -rf "$root/wit/deps"
    cp -r "$work/deps" "$root/wit/deps"
    echo "wit/deps refreshed"
fi
