#!/usr/bin/env bash
# The CRI calls kubelet makes, by hand: a pod sandbox on the runtime
# handler `luge`, a Spin app's container in it, a request to the pod's
# address, its logs, stop and remove, then nothing left behind. Run by
# check.sh with containerd up (CONTAINER_RUNTIME_ENDPOINT set).
#
#   crictl-path.sh WORK IMAGE
set -euo pipefail
work="$1"
image="$2"
step() { echo "== crictl: $*"; }
fail() {
    echo "crictl path: $*" >&2
    exit 1
}

cat >"$work/pod.json" <<JSON
{
  "metadata": {"name": "luge-check", "namespace": "default", "uid": "luge-check-$$", "attempt": 0},
  "log_directory": "$work/logs/pod",
  "linux": {}
}
JSON
cat >"$work/app.json" <<JSON
{
  "metadata": {"name": "app"},
  "image": {"image": "$image"},
  "envs": [
    {"key": "SPIN_VARIABLE_GREETING", "value": "Hello from a pod"},
    {"key": "SPIN_VARIABLE_UPSTREAM", "value": "http://127.0.0.1:1"}
  ],
  "log_path": "app.log",
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 100000, "memory_limit_in_bytes": 536870912}}
}
JSON
mkdir -p "$work/logs/pod"

step "runp --runtime luge"
pod=$(crictl runp --runtime luge "$work/pod.json")
step "create, start"
ctr_id=$(crictl create "$pod" "$work/app.json" "$work/pod.json")
crictl start "$ctr_id" >/dev/null
ip=$(crictl inspectp -o go-template --template '{{.status.network.ip}}' "$pod")
[ -n "$ip" ] || fail "the pod has no address"
echo "pod $pod at $ip, container $ctr_id"

step "curl http://$ip/hello"
body=""
for _ in $(seq 100); do
    body=$(curl -sS --max-time 2 "http://$ip/hello" 2>/dev/null) && break
    sleep 0.2
done
echo "$body"
[ "$body" = "Hello from a pod, Spin app" ] || {
    crictl logs "$ctr_id" 2>&1 | tail -20
    fail "expected the app's greeting from the pod's env, got: $body"
}

step "an image with no app: refused, and the pod goes on"
sed "s|$image|luge.local/empty:v1|; s|\"name\": \"app\"|\"name\": \"empty\"|; s|app.log|empty.log|" \
    "$work/app.json" >"$work/empty.json"
bad=$(crictl create "$pod" "$work/empty.json" "$work/pod.json")
if why=$(crictl start "$bad" 2>&1); then
    fail "a container with no app started"
fi
echo "$why" | tail -1 | sed 's/.*desc = //' | cut -c1-240
crictl rm "$bad" >/dev/null
curl -sS --max-time 2 "http://$ip/hello" >/dev/null || fail "the pod's app stopped answering"

step "logs"
crictl logs "$ctr_id" 2>&1 | tail -5
crictl logs "$ctr_id" 2>&1 | grep -q "listening" || fail "the container's log lacks luge's listening line"

step "stop, rm"
crictl stop "$ctr_id" >/dev/null
state=$(crictl inspect -o go-template --template '{{.status.state}}' "$ctr_id")
[ "$state" = CONTAINER_EXITED ] || fail "container state after stop: $state"
crictl rm "$ctr_id" >/dev/null
netns=$(crictl inspectp -o go-template --template '{{range .info.runtimeSpec.linux.namespaces}}{{if eq .type "network"}}{{.path}}{{end}}{{end}}' "$pod" 2>/dev/null || true)
crictl stopp "$pod" >/dev/null
crictl rmp "$pod" >/dev/null

step "nothing left behind"
sleep 1
left=$(pgrep -f "containerd-shim-luge-v1.*$pod" || true)
[ -z "$left" ] || fail "shim processes left: $left"
mounts=$(grep -c "$pod\|$ctr_id" /proc/self/mountinfo || true)
[ "$mounts" = 0 ] || fail "$mounts mounts left"
if [ -n "$netns" ] && [ -e "$netns" ]; then fail "network namespace $netns left"; fi
cgroups=$(find /sys/fs/cgroup -name "*$ctr_id*" 2>/dev/null | head -3)
[ -z "$cgroups" ] || fail "cgroups left: $cgroups"
echo "no process, mount, cgroup or network namespace left"
