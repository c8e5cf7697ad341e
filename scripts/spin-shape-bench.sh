#!/usr/bin/env bash
# The Spin app (actions/spin, spin-sdk 7) in the shape of Spin's
# conformance suite: a `spin:key-value` read, a `spin:sqlite` select and
# an outgoing HTTP request to a loopback upstream, at 1 and 16
# connections (wrk, 3 s each), on two builds of `luge-bench` (which serves
# as `luge` under LUGE_BENCH_SERVE), alternately, ROUNDS times:
#
#   scripts/spin-shape-bench.sh BASE_LUGE_BENCH HEAD_LUGE_BENCH [ROUNDS]
#
# Each build: `cargo build --profile bench -p luge-benches --bin
# luge-bench` at the commit. Prints one line per point; loopback only.
# Needs wrk (Debian's package) and the actions built (target/wasm).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
base="$1"
head="$2"
rounds="${3:-5}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cp "$repo/target/wasm/spin-app.wasm" "$work/"
cat > "$work/spin.toml" <<'TOML'
spin_manifest_version = 2
[application]
name = "shape"
[variables]
upstream = { required = true }
[[trigger.http]]
route = "/..."
component = "app"
[component.app]
source = "spin-app.wasm"
key_value_stores = ["default"]
sqlite_databases = ["default"]
allowed_outbound_hosts = ["{{ upstream }}"]
[component.app.variables]
upstream = "{{ upstream }}"
TOML
printf 'wrk.method = "POST"\nwrk.body = "SELECT id, text FROM notes WHERE id = 1"\n' > "$work/post.lua"
mkdir -p "$work/up"
printf 'upstream!' > "$work/up/index.html"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up=$(free_port)
(cd "$work/up" && exec python3 -m http.server "$up" --bind 127.0.0.1 >/dev/null 2>&1) &
sleep 1
for round in $(seq 1 "$rounds"); do
    # Alternate which goes first.
    order=(base head)
    [ $((round % 2)) -eq 0 ] && order=(head base)
    for which in "${order[@]}"; do
        bin=$base
        [ "$which" = head ] && bin=$head
        port=$(free_port)
        rm -rf "$work/state"
        LUGE_BENCH_SERVE=1 SPIN_VARIABLE_UPSTREAM="http://127.0.0.1:$up" "$bin" serve \
            --spin "$work/spin.toml" --listen "127.0.0.1:$port" --state-dir "$work/state" \
            >"$work/server.log" 2>&1 &
        server=$!
        for _ in $(seq 1 100); do
            curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
            sleep 0.1
        done
        curl -s -X PUT --data "$(printf 'v%.0s' $(seq 1 100))" "http://127.0.0.1:$port/kv/k" >/dev/null
        curl -s -X POST "http://127.0.0.1:$port/sql/insert/hello" >/dev/null
        for c in 1 16; do
            for what in kv sql fetch; do
                case $what in
                    kv) args=("http://127.0.0.1:$port/kv/k") ;;
                    sql) args=(-s "$work/post.lua" "http://127.0.0.1:$port/sql") ;;
                    fetch) args=("http://127.0.0.1:$port/fetch") ;;
                esac
                r=$(wrk -t1 -c"$c" -d3s --latency "${args[@]}" 2>&1)
                echo "round=$round which=$which what=$what c=$c" \
                    "rps=$(awk '/Requests\/sec/ {print $2}' <<<"$r")" \
                    "p50=$(awk '$1=="50%" {print $2}' <<<"$r")" \
                    "p99=$(awk '$1=="99%" {print $2}' <<<"$r")" \
                    "non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$r")"
            done
        done
        kill "$server"
        wait "$server" 2>/dev/null || true
    done
done
