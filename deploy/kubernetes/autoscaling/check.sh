#!/usr/bin/env bash
# Luge elastic on the single-node cluster kubelet-path.sh started:
#
# 1. KEDA v2.21.0 (keda-operator and its metrics API server, registered
#    through the API server's aggregation layer as
#    external.metrics.k8s.io) scales elastic-app.yaml's Deployment on
#    `sum(luge_invocations_in_flight)` from a Prometheus v3 scraping the
#    pods: a step of load (24 clients on a route that waits 400 ms) takes
#    it from 1 pod to at least 4, and back when the load ends;
# 2. KEDA's HTTP add-on (interceptor and external scaler, built from
#    KEDA_HTTP_ADD_ON_SRC) takes it to 0 pods after the cooldown and back:
#    a request sent at 0 is held by the interceptor and answered;
#    none of the requests sent during the scale-up, the scale-down and
#    the wake-ups is lost;
# 3. spin-operator (built from SPIN_OPERATOR_SRC) runs spinapp.yaml's
#    SpinApp on the RuntimeClass luge: replicas, variables, components
#    (selective deployment) and runtimeConfig.
#
#   autoscaling/check.sh WORK        (run by kubelet-path.sh)
#
# KEDA, Prometheus, the add-on and spin-operator run on this machine
# beside the API server, as the controller manager does here, each with
# the administrator's kubeconfig; the Services through which the API
# server and KEDA reach them are selector-less, their endpoints this
# node's bridge address. Nothing listens beyond 127.0.0.1 and the pod
# bridge; all load goes to 127.0.0.1.
#
# Figures (first request from 0, time to add a replica, requests lost)
# are printed as `measured:` lines and kept in WORK/autoscaling.json.
set -euo pipefail
work="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
tools="$repo/target/tools/k8s"
k8s="$work/k8s"
as="$k8s/autoscaling"
node_ip=10.244.77.1
: "${KUBECONFIG:?kubelet-path.sh sets it}"
step() { echo "== autoscaling: $*"; }
logs=(prometheus keda-operator keda-adapter keda-http-interceptor keda-http-scaler spin-operator)
fail() {
    echo "autoscaling: $*" >&2
    for log in "${logs[@]}"; do
        [ -f "$work/logs/$log.log" ] || continue
        echo "-- last lines of $log.log" >&2
        tail -5 "$work/logs/$log.log" >&2
    done
    kubectl get pods -A -o wide >&2 || true
    exit 1
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
millis() { echo $(($(date +%s%N) / 1000000)); }
rm -rf "$as" && mkdir -p "$as/certs"

pids=()
stop_all() {
    set +e
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[$i]}" 2>/dev/null
        for _ in $(seq 50); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
        kill -9 "${pids[$i]}" 2>/dev/null
        wait "${pids[$i]}" 2>/dev/null
    done
    pids=()
}
trap stop_all EXIT
# NAME then the command: run with its log in WORK/logs/NAME.log.
run() {
    local name="$1"
    shift
    "$@" >"$work/logs/$name.log" 2>&1 &
    pids+=($!)
}
wait_for() {
    local what="$1" tries="$2"
    shift 2
    for _ in $(seq "$tries"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    fail "$what"
}
# A Service in NAMESPACE whose one endpoint is this node at PORT: how the
# API server and KEDA reach what runs beside the API server.
# (v1 Endpoints, mirrored to an EndpointSlice by the controller manager:
# the API server's aggregation routes by them; kubectl's deprecation
# warning is left out.)
host_service() {
    local namespace="$1" name="$2" service_port="$3" port="$4"
    kubectl apply -f - 2> >(grep -v "v1 Endpoints is deprecated" >&2) >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: $name, namespace: $namespace}
spec:
  ports: [{port: $service_port, targetPort: $port}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: $name, namespace: $namespace}
subsets:
  - addresses: [{ip: $node_ip}]
    ports: [{port: $port}]
YAML
}

step "the CRDs: KEDA's, its HTTP add-on's, spin-operator's"
kubectl apply --server-side -f "$tools/src/keda/config/crd/bases" \
    -f "$tools/src/http-add-on/config/crd/bases" \
    -f "$tools/src/spin-operator/config/crd/bases" >/dev/null
kubectl wait --for condition=established crd --all --timeout=60s >/dev/null
kubectl create namespace keda >/dev/null

step "Prometheus v3 (Kubernetes discovery only; the pods annotated prometheus.io/scrape)"
prom_port=$(free_port)
sed "s|KUBECONFIG_FILE|$KUBECONFIG|" "$here/prometheus.yml" >"$as/prometheus.yml"
# Targets follow the pods within a second (Prometheus' default batches
# discovery's changes for 5 s: a new pod's load would go unseen that long).
run prometheus prometheus --config.file "$as/prometheus.yml" --storage.tsdb.path "$as/prometheus" \
    --web.listen-address "127.0.0.1:$prom_port" --scrape.discovery-reload-interval=1s
wait_for "Prometheus did not start" 300 curl -fsS "http://127.0.0.1:$prom_port/-/ready"

step "KEDA v2.21.0: keda-operator and keda-adapter (external.metrics.k8s.io)"
# The certificates KEDA's operator and adapter talk gRPC over (mutual
# TLS), and the adapter serves the API server with.
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$as/certs/ca.key" -out "$as/certs/ca.crt" -subj "/CN=luge-check-keda-ca"
openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$as/certs/tls.key" -out "$as/certs/tls.csr" -subj "/CN=keda"
printf 'subjectAltName=IP:127.0.0.1,IP:%s,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' "$node_ip" >"$as/certs/tls.ext"
openssl_quiet x509 -req -in "$as/certs/tls.csr" -CA "$as/certs/ca.crt" -CAkey "$as/certs/ca.key" \
    -CAcreateserial -days 2 -extfile "$as/certs/tls.ext" -out "$as/certs/tls.crt"
grpc_port=$(free_port)
adapter_port=$(free_port)
export KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda WATCH_NAMESPACE=""
run keda-operator keda-operator --cert-dir "$as/certs" --enable-cert-rotation=false \
    --enable-webhook-patching=false --enable-apiservice-patching=false \
    --metrics-bind-address "127.0.0.1:$(free_port)" --health-probe-bind-address "127.0.0.1:$(free_port)" \
    --metrics-service-bind-address "127.0.0.1:$grpc_port" --zap-log-level=info
run keda-adapter keda-adapter --secure-port "$adapter_port" --bind-address "$node_ip" \
    --tls-cert-file "$as/certs/tls.crt" --tls-private-key-file "$as/certs/tls.key" --cert-dir "$as/certs" \
    --lister-kubeconfig "$KUBECONFIG" --authentication-kubeconfig "$KUBECONFIG" \
    --authorization-kubeconfig "$KUBECONFIG" \
    --metrics-service-address "127.0.0.1:$grpc_port" --port "$(free_port)" --zap-log-level=info
host_service keda keda-metrics-apiserver 443 "$adapter_port"
kubectl apply -f - >/dev/null <<YAML
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  group: external.metrics.k8s.io
  version: v1beta1
  # The adapter's certificate is the check's own; the API server does not
  # know its CA (KEDA's operator patches the bundle in when it rotates
  # the certificates itself).
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
YAML
wait_for "the external metrics API did not come up" 600 kubectl get --raw /apis/external.metrics.k8s.io/v1beta1

step "KEDA's HTTP add-on: keda-http-interceptor (direct to pods) and keda-http-scaler"
proxy_port=$(free_port)
admin_port=$(free_port)
scaler_port=$(free_port)
host_service keda keda-add-ons-http-interceptor-admin 9090 "$admin_port"
# The interceptor forwards to a ready pod's address (no kube-proxy here),
# and holds a request while the app has none.
KEDA_HTTP_PROXY_PORT=$proxy_port KEDA_HTTP_ADMIN_PORT=$admin_port KEDA_HTTP_DIRECT_POD_ROUTING=true \
    OTEL_PROM_EXPORTER_ENABLED=false \
    run keda-http-interceptor keda-http-interceptor
# The scaler asks the interceptors for their held requests and tells
# KEDA whether the app is wanted every 100 ms (its defaults: 500 and 200
# ms), so a held request wakes the app sooner.
KEDA_HTTP_QUEUE_TICK_DURATION=100ms KEDA_HTTP_SCALER_STREAM_INTERVAL_MS=100 \
    KEDA_HTTP_SCALER_PORT=$scaler_port KEDA_HTTP_SCALER_TARGET_ADMIN_NAMESPACE=keda \
    KEDA_HTTP_SCALER_TARGET_ADMIN_SERVICE=keda-add-ons-http-interceptor-admin \
    KEDA_HTTP_SCALER_TARGET_ADMIN_DEPLOYMENT=keda-add-ons-http-interceptor \
    KEDA_HTTP_SCALER_TARGET_ADMIN_PORT=$admin_port OTEL_PROM_EXPORTER_ENABLED=false \
    run keda-http-scaler keda-http-scaler
wait_for "the interceptor's admin port did not open" 300 curl -fsS "http://127.0.0.1:$admin_port/queue"

step "elastic-app: Deployment (0 replicas), Service, InterceptorRoute, ScaledObject"
sed -e "s|http://prometheus-server.monitoring.svc:80|http://127.0.0.1:$prom_port|" \
    -e "s|keda-add-ons-http-external-scaler.keda:9090|127.0.0.1:$scaler_port|" \
    "$here/elastic-app.yaml" >"$as/elastic-app.yaml"
grep -q "127.0.0.1:$scaler_port" "$as/elastic-app.yaml" || fail "the scaler's address was not set"
kubectl apply -f "$as/elastic-app.yaml" >/dev/null
# The last pod goes 10 s after the load, not the manifest's minute: the
# check waits for it six times.
kubectl patch scaledobject elastic-app --type merge -p '{"spec":{"cooldownPeriod":10}}' >/dev/null
# The interceptor routes the app's host once its informer has the route.
for _ in $(seq 150); do
    curl -fsS "http://127.0.0.1:$admin_port/queue" 2>/dev/null | grep -q elastic-app && break
    sleep 0.2
done
replicas() { kubectl get deployment elastic-app -o jsonpath='{.status.readyReplicas}' | sed 's/^$/0/'; }
wait_for "KEDA did not take the ScaledObject" 300 \
    sh -c "kubectl get hpa keda-hpa-elastic-app -o name | grep -q ."
kubectl get scaledobject elastic-app --no-headers
# The Deployment's and its pods' changes, stamped as they arrive.
python3 "$here/timeline.py" elastic-app >"$as/timeline.log" &
timeline_pid=$!
pids+=("$timeline_pid")
# What happened between two instants: each step of the timeline after
# FROM, as "step +MS", the first of each kind, then "answered +MS".
breakdown() {
    python3 - "$as/timeline.log" "$1" "$2" <<'PY'
import sys
log, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
firsts = {}
for line in open(log):
    ms, what, _ = (line.split() + [""])[:3]
    ms = int(ms)
    if start <= ms <= end and what not in firsts:
        firsts[what] = ms
steps = [f"{what} +{ms - start}" for what, ms in sorted(firsts.items(), key=lambda kv: kv[1])]
print(", ".join(steps + [f"answered +{end - start}"]))
PY
}

# Sends one request at 0 pods and times it: "MS STATUS STARTED ENDED".
from_zero() {
    local started status
    started=$(millis)
    status=$(curl -sS -o "$as/answer" -w '%{http_code}' --max-time 90 \
        -H "Host: elastic.luge.local" "http://127.0.0.1:$proxy_port/hello" || echo 000)
    echo "$(($(millis) - started)) $status $started $(millis)"
}
at_zero() {
    for _ in $(seq 900); do
        [ "$(kubectl get deployment elastic-app -o jsonpath='{.spec.replicas}')" = 0 ] &&
            [ -z "$(kubectl get pods -l app=elastic-app -o name)" ] && return 0
        sleep 0.2
    done
    fail "elastic-app did not go to 0 pods: $(kubectl get pods -l app=elastic-app --no-headers)"
}

step "a request at 0 pods: held by the interceptor, answered once a pod is ready"
at_zero
read -r first status started ended <<<"$(from_zero)"
[ "$status" = 200 ] || fail "the first request at 0 pods got $status: $(cat "$as/answer")"
grep -q "Hello, Spin app" "$as/answer" || fail "the first request was answered: $(cat "$as/answer")"
echo "measured: the first request at 0 pods answered 200 after $first ms"
echo "measured: from 0: $(breakdown "$started" "$ended")"
# Inside the pod: the shim's first line (luge serve starting) and Luge's
# "listening" (its components loaded), as containerd stamped them.
woken=$(awk '$2 == "created" { print $3; exit }' "$as/timeline.log")
kubectl logs --timestamps "$woken" 2>/dev/null | grep -E "luge: serve|luge listening" | cut -c1-120 || true

step "a step of load (24 clients, GET /sleep/400): 1 pod to at least 4, none lost"
load_out="$as/load.json"
python3 "$here/load.py" "$proxy_port" elastic.luge.local /sleep/400 24 75 >"$load_out" &
load_pid=$!
load_started=$(millis)
most=0
added=()
while kill -0 "$load_pid" 2>/dev/null; do
    now=$(replicas)
    while [ "$now" -gt "$most" ]; do
        most=$((most + 1))
        [ "$most" -ge 2 ] && added+=("$(($(millis) - load_started))")
    done
    sleep 0.5
done
wait "$load_pid" || fail "the load generator failed"
cat "$load_out"
echo "measured: under load: $(breakdown "$load_started" "$(millis)")"
[ "$most" -ge 4 ] || fail "the load took elastic-app to $most ready pods, not 4 or more"
echo "measured: pods 2..$most ready after ${added[*]} ms of load"
lost_up=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["lost"])' "$load_out")
sent_up=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sent"])' "$load_out")
[ "$lost_up" = 0 ] || fail "$lost_up of $sent_up requests lost during the scale-up"

step "the load ends: back to 1 pod, then 0, a trickle meanwhile losing nothing"
# 4 clients, one request each 0.25 s at most: under the threshold, so the
# pods go while it runs; stopped before the last pod's cooldown.
python3 "$here/load.py" "$proxy_port" elastic.luge.local /hello 4 60 --pace 0.25 >"$as/trickle.json" &
trickle_pid=$!
for _ in $(seq 600); do
    [ "$(kubectl get deployment elastic-app -o jsonpath='{.spec.replicas}')" = 1 ] && break
    sleep 0.2
done
[ "$(kubectl get deployment elastic-app -o jsonpath='{.spec.replicas}')" = 1 ] ||
    fail "elastic-app did not come back to 1 pod"
wait "$trickle_pid" || fail "the trickle failed"
cat "$as/trickle.json"
lost_down=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["lost"])' "$as/trickle.json")
sent_down=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sent"])' "$as/trickle.json")
[ "$lost_down" = 0 ] || fail "$lost_down of $sent_down requests lost during the scale-down"
at_zero
echo "0 pods once idle"

step "from 0 again, 5 times (each after the app went back to 0)"
wakes=("$first")
for round in 1 2 3 4 5; do
    read -r ms status started ended <<<"$(from_zero)"
    [ "$status" = 200 ] || fail "wake-up $round got $status"
    echo "wake-up $round: $(breakdown "$started" "$ended")"
    wakes+=("$ms")
    at_zero
done
echo "measured: first requests at 0 pods answered after ${wakes[*]} ms"
total_sent=$((sent_up + sent_down + ${#wakes[@]}))
echo "measured: $total_sent requests during the scale-up, scale-down and wake-ups, 0 lost"
python3 - "$as/autoscaling.json" "$first" "${wakes[*]}" "${added[*]}" "$most" "$total_sent" <<'PY'
import json, sys
out, first, wakes, added, most, sent = sys.argv[1:]
wakes = sorted(int(w) for w in wakes.split())
json.dump({
    "first_request_from_zero_ms": wakes,
    "p99_from_zero_ms": wakes[min(len(wakes) - 1, int(0.99 * len(wakes)))],
    "replica_added_after_ms": [int(a) for a in added.split()],
    "most_ready_pods": int(most),
    "requests_sent": int(sent),
    "requests_lost": 0,
}, open(out, "w"), indent=1)
PY
cp "$as/autoscaling.json" "$work/autoscaling.json"
kubectl delete -f "$as/elastic-app.yaml" --wait=true --timeout=120s >/dev/null
kubectl wait --for=delete pod -l app=elastic-app --timeout=120s >/dev/null 2>&1 || true

step "spin-operator: a SpinApp on the RuntimeClass luge (spinapp.yaml)"
run spin-operator spin-operator --metrics-bind-address "127.0.0.1:$(free_port)" \
    --health-probe-bind-address "127.0.0.1:$(free_port)" --leader-elect=false --enable-webhooks=false
kubectl apply -f "$repo/deploy/kubernetes/spinapp.yaml" >/dev/null
wait_for "spin-operator made no Deployment for the SpinApp" 300 kubectl get deployment spin-two
kubectl rollout status deployment/spin-two --timeout=180s >/dev/null || fail "the SpinApp's pods did not start"
n=0
for ip in $(kubectl get pods -l core.spinkube.dev/app-name=spin-two \
    -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}'); do
    body=$(curl -sS --max-time 5 "http://$ip/hello") || fail "SpinApp pod $ip did not answer"
    [ "$body" = "Hello from a SpinApp, Spin app" ] || fail "SpinApp pod $ip answered: $body"
    # Only the `app` component: `other`'s route is not served (the path
    # falls to `app`'s /..., which has no such route).
    code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "http://$ip/other/hello")
    [ "$code" = 404 ] || fail "SpinApp pod $ip served the left-out component ($code)"
    # The runtime config's key-value store and SQLite database.
    curl -fsS --max-time 5 -X PUT -d "kept" "http://$ip/kv/k" >/dev/null || fail "pod $ip: no key-value store"
    [ "$(curl -fsS --max-time 5 "http://$ip/kv/k")" = kept ] || fail "pod $ip: the store lost its value"
    curl -fsS --max-time 5 -d "create table t (x text)" "http://$ip/sql" >/dev/null || fail "pod $ip: no database"
    curl -fsS --max-time 5 -d "insert into t values ('row')" "http://$ip/sql" >/dev/null
    curl -fsS --max-time 5 -d "select x from t" "http://$ip/sql" | grep -qx row || fail "pod $ip: the database lost its row"
    n=$((n + 1))
done
[ "$n" = 2 ] || fail "$n SpinApp pods answer, not 2"
ready=$(kubectl get spinapp spin-two -o jsonpath='{.status.readyReplicas}')
[ "$ready" = 2 ] || fail "the SpinApp reports $ready ready replicas"
echo "the SpinApp's 2 pods answer with its variable, its one component and its store"
kubectl delete -f "$repo/deploy/kubernetes/spinapp.yaml" --wait=true --timeout=120s >/dev/null
kubectl wait --for=delete pod -l core.spinkube.dev/app-name=spin-two --timeout=120s >/dev/null 2>&1 || true
kubectl delete apiservice v1beta1.external.metrics.k8s.io >/dev/null
stop_all
trap - EXIT
echo "autoscaling: PASSED"
