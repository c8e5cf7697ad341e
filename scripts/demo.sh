#!/usr/bin/env bash
# The built-in demo: builds Luge and the example functions and starts
# `luge serve --config deploy/demo/luge.toml` on 127.0.0.1:8080, then
# shows each thing Luge does, one step a line, and a table of them at the
# end (the book's "Getting started" lists the same steps):
# C, Rust, Python and JavaScript functions on routes, a chain, its trace
# printed as a tree (Luge's own OTLP export to a small local collector),
# an upload through the management API, a function woken by Redis
# messages, an outgoing HTTPS call to a local server with a CA of its own,
# OpenWhisk containers through the executor API, and a Spin app served by
# `luge up` (key-value and SQLite). Then it keeps serving until Ctrl-C.
# The servers' logs go to files it names (target/demo/).
#
# Everything listens on 127.0.0.1. Ports, each overridable:
# LUGE_DEMO_ADDR (127.0.0.1:8080), LUGE_DEMO_SPIN_ADDR (127.0.0.1:8081),
# LUGE_DEMO_REDIS_PORT (16379), LUGE_DEMO_TLS_PORT (18443),
# LUGE_DEMO_OTLP_PORT (14318). LUGE_DEMO_EXIT=1 stops after the table,
# its status 0 only if every step did what it shows (the test suite runs
# it so: executor/tests/e2e/standalone.rs); LUGE=PATH uses a built luge
# and skips the set-up and builds; LUGE_DEMO_CACHE=DIR keeps compiled
# code there (default target/demo/cache), LUGE_DEMO_LOGS=DIR the logs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LUGE:-}" ]; then
    ./scripts/setup.sh
    ./scripts/build-actions.sh
    cargo build --quiet -p luge-executor -p luge-precompile
fi
luge=${LUGE:-./target/debug/luge}

addr=${LUGE_DEMO_ADDR:-127.0.0.1:8080}
spin_addr=${LUGE_DEMO_SPIN_ADDR:-127.0.0.1:8081}
redis_port=${LUGE_DEMO_REDIS_PORT:-16379}
tls_port=${LUGE_DEMO_TLS_PORT:-18443}
otlp_port=${LUGE_DEMO_OTLP_PORT:-14318}
logs=${LUGE_DEMO_LOGS:-target/demo}
cache=${LUGE_DEMO_CACHE:-$logs/cache}
mkdir -p "$logs"
state=$(mktemp -d)
pids=()
trap 'kill ${pids[@]:-} 2>/dev/null; rm -rf "$state"' EXIT

# One step: its name, what its answer must hold, and the command. Each is
# printed as it runs and kept for the table at the end.
steps=()
step() {
    local name=$1 want=$2 got
    shift 2
    got=$("$@" 2>&1 | head -c 2000) || true
    printf '%-42s -> %s\n' "$name" "$(printf '%s' "$got" | tr '\n' ' ' | cut -c1-110)"
    if [[ "$got" == *"$want"* ]]; then
        steps+=("$name|ok")
    else
        steps+=("$name|FAILED: expected \"$want\"")
    fi
}
# Waits up to $2 tenths of a second for command $3... to succeed.
await() {
    local what=$1 tenths=$2
    shift 2
    for _ in $(seq "$tenths"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "demo: $what did not come up" >&2
    return 1
}

echo "== local servers the demo talks to: Redis on $redis_port, HTTPS on $tls_port"
echo "   (its own CA), a trace collector on $otlp_port; logs in $logs/"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    > "$logs/redis.log" 2>&1 &
pids+=($!)
# A CA of the demo's own, and a certificate it signs for localhost: the
# HTTPS server is trusted only because luge is given this CA.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=luge-demo-ca -keyout "$state/ca.key" -out "$state/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$state/tls.key" -out "$state/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' > "$state/san.ext"
openssl x509 -req -in "$state/tls.csr" -CA "$state/ca.pem" -CAkey "$state/ca.key" \
    -CAcreateserial -days 1 -extfile "$state/san.ext" -out "$state/tls.pem" 2>/dev/null
python3 - "$tls_port" "$state/tls.pem" "$state/tls.key" > "$logs/https.log" 2>&1 <<'PY' &
import http.server, ssl, sys
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello over TLS, from a server whose CA only this demo trusts\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Hello)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
PY
pids+=($!)
python3 deploy/demo/collector.py serve "$otlp_port" "$logs/spans.jsonl" > "$logs/collector.log" 2>&1 &
pids+=($!)
: > "$logs/spans.jsonl"
await "redis-server" 100 redis-cli -p "$redis_port" ping
await "the HTTPS server" 100 curl -sf --cacert "$state/ca.pem" "https://localhost:$tls_port/"

# A throwaway operator token for the demo's uploads; a real host keeps its
# token in a file only the operator can read.
(umask 077; head -c 24 /dev/urandom | base64 > "$state/token")
token=$(cat "$state/token")
echo "== starting luge serve (its log: $logs/luge.log; the Python and JavaScript"
echo "   interpreters compile once, up to a minute or two on two cores)"
# The compile cache outlives the demo: a second run starts at once. Traces
# go to the collector as OTLP/HTTP JSON, every one sampled.
OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" OTEL_EXPORTER_OTLP_PROTOCOL=http/json \
OTEL_SERVICE_NAME=luge-demo OTEL_BSP_SCHEDULE_DELAY=100 OTEL_METRICS_EXPORTER=none \
    "$luge" serve --config deploy/demo/luge.toml --listen "$addr" --ca-file "$state/ca.pem" \
    --cache-dir "$cache" --store "$state/functions" --state-dir "$state/state" \
    --token-file "$state/token" 2> "$logs/luge.log" &
luge_pid=$!
pids+=($luge_pid)
for _ in $(seq 3000); do
    curl -sf "http://$addr/healthz" >/dev/null && break
    kill -0 $luge_pid 2>/dev/null || { echo "luge serve stopped: see $logs/luge.log" >&2; exit 1; }
    sleep 0.1
done
post() { curl -s -XPOST "http://$addr$1" --data-binary "$2"; }
auth=(-H "Authorization: Bearer $token")

echo "== standalone routes (deploy/demo/luge.toml)"
step "C: POST /ping" "pong" post /ping ''
step "C: POST /echo" "hi there" post /echo 'hi there'
step "Rust: POST /fib {n: 25}" '"fib":75025' post /fib '{"n":25}'
step "Python: POST /python" '"language": "python"' post /python '{"name":"demo"}'
step "JavaScript: POST /javascript" '"language":"javascript"' post /javascript '{"name":"demo"}'
step "a chain: /echo -> /stamp -> /stamp" "hi -> stamped -> stamped" post /echo-stamp-stamp 'hi'

echo "== the chain's trace, as Luge exported it (OTLP/HTTP JSON to deploy/demo/collector.py)"
trace=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
curl -s -XPOST "http://$addr/echo-stamp-stamp" -H "traceparent: 00-$trace-00f067aa0ba902b7-01" \
    --data-binary 'traced' > /dev/null
await "the trace" 100 grep -q "$trace" "$logs/spans.jsonl"
sleep 0.5
python3 deploy/demo/collector.py tree "$logs/spans.jsonl" "$trace" | tee "$state/tree"
step "a trace, printed as a tree" "    stamp  " cat "$state/tree"

echo "== upload API (PUT /v1/functions/NAME with the operator's token)"
step "upload a function" '"name":"hello"' curl -s -XPUT "http://$addr/v1/functions/hello" "${auth[@]}" \
    --data-binary @target/wasm/c-hello.wasm
step "run it: POST /fn/hello" "hello from C" post /fn/hello 'abc'
step "the API refuses a request without a token" "401" \
    curl -s -o /dev/null -w '%{http_code}' "http://$addr/v1/functions"

echo "== a function woken by Redis messages (an upload with a trigger)"
printf '{"code":"%s","metadata":{"allowed_outbound_hosts":["redis://127.0.0.1:%s"],"triggers":[{"redis":{"address":"redis://127.0.0.1:%s","channel":"demo"}}]}}' \
    "$(base64 -w0 target/wasm/c-hello.wasm)" "$redis_port" "$redis_port" > "$state/on-message.json"
step "upload it with a redis trigger" '"name":"on-message"' curl -s -XPUT \
    "http://$addr/v1/functions/on-message" "${auth[@]}" -H 'content-type: application/json' \
    --data-binary @"$state/on-message.json"
handled() { curl -s "http://$addr/metrics" | grep -F 'luge_trigger_events_total{trigger="on-message.triggers[0]",result="handled"}' | awk '{print $2}'; }
await "the trigger's subscription" 100 sh -c "[ \"\$(redis-cli -p $redis_port pubsub numsub demo | tail -1)\" = 1 ]"
redis-cli -p "$redis_port" publish demo 'hello from redis' > /dev/null
await "the message's run" 100 sh -c "[ -n \"\$(curl -s http://$addr/metrics | grep -F 'result=\"handled\"' | grep -F on-message)\" ]"
step "PUBLISH demo: the function ran" "1" handled

echo "== an outgoing HTTPS call (a wasi:http component; the server's CA given by --ca-file)"
printf '{"code":"%s","metadata":{"path":"/fetch","allowed_outbound_hosts":["https://localhost:%s"]}}' \
    "$(base64 -w0 target/wasm/http-handler.wasm)" "$tls_port" > "$state/fetch.json"
step "upload a handler granted that server" '"name":"fetch"' curl -s -XPUT \
    "http://$addr/v1/functions/fetch" "${auth[@]}" -H 'content-type: application/json' \
    --data-binary @"$state/fetch.json"
step "GET /fetch: it calls https://localhost" "hello over TLS" \
    curl -s "http://$addr/fetch" -H "x-fetch: https://localhost:$tls_port/"
step "a host it is not granted is refused" "HttpRequestDenied" \
    curl -s "http://$addr/fetch" -H "x-fetch: https://127.0.0.1:$tls_port/"

echo "== OpenWhisk executor API (what an invoker's WasmContainerFactory calls)"
deploy() { # container, wasm, main
    printf '{"value":{"name":"%s","main":"%s","binary":true,"code":"%s"}}' \
        "$1" "$3" "$(base64 -w0 "target/wasm/$2.wasm")" > "$state/init.json"
    curl -s -XPOST "http://$addr/$1/init" -d @"$state/init.json"
}
invoke() { # container, params
    curl -s -XPOST "http://$addr/$1/run" -d "{\"value\":$2,\"activation_id\":\"demo\"}"
}
step "POST /greet/init (a container)" '"ok":true' deploy greet echo main
step "POST /greet/run" "hello, luge" invoke greet '{"message":"hello, luge"}'
hash_10000() { deploy hash hash main > /dev/null && invoke hash '{"iterations":10000}'; }
step "POST /hash/init, /hash/run" '"iterations":10000' hash_10000

echo "== a Spin app, as spin up serves it (actions/spin/sdk3; its log: $logs/spin.log)"
"$luge" up --from actions/spin/sdk3 --listen "$spin_addr" --state-dir "$state/spin" \
    --cache-dir "$cache" > "$logs/spin.out" 2> "$logs/spin.log" &
spin_pid=$!
pids+=($spin_pid)
await "luge up" 600 grep -q '^Serving' "$logs/spin.out"
cat "$logs/spin.out"
step "Spin key-value: PUT /kv/colour" "stored" curl -s -XPUT "http://$spin_addr/kv/colour" -d blue
step "Spin key-value: GET /kv/colour" "blue" curl -s "http://$spin_addr/kv/colour"
step "Spin SQLite: POST /sql" "42" curl -s -XPOST "http://$spin_addr/sql" -d 'select 6 * 7'

echo
echo "== what the demo showed"
failed=0
printf '| %-42s | %s\n' "step" "result"
for entry in "${steps[@]}"; do
    printf '| %-42s | %s\n' "${entry%%|*}" "${entry#*|}"
    [ "${entry#*|}" = ok ] || failed=$((failed + 1))
done
echo "${#steps[@]} steps, $failed failed; logs in $logs/ (luge.log, spin.log, redis.log, https.log)"
if [ "${LUGE_DEMO_EXIT:-0}" = 1 ]; then
    exit $((failed > 0))
fi
cat <<MSG

Luge is serving at http://$addr, and the Spin app at http://$spin_addr
(Ctrl-C stops both). Try:
  curl -s -XPOST http://$addr/echo --data-binary @README.md
  curl -s -XPOST http://$addr/fib -d '{"n":30}'
  redis-cli -p $redis_port publish demo 'another message'
  curl -s http://$addr/metrics | grep luge_trigger
MSG
wait $luge_pid $spin_pid
