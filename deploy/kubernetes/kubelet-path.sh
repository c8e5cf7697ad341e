#!/usr/bin/env bash
# The path a real cluster takes: a single-node Kubernetes v1.34 (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet,
# all built from source by build-tools.sh --kubernetes) on the containerd
# check.sh started, pods on the RuntimeClass `luge`. It applies the
# repository's own manifests (runtimeclass.yaml, spin-app.yaml): 2
# replicas behind a Service; scale 2, 5, 0, 2; a rolling update to a new
# image; a pod deleted and a container killed, both replaced; `kubectl
# logs` shows what the function wrote; the same app as Spin's OCI layers
# (spin-oci-app.yaml); the node installer (installer.yaml) on a node root
# of its own. Then it stops all of it and checks
# nothing is left behind. First, when check.sh built them
# (LUGE_K8S_AUTOSCALING=1), the elastic part: autoscaling/check.sh (KEDA,
# Prometheus, KEDA's HTTP add-on, spin-operator) on this cluster;
# LUGE_K8S_STEPS=autoscaling runs only that.
#
#   kubelet-path.sh WORK
#
# Everything listens on 127.0.0.1 but the kubelet, which listens on the
# pod bridge's own address (10.244.77.1, made by check.sh): kubelet
# refuses a loopback node address, and the API server reaches the kubelet
# (logs) and the pods (the Service) only there. kube-proxy is not run:
# the Service is reached through the API server's service proxy, which
# picks one of its endpoints as kube-proxy would.
#
# The kubelet sets three kernel tunables it insists on (vm.overcommit_memory
# = 1, kernel.panic = 10, kernel.panic_on_oops = 1); they are put back as
# they were when this script ends.
set -euo pipefail
work="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${CONTAINER_RUNTIME_ENDPOINT:?check.sh starts containerd and sets it}"
node=luge-node
node_ip=10.244.77.1
step() { echo "== kubelet: $*"; }
fail() {
    echo "kubelet path: $*" >&2
    for log in kubelet kube-apiserver; do
        echo "-- last lines of $log.log" >&2
        tail -5 "$work/logs/$log.log" >&2 || true
    done
    exit 1
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

k8s="$work/k8s"
pki="$k8s/pki"
rm -rf "$k8s"
mkdir -p "$pki" "$k8s/kubelet" "$k8s/pod-logs" "$work/logs"

step "certificates (a CA made here, for two days)"
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" -subj "/CN=luge-check-ca"
# name, subject, extensions
cert() {
    openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$pki/$1.key" -out "$pki/$1.csr" -subj "$2"
    printf '%b' "$3" >"$pki/$1.ext"
    openssl_quiet x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
        -CAcreateserial -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt"
}
cert apiserver "/CN=kube-apiserver" \
    "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth"
# kubectl, the controller manager, the scheduler and the API server's
# calls to the kubelet: an administrator (system:masters).
cert admin "/O=system:masters/CN=luge-check-admin" "extendedKeyUsage=clientAuth"
# The kubelet's identity (the Node authorizer's system:node:NAME) and its
# serving certificate, which the API server checks.
cert kubelet "/O=system:nodes/CN=system:node:$node" "extendedKeyUsage=clientAuth"
cert kubelet-serving "/CN=$node" "subjectAltName=IP:$node_ip,DNS:$node\nextendedKeyUsage=serverAuth"
# The API server's own client certificate toward the APIs it aggregates
# (KEDA's external metrics): the front proxy's, from a CA of its own.
openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$pki/front-proxy-ca.key" -out "$pki/front-proxy-ca.crt" -subj "/CN=luge-check-front-proxy-ca"
openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$pki/front-proxy-client.key" -out "$pki/front-proxy-client.csr" -subj "/CN=front-proxy-client"
printf 'extendedKeyUsage=clientAuth\n' >"$pki/front-proxy-client.ext"
openssl_quiet x509 -req -in "$pki/front-proxy-client.csr" -CA "$pki/front-proxy-ca.crt" \
    -CAkey "$pki/front-proxy-ca.key" -CAcreateserial -days 2 -extfile "$pki/front-proxy-client.ext" \
    -out "$pki/front-proxy-client.crt"
openssl_quiet genrsa -out "$pki/sa.key" 2048
openssl_quiet rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

etcd_port=$(free_port)
peer_port=$(free_port)
api_port=$(free_port)
kcm_port=$(free_port)
sched_port=$(free_port)
kubelet_port=$(free_port)
healthz_port=$(free_port)
server="https://127.0.0.1:$api_port"

# user: the certificate's name in $pki
kubeconfig() {
    cat <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: luge-check
    cluster: {server: "$server", certificate-authority: "$pki/ca.crt"}
users:
  - name: $1
    user: {client-certificate: "$pki/$1.crt", client-key: "$pki/$1.key"}
contexts:
  - name: luge-check
    context: {cluster: luge-check, user: $1}
current-context: luge-check
YAML
}
kubeconfig admin >"$k8s/admin.kubeconfig"
kubeconfig kubelet >"$k8s/kubelet.kubeconfig"
export KUBECONFIG="$k8s/admin.kubeconfig"

# The kernel tunables the kubelet sets, to put back.
tunables=(vm/overcommit_memory kernel/panic kernel/panic_on_oops)
saved=()
for tunable in "${tunables[@]}"; do saved+=("$(cat "/proc/sys/$tunable")"); done

pids=()
started() { pids+=("$1:$2"); }
stop_all() {
    set +e
    # Last started, first stopped: the kubelet before the control plane.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        local pid="${pids[$i]%%:*}"
        kill "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    pids=()
    for i in "${!tunables[@]}"; do
        echo "${saved[$i]}" >"/proc/sys/${tunables[$i]}" 2>/dev/null
    done
    # What the kubelet mounted and the cgroups it made (kubepods, its QoS
    # classes), once no pod is left in them.
    grep -F " $k8s/" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r umount 2>/dev/null
    find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null
    return 0
}
trap 'stop_all' EXIT

step "etcd v3.6.16 on 127.0.0.1:$etcd_port"
etcd --name luge-check --data-dir "$k8s/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "luge-check=http://127.0.0.1:$peer_port" --listen-metrics-urls "" \
    >"$work/logs/etcd.log" 2>&1 &
started $! etcd

step "kube-apiserver on $server"
kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --secure-port "$api_port" --advertise-address "$node_ip" \
    --endpoint-reconciler-type none --cert-dir "$k8s/apiserver" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/24 \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    >"$work/logs/kube-apiserver.log" 2>&1 &
started $! kube-apiserver
for _ in $(seq 300); do
    kubectl get --raw /readyz >/dev/null 2>&1 && break
    sleep 0.2
done
kubectl get --raw /readyz >/dev/null || fail "the API server did not become ready"

step "kube-controller-manager, kube-scheduler"
kube-controller-manager --kubeconfig "$KUBECONFIG" \
    --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=false \
    --horizontal-pod-autoscaler-sync-period 2s \
    >"$work/logs/kube-controller-manager.log" 2>&1 &
started $! kube-controller-manager
kube-scheduler --kubeconfig "$KUBECONFIG" \
    --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false \
    >"$work/logs/kube-scheduler.log" 2>&1 &
started $! kube-scheduler

step "kubelet (node $node at $node_ip:$kubelet_port, cgroup v1, containerd's CRI)"
cat >"$k8s/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$node_ip"
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
containerRuntimeEndpoint: "$CONTAINER_RUNTIME_ENDPOINT"
# This machine mounts cgroup v1, which kubelet v1.35 and later refuse
# unless told; v1.34 warns. cgroupfs, as containerd's runc and Luge's shim
# are configured here.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
podLogsDir: "$k8s/pod-logs"
tlsCertFile: "$pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$pki/kubelet-serving.key"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization:
  mode: Webhook
# A shared build machine: evict nothing for the disk the rest of it uses.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 16
YAML
kubelet --config "$k8s/kubelet.yaml" --kubeconfig "$k8s/kubelet.kubeconfig" \
    --root-dir "$k8s/kubelet" --cert-dir "$k8s/kubelet-pki" \
    --hostname-override "$node" --node-ip "$node_ip" --node-labels luge.dev/runtime=true \
    >"$work/logs/kubelet.log" 2>&1 &
started $! kubelet
for _ in $(seq 300); do
    kubectl get node "$node" >/dev/null 2>&1 && break
    sleep 0.2
done
kubectl wait --for=condition=Ready "node/$node" --timeout=120s >/dev/null ||
    fail "the node did not become ready"
kubectl get nodes -o wide --no-headers

kubectl apply -f "$here/runtimeclass.yaml" >/dev/null
if [ "${LUGE_K8S_AUTOSCALING:-0}" = 1 ]; then
    "$here/autoscaling/check.sh" "$work" || fail "the autoscaling check failed"
fi
if [ "${LUGE_K8S_STEPS:-all}" = autoscaling ]; then
    stop_all
    trap - EXIT
    echo "kubelet path: only the autoscaling steps (LUGE_K8S_STEPS=autoscaling)"
    exit 0
fi

# Answers of every pod of the Deployment, by its own address: "IP BODY".
pod_ips() {
    kubectl get pods -l app=spin-app --field-selector status.phase=Running \
        -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}'
}
expect_pods() {
    local want="$1" greeting="$2" ips n=0
    kubectl rollout status deployment/spin-app --timeout=180s >/dev/null ||
        fail "the rollout to $want replicas did not finish"
    # Terminating pods of an old ReplicaSet go away after the rollout.
    for _ in $(seq 300); do
        ips=$(pod_ips)
        [ "$(echo "$ips" | grep -c .)" = "$want" ] &&
            [ "$(kubectl get pods -l app=spin-app -o name | grep -c .)" = "$want" ] && break
        sleep 0.2
    done
    for ip in $ips; do
        body=$(curl -sS --max-time 5 "http://$ip/hello") || fail "pod $ip did not answer"
        [ "$body" = "$greeting, Spin app" ] || fail "pod $ip answered: $body"
        n=$((n + 1))
    done
    [ "$n" = "$want" ] || fail "$n pods answer, not $want"
    echo "$want pods answer \"$greeting, Spin app\""
}
through_service() {
    kubectl get --raw "/api/v1/namespaces/default/services/spin-app:80/proxy/$1"
}

step "RuntimeClass luge, Deployment spin-app (2 replicas), Service spin-app"
kubectl apply -f "$here/runtimeclass.yaml" -f "$here/spin-app.yaml"
expect_pods 2 Hello
kubectl get pods -l app=spin-app -o wide --no-headers
body=$(through_service hello) || fail "the Service did not answer"
[ "$body" = "Hello, Spin app" ] || fail "the Service answered: $body"
echo "through the Service: $body"
kubectl get endpointslices -l kubernetes.io/service-name=spin-app --no-headers

step "kubectl logs shows what the function wrote to stderr"
for pod in $(kubectl get pods -l app=spin-app -o name); do
    ip=$(kubectl get "$pod" -o jsonpath='{.status.podIP}')
    curl -sS --max-time 5 -d "hello from ${pod#pod/}" "http://$ip/log" >/dev/null
    for _ in $(seq 50); do
        kubectl logs "$pod" | grep -q "hello from ${pod#pod/}" && break
        sleep 0.2
    done
    kubectl logs "$pod" | grep "hello from ${pod#pod/}" ||
        fail "kubectl logs $pod lacks the function's line"
done
# The pod's limits (spin-app.yaml: 256Mi) reached luge serve: a quarter
# per sandbox by default, half at most.
kubectl logs "$pod" | head -1 | grep -q -- "--memory-mb 64 --max-memory-mb 128" ||
    fail "the pod's memory limit did not reach luge serve: $(kubectl logs "$pod" | head -1)"

step "scale 5, 0, 2"
kubectl scale deployment/spin-app --replicas 5 >/dev/null
expect_pods 5 Hello
kubectl scale deployment/spin-app --replicas 0 >/dev/null
kubectl wait --for=delete pod -l app=spin-app --timeout=120s >/dev/null 2>&1 || true
[ -z "$(kubectl get pods -l app=spin-app -o name)" ] || fail "pods left at 0 replicas"
sleep 1
shims=$(pgrep -f "containerd-shim-luge-v1 .*-id " || true)
[ -z "$shims" ] || fail "shims left at 0 replicas: $shims"
echo "0 pods, no shim left"
kubectl scale deployment/spin-app --replicas 2 >/dev/null
expect_pods 2 Hello

step "a rolling update to luge.local/spin-app:v2"
kubectl set image deployment/spin-app app=luge.local/spin-app:v2 >/dev/null
expect_pods 2 "Hello from v2"

step "a pod deleted: replaced"
victim=$(kubectl get pods -l app=spin-app -o jsonpath='{.items[0].metadata.name}')
deleted_at=$(date +%s%N)
kubectl delete pod "$victim" --wait=false >/dev/null
# Its grace period is 30 s; Luge drains on SIGTERM well before that.
kubectl wait --for=delete "pod/$victim" --timeout=60s >/dev/null ||
    fail "$victim was not deleted: $(kubectl get pod "$victim" -o jsonpath='{.status.containerStatuses[0].state}')"
echo "$victim gone after $((($(date +%s%N) - deleted_at) / 1000000)) ms"
expect_pods 2 "Hello from v2"

step "a container's process killed: restarted in its pod"
victim=$(kubectl get pods -l app=spin-app -o jsonpath='{.items[0].metadata.name}')
id=$(kubectl get pod "$victim" -o jsonpath='{.status.containerStatuses[0].containerID}')
pid=$(crictl inspect -o go-template --template '{{.info.pid}}' "${id#containerd://}")
kill -9 "$pid"
for _ in $(seq 300); do
    restarts=$(kubectl get pod "$victim" -o jsonpath='{.status.containerStatuses[0].restartCount}')
    ready=$(kubectl get pod "$victim" -o jsonpath='{.status.containerStatuses[0].ready}')
    [ "$restarts" -ge 1 ] && [ "$ready" = true ] && break
    sleep 0.2
done
[ "$restarts" -ge 1 ] && [ "$ready" = true ] || fail "$victim was not restarted ($restarts restarts)"
echo "$victim restarted ($restarts) and ready"
expect_pods 2 "Hello from v2"

step "the app as Spin's OCI layers: Deployment spin-oci-app (2 replicas)"
kubectl apply -f "$here/spin-oci-app.yaml" >/dev/null
kubectl rollout status deployment/spin-oci-app --timeout=180s >/dev/null ||
    fail "spin-oci-app did not roll out"
n=0
for ip in $(kubectl get pods -l app=spin-oci-app -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}'); do
    body=$(curl -sS --max-time 5 "http://$ip/hello") || fail "pod $ip did not answer"
    [ "$body" = "Hello, Spin app" ] || fail "pod $ip answered: $body"
    n=$((n + 1))
done
[ "$n" = 2 ] || fail "$n spin-oci-app pods answer, not 2"
echo "2 pods of the OCI image answer"
kubectl delete -f "$here/spin-oci-app.yaml" --wait=true --timeout=120s >/dev/null
kubectl wait --for=delete pod -l app=spin-oci-app --timeout=120s >/dev/null 2>&1 || true

step "the node installer (installer.yaml) on a node root of the check's own"
# The DaemonSet as shipped, its host path moved under $k8s, and told not
# to restart this machine's containerd (not the one the check runs).
node_root="$k8s/node-root"
mkdir -p "$node_root/usr/local/bin" "$node_root/etc/containerd"
printf 'version = 3\n' >"$node_root/etc/containerd/config.toml"
python3 - "$here/installer.yaml" "$node_root" >"$k8s/installer.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
for old, new in (("path: /\n", f"path: {sys.argv[2]}\n"),
                 ("              value: /host\n",
                  "              value: /host\n"
                  "            - name: LUGE_INSTALL_RESTART\n"
                  "              value: \"0\"\n")):
    assert old in text, old
    text = text.replace(old, new)
sys.stdout.write(text)
PY
kubectl apply -f "$k8s/installer.yaml" >/dev/null
kubectl -n kube-system rollout status daemonset/luge-node-installer --timeout=120s >/dev/null ||
    fail "the installer did not start"
installed() {
    kubectl -n kube-system logs daemonset/luge-node-installer 2>/dev/null | grep -q "luge runtime installed"
}
for _ in $(seq 150); do installed && break; sleep 0.2; done
installed || fail "the installer did not finish: $(kubectl -n kube-system logs daemonset/luge-node-installer 2>&1 | tail -3)"
cmp -s "$node_root/opt/luge/bin/containerd-shim-luge-v1" "$work/bin/containerd-shim-luge-v1" ||
    fail "the installer did not put the shim in /opt/luge/bin"
[ "$(readlink "$node_root/usr/local/bin/containerd-shim-luge-v1")" = /opt/luge/bin/containerd-shim-luge-v1 ] ||
    fail "the installer did not link the shim onto containerd's PATH"
grep -A1 "runtimes.luge\]" "$node_root/etc/containerd/config.toml"
# Run again (a node reboot, a new pod): nothing added twice.
kubectl -n kube-system delete pod -l app=luge-node-installer --wait=true >/dev/null
kubectl -n kube-system rollout status daemonset/luge-node-installer --timeout=120s >/dev/null
for _ in $(seq 150); do installed && break; sleep 0.2; done
[ "$(grep -c io.containerd.luge.v1 "$node_root/etc/containerd/config.toml")" = 1 ] ||
    fail "the installer added the runtime twice"
echo "the shim and the runtime luge installed, once"
kubectl delete -f "$k8s/installer.yaml" --wait=true --timeout=120s >/dev/null
kubectl -n kube-system wait --for=delete pod -l app=luge-node-installer --timeout=120s >/dev/null 2>&1 || true

step "delete it all"
kubectl delete -f "$here/spin-app.yaml" --wait=true --timeout=120s >/dev/null
kubectl wait --for=delete pod -l app=spin-app --timeout=120s >/dev/null 2>&1 || true
[ -z "$(kubectl get pods -A -o name)" ] || fail "pods left: $(kubectl get pods -A -o name)"
ready=$(crictl pods --state ready -q)
[ -z "$ready" ] || fail "pod sandboxes still ready in containerd: $ready"
stop_all
trap - EXIT
# The exited sandboxes the kubelet's garbage collection would have removed
# next (it keeps them a while for their logs).
crictl rmp -a >/dev/null

step "nothing left behind"
sleep 1
left=$(pgrep -f "containerd-shim-luge-v1 .*-id |kubelet --config $k8s|kube-apiserver --etcd-servers http://127.0.0.1:$etcd_port" || true)
[ -z "$left" ] || fail "processes left: $left"
mounts=$(grep -cF " $k8s/" /proc/self/mountinfo || true)
[ "$mounts" = 0 ] || fail "$mounts mounts left under $k8s"
cgroups=$(find /sys/fs/cgroup -maxdepth 2 -name kubepods 2>/dev/null | head -3)
[ -z "$cgroups" ] || fail "cgroups left: $cgroups"
for i in "${!tunables[@]}"; do
    [ "$(cat "/proc/sys/${tunables[$i]}")" = "${saved[$i]}" ] || fail "${tunables[$i]} not put back"
done
echo "no process, mount, cgroup or kernel tunable left changed"
