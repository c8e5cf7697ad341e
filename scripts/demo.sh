#!/usr/bin/env bash
# The built-in demo: builds Luge and the example functions and starts
# `luge serve --config deploy/demo/luge.toml` on 127.0.0.1:8080. It invokes
# the configured routes (C, Rust, Python and JavaScript functions, a
# chain), uploads a function through the management API, deploys and runs
# OpenWhisk containers through the executor API, and serves a Spin app
# with `luge up` (key-value and SQLite); then it keeps serving until
# Ctrl-C. The servers' logs go to files it names (target/demo/).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build-actions.sh
cargo build --quiet -p luge-executor -p luge-precompile

addr=${LUGE_DEMO_ADDR:-127.0.0.1:8080}
state=$(mktemp -d)
# A throwaway operator token for the demo's uploads; a real host keeps its
# token in a file only the operator can read.
(umask 077; head -c 24 /dev/urandom | base64 > "$state/token")
token=$(cat "$state/token")
logs=target/demo
mkdir -p "$logs"
echo "== starting luge serve (its log: $logs/luge.log; the Python and JavaScript"
echo "   interpreters compile once, up to a minute or two on two cores)"
# The compile cache outlives the demo: a second run starts at once.
./target/debug/luge serve --config deploy/demo/luge.toml --listen "$addr" \
    --cache-dir "$logs/cache" --store "$state/functions" --state-dir "$state/state" --token-file "$state/token" \
    2> "$logs/luge.log" &
luge_pid=$!
trap 'kill $luge_pid ${spin_pid:-} 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 3000); do
    curl -sf "http://$addr/healthz" >/dev/null && break
    kill -0 $luge_pid 2>/dev/null || { echo "luge serve stopped: see $logs/luge.log" >&2; exit 1; }
    sleep 0.1
done

echo "== standalone routes (deploy/demo/luge.toml)"
printf 'POST /ping            -> '; curl -s -XPOST "http://$addr/ping"
printf 'POST /echo "hi there" -> '; curl -s -XPOST "http://$addr/echo" --data-binary 'hi there'; echo
printf 'GET  /echo?a=1&b=2    -> '; curl -s "http://$addr/echo?a=1&b=2"; echo
printf 'POST /fib {"n":25}    -> '; curl -s -XPOST "http://$addr/fib" -d '{"n":25}'
printf 'POST /echo-stamp-stamp "hi" (a chain) -> '; curl -s -XPOST "http://$addr/echo-stamp-stamp" --data-binary 'hi'; echo
printf 'POST /python {"name":"demo"}     -> '; curl -s -XPOST "http://$addr/python" -d '{"name":"demo"}'; echo
printf 'POST /javascript {"name":"demo"} -> '; curl -s -XPOST "http://$addr/javascript" -d '{"name":"demo"}'; echo

echo "== upload API"
printf 'PUT  /v1/functions/hello -> '
curl -s -XPUT "http://$addr/v1/functions/hello" -H "Authorization: Bearer $token" \
    --data-binary @target/wasm/c-hello.wasm; echo
printf 'POST /fn/hello           -> '; curl -s -XPOST "http://$addr/fn/hello" -d 'abc'
printf 'GET  /v1/functions (no token) -> '; curl -s "http://$addr/v1/functions"; echo

echo "== OpenWhisk executor API"
deploy() { # container, wasm, main
    printf '{"value":{"name":"%s","main":"%s","binary":true,"code":"%s"}}' \
        "$1" "$3" "$(base64 -w0 "target/wasm/$2.wasm")" > "$state/init.json"
    printf 'deploy %-8s ' "$1"; curl -s -XPOST "http://$addr/$1/init" -d @"$state/init.json"; echo
}
invoke() { # container, params
    printf 'invoke %-8s %s -> ' "$1" "$2"
    curl -s -XPOST "http://$addr/$1/run" -d "{\"value\":$2,\"activation_id\":\"demo\"}"; echo
}
deploy greet echo main
deploy hash hash main
deploy sleep sleep main
invoke greet '{"message":"hello, luge"}'
invoke hash '{"iterations":10000}'
invoke sleep '{"ms":300}'
echo "logs of greet: $(curl -s "http://$addr/greet/logs")"

echo "== a Spin app, as spin up serves it (actions/spin/sdk3; its log: $logs/spin.log)"
spin_addr=${LUGE_DEMO_SPIN_ADDR:-127.0.0.1:8081}
./target/debug/luge up --from actions/spin/sdk3 --listen "$spin_addr" --state-dir "$state/spin" \
    --cache-dir "$logs/cache" > "$logs/spin.out" 2> "$logs/spin.log" &
spin_pid=$!
for _ in $(seq 600); do grep -q '^Serving' "$logs/spin.out" 2>/dev/null && break; sleep 0.1; done
cat "$logs/spin.out"
printf 'PUT  /kv/colour blue -> '; curl -s -XPUT "http://$spin_addr/kv/colour" -d blue; echo
printf 'GET  /kv/colour      -> '; curl -s "http://$spin_addr/kv/colour"; echo
printf "POST /sql \"select 6 * 7\" -> "; curl -s -XPOST "http://$spin_addr/sql" -d 'select 6 * 7'; echo
cat <<MSG

Luge is serving at http://$addr, and the Spin app at http://$spin_addr
(Ctrl-C stops both; logs in $logs/). Try:
  curl -s -XPOST http://$addr/echo --data-binary @README.md
  curl -s -XPOST http://$addr/fib -d '{"n":30}'
  curl -s -XPUT http://$addr/v1/functions/cat -H "Authorization: Bearer $token" --data-binary @target/wasm/cat.wasm
  curl -s http://$addr/metrics
MSG
wait $luge_pid $spin_pid
