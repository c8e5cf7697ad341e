#!/usr/bin/env bash
# The built-in demo: builds Luge and the example functions, starts
# `luge serve` on 127.0.0.1:8080, deploys the examples as containers through
# the executor API, invokes each once, and keeps serving until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build-actions.sh
cargo build --quiet -p luge-executor -p luge-precompile

addr=${LUGE_DEMO_ADDR:-127.0.0.1:8080}
state=$(mktemp -d)
./target/debug/luge serve --listen "$addr" --cache-dir "$state" &
luge_pid=$!
trap 'kill $luge_pid 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 50); do curl -sf "http://$addr/healthz" >/dev/null && break; sleep 0.1; done

deploy() { # container, wasm, main
    printf '{"value":{"name":"%s","main":"%s","binary":true,"code":"%s"}}' \
        "$1" "$3" "$(base64 -w0 "target/wasm/$2.wasm")" > "$state/init.json"
    printf 'deploy %-8s ' "$1"; curl -s -XPOST "http://$addr/$1/init" -d @"$state/init.json"; echo
}
invoke() { # container, params
    printf 'invoke %-8s %s -> ' "$1" "$2"
    curl -s -XPOST "http://$addr/$1/run" -d "{\"value\":$2,\"activation_id\":\"demo\"}"; echo
}
deploy echo echo main
deploy hello c-hello main
deploy hash hash main
deploy fib fib main
deploy sleep sleep main
invoke echo '{"message":"hello, luge"}'
invoke hello '{}'
invoke hash '{"iterations":10000}'
invoke fib '{"n":30}'
invoke sleep '{"ms":300}'
echo "logs of echo: $(curl -s "http://$addr/echo/logs")"
cat <<MSG

Luge is serving the examples at http://$addr (Ctrl-C stops it). Try:
  curl -s -XPOST http://$addr/fib/run -d '{"value":{"n":25}}'
  curl -s http://$addr/healthz
MSG
wait $luge_pid
