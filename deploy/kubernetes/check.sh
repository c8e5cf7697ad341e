#!/usr/bin/env bash
# Luge on Kubernetes, checked on this machine, two ways: the CRI path
# kubelet takes, driven by hand with crictl against containerd v2.4 with
# Luge's shim (containerd-shim-luge-v1) as the runtime handler `luge`
# (crictl-path.sh); then a single-node Kubernetes v1.34 built from source
# on the same containerd, running the repository's manifests
# (kubelet-path.sh).
#
#   deploy/kubernetes/check.sh
#
# Builds what it needs, each step skipped when done (target/tools/k8s:
# containerd, ctr, the runc shim, crictl, the CNI plugins, Kubernetes and
# etcd from the Go module proxy, deploy/kubernetes/build-tools.sh; the
# shim with cargo; the
# pause image from deploy/kubernetes/pause; the app images as OCI tarballs,
# deploy/kubernetes/oci-image.py), starts containerd on sockets of its own
# under LUGE_K8S_WORK (default target/k8s), runs pods both ways, stops all
# of it, and checks nothing is left behind.
#
# It needs root (containerd, namespaces, a bridge), Go and Debian's runc.
# Without them, or run by scripts/test.sh (CI) without LUGE_K8S_CHECK=1,
# it prints SKIPPED and the reason, and exits 0, as the OpenWhisk checks
# do.
#
# The pod network is a bridge this script creates (luge-k8s0,
# 10.244.77.0/24), no masquerade and no route beyond it: traffic goes only
# between this machine and the pods' addresses.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${LUGE_K8S_WORK:-$repo/target/k8s}"

skip() {
    echo "deploy/kubernetes/check.sh: SKIPPED: $*"
    exit 0
}
[ "${LUGE_K8S_CHECK:-1}" = 1 ] || skip "LUGE_K8S_CHECK=1 runs it (root, runc and about 20 minutes of Go builds the first time: scripts/test.sh and CI leave it out)"
[ "$(id -u)" -eq 0 ] || skip "containerd and pod networks need root"
command -v go >/dev/null || skip "Go is needed to build containerd, crictl and the CNI plugins"
command -v runc >/dev/null || skip "runc is needed (Debian's package runc)"
command -v ip >/dev/null || skip "iproute2 is needed"
command -v openssl >/dev/null || skip "openssl is needed (the cluster's certificates)"
command -v busybox >/dev/null || skip "a static busybox is needed (the node installer's image; ./scripts/setup.sh)"

step() { echo "== $*"; }

step "node tools (containerd v2.4.2, crictl v1.37.0, CNI plugins v1.10.0, Kubernetes v1.34.4, etcd v3.6.16)"
"$here/build-tools.sh" --kubernetes
tools="$repo/target/tools/k8s"
# The elastic part (autoscaling/check.sh: KEDA, Prometheus, KEDA's HTTP
# add-on, spin-operator) needs the two checkouts that are not on the Go
# module proxy.
autoscaling_tools=(keda-operator keda-adapter prometheus keda-http-interceptor keda-http-scaler spin-operator)
if [ -n "${KEDA_HTTP_ADD_ON_SRC:-}" ] && [ -n "${SPIN_OPERATOR_SRC:-}" ]; then
    step "autoscaling tools (KEDA v2.21.0, Prometheus v0.316.0, KEDA's HTTP add-on, spin-operator)"
    "$here/build-tools.sh" --autoscaling
    export LUGE_K8S_AUTOSCALING=1
else
    echo "autoscaling: SKIPPED: KEDA_HTTP_ADD_ON_SRC and SPIN_OPERATOR_SRC name checkouts of kedacore/http-add-on and spinkube/spin-operator (deploy/kubernetes/build-tools.sh says which commits)"
    autoscaling_tools=()
fi

step "the shim (containerd-shim-luge-v1)"
# LUGE_SHIM_BIN: a shim built already (a release build, say).
shim="${LUGE_SHIM_BIN:-$repo/target/debug/containerd-shim-luge-v1}"
if [ -z "${LUGE_SHIM_BIN:-}" ]; then
    (cd "$repo" && cargo build --quiet -p containerd-shim-luge --bin containerd-shim-luge-v1)
fi

mkdir -p "$work"/{bin,images,logs,cni/net.d,pause-root,app-root}
for tool in containerd ctr containerd-shim-runc-v2 crictl etcd kube-apiserver \
    kube-controller-manager kube-scheduler kubelet kubectl "${autoscaling_tools[@]}"; do
    ln -sf "$tools/bin/$tool" "$work/bin/$tool"
done
cp "$shim" "$work/bin/containerd-shim-luge-v1"
export PATH="$work/bin:$PATH"

step "images (OCI tarballs: the pause image from source, a Spin app)"
pause_image=registry.k8s.io/pause:3.10
if [ ! -f "$work/images/pause.tar" ] || [ "$here/pause/pause.c" -nt "$work/images/pause.tar" ]; then
    cc -static -O2 -o "$work/pause-root/pause" "$here/pause/pause.c"
    "$here/oci-image.py" "$work/images/pause.tar" "$pause_image" \
        --layer "$work/pause-root" --entrypoint /pause
fi
app_image=luge.local/spin-app:v1
wasm="$repo/actions/spin/target/wasm32-wasip2/release/luge_spin_app.wasm"
[ -f "$wasm" ] || "$repo/scripts/build-actions.sh" >/dev/null
rm -rf "$work/app-root" && mkdir -p "$work/app-root/target/wasm32-wasip2/release"
cp "$repo/actions/spin/spin.toml" "$work/app-root/spin.toml"
cp "$wasm" "$work/app-root/target/wasm32-wasip2/release/"
"$here/oci-image.py" "$work/images/spin-app.tar" "$app_image" \
    --layer "$work/app-root" --entrypoint /spin.toml
# Its next version, for a rolling update: another default greeting.
sed -i 's/^greeting = { default = "Hello" }$/greeting = { default = "Hello from v2" }/' "$work/app-root/spin.toml"
grep -q "Hello from v2" "$work/app-root/spin.toml"
"$here/oci-image.py" "$work/images/spin-app-v2.tar" luge.local/spin-app:v2 \
    --layer "$work/app-root" --entrypoint /spin.toml

# The same app as `spin registry push` lays it out: the app as layers.
# A new image each run, so its first container compiles.
"$here/spin-oci.py" "$work/images/spin-oci.tar" luge.local/spin-oci:v1 "$repo/actions/spin/spin.toml" \
    --build-id "$(date +%s%N)"

# A Spin app of two components with no chaining between them, as Spin's
# OCI layers (spinapp.yaml's SpinApp keeps one of them).
mkdir -p "$work/spin-two"
cp "$wasm" "$work/spin-two/app.wasm"
cat >"$work/spin-two/spin.toml" <<'TOML'
spin_manifest_version = 2

[application]
name = "spin-two"

[variables]
greeting = { default = "Hello" }

[[trigger.http]]
route = "/..."
component = "app"

[[trigger.http]]
route = "/other/..."
component = "other"

[component.app]
source = "app.wasm"
key_value_stores = ["default"]
sqlite_databases = ["default"]

[component.app.variables]
greeting = "{{ greeting }}"

[component.other]
source = "app.wasm"

[component.other.variables]
greeting = "Other"
TOML
"$here/spin-oci.py" "$work/images/spin-two.tar" luge.local/spin-two:v1 "$work/spin-two/spin.toml"

# Bad input as layers: a trigger Luge lacks, and a module that does not
# compile (it passes the shim's compiler by, and `luge serve` says why).
mkdir -p "$work/bad-trigger" "$work/bad-module"
cp "$wasm" "$work/bad-trigger/app.wasm"
printf '\0asm\1\0\0\0this is no module' >"$work/bad-module/app.wasm"
for bad in bad-trigger bad-module; do
    if [ "$bad" = bad-trigger ]; then
        trigger='[[trigger.sqs]]
queue_url = "https://sqs.example/queue"'
    else
        trigger='[[trigger.http]]
route = "/..."'
    fi
    cat >"$work/$bad/spin.toml" <<TOML
spin_manifest_version = 2

[application]
name = "$bad"

$trigger
component = "app"

[component.app]
source = "app.wasm"
TOML
    "$here/spin-oci.py" "$work/images/$bad.tar" "luge.local/$bad:v1" "$work/$bad/spin.toml"
done

# The node installer's image (installer.yaml): install.sh, the shim, and
# a static busybox as its shell and tools.
rm -rf "$work/installer-root" && mkdir -p "$work/installer-root/bin"
cp "$here/install.sh" "$work/installer-root/install.sh"
cp "$shim" "$work/installer-root/bin/containerd-shim-luge-v1"
cp "$(command -v busybox)" "$work/installer-root/bin/busybox"
for applet in sh sleep mkdir cp mv cmp ln grep printf cat dirname nsenter; do
    ln -s busybox "$work/installer-root/bin/$applet"
done
"$here/oci-image.py" "$work/images/installer.tar" luge.local/luge-node-installer:v1 \
    --layer "$work/installer-root" --env PATH=/bin

# An image with no app in it (bad input: refused with the reason).
mkdir -p "$work/empty-root" && echo "no app here" >"$work/empty-root/README"
"$here/oci-image.py" "$work/images/empty.tar" luge.local/empty:v1 \
    --layer "$work/empty-root" --entrypoint /app.wasm

step "the pod network (bridge luge-k8s0, 10.244.77.0/24, no masquerade)"
# Made here, with the gateway's address, before any pod: the kubelet's
# node address is the bridge's (a node address may not be loopback).
ip link del luge-k8s0 2>/dev/null || true
ip link add luge-k8s0 type bridge
ip addr add 10.244.77.1/24 dev luge-k8s0
ip link set luge-k8s0 up
cni_bin="$tools/cni"
cat >"$work/cni/net.d/10-luge.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "luge-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "luge-k8s0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.77.0/24"}]],
        "dataDir": "$work/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": false}
  ]
}
CNI

step "containerd (its own root, state and sockets under $work)"
sock="$work/containerd.sock"
cat >"$work/containerd.toml" <<TOML
version = 3
root = "$work/containerd/root"
state = "$work/containerd/state"

[grpc]
  address = "$sock"

[ttrpc]
  address = "$work/containerd-ttrpc.sock"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pause_image"

[plugins.'io.containerd.cri.v1.runtime']
  # Pods' oom_score_adj no lower than containerd's own: where the host
  # withholds CAP_SYS_RESOURCE (this VM), runc cannot lower it (the
  # sandbox asks -998) and every pod fails to start.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$cni_bin"]
    conf_dir = "$work/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.luge]
      runtime_type = "io.containerd.luge.v1"

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
TOML
containerd_pid=""
cleanup() {
    set +e
    if [ -n "$containerd_pid" ]; then
        crictl --runtime-endpoint "unix://$sock" rmp -fa >/dev/null 2>&1
        kill "$containerd_pid" 2>/dev/null
        wait "$containerd_pid" 2>/dev/null
    fi
    # Shims a failed run left behind (their containerd gone), and what
    # they started.
    local shim
    for shim in $(pgrep -f -- "-address $sock"); do
        pkill -9 -P "$shim" 2>/dev/null
        kill -9 "$shim" 2>/dev/null
    done
    grep -F " $work/containerd/state/" /proc/self/mountinfo | awk '{print $5}' | sort -r |
        xargs -r umount 2>/dev/null
    ip link del luge-k8s0 2>/dev/null
}
trap cleanup EXIT
# containerd's state is what a reboot clears (tasks, their mounts): what a
# failed run left there goes, so this containerd does not wait on its dead
# shims. Its root (images, content, the compiled components) stays.
grep -F " $work/containerd/state/" /proc/self/mountinfo | awk '{print $5}' | sort -r |
    xargs -r umount 2>/dev/null || true
rm -rf "$work/containerd/state"
# The node's artifact key, which the shim seals compiled components with.
RUST_LOG="${LUGE_SHIM_LOG:-error}" LUGE_SHIM_KEY_FILE="$work/shim.key" containerd --config "$work/containerd.toml" >"$work/logs/containerd.log" 2>&1 &
containerd_pid=$!
# Up to 30 s: a containerd cleaning up after a failed run takes a while.
for _ in $(seq 300); do
    [ -S "$sock" ] && ctr --address "$sock" version >/dev/null 2>&1 && break
    sleep 0.1
done
ctr --address "$sock" version >/dev/null 2>>"$work/logs/ctr.log" || {
    tail -20 "$work/logs/containerd.log"
    echo "containerd did not start" >&2
    exit 1
}
export CONTAINER_RUNTIME_ENDPOINT="unix://$sock" IMAGE_SERVICE_ENDPOINT="unix://$sock"
# crictl's own config, so it looks for none elsewhere.
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$sock" "$sock" >"$work/crictl.yaml"
export CRI_CONFIG_FILE="$work/crictl.yaml"
for image in pause spin-app spin-app-v2 spin-oci spin-two bad-trigger bad-module empty installer; do
    ctr --address "$sock" -n k8s.io images import "$work/images/$image.tar" >/dev/null 2>>"$work/logs/ctr.log"
done

# LUGE_K8S_STEPS=autoscaling: only the cluster and its elastic part (a
# shorter loop while working on it).
if [ "${LUGE_K8S_STEPS:-all}" = all ]; then
    "$here/crictl-path.sh" "$work" "$app_image"
fi
# Measurements (docs/BENCHMARKS.md): only when asked, with release builds.
if [ "${LUGE_K8S_MEASURE:-0}" = 1 ]; then
    "$here/measure.sh" "$work"
fi
"$here/kubelet-path.sh" "$work"
echo "deploy/kubernetes/check.sh: PASSED"
