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
# Each container its own PID namespace (CONTAINER), as kubelet gives a
# pod's containers unless the pod sets shareProcessNamespace: on cgroup v1
# libcontainer 0.6 cannot start a second container in a pod-wide one (it
# looks its parent up in the host's /proc).
cat >"$work/app.json" <<JSON
{
  "metadata": {"name": "app"},
  "image": {"image": "$image"},
  "envs": [
    {"key": "SPIN_VARIABLE_GREETING", "value": "Hello from a pod"},
    {"key": "SPIN_VARIABLE_UPSTREAM", "value": "http://127.0.0.1:1"}
  ],
  "log_path": "app.log",
  "linux": {
    "resources": {"cpu_period": 100000, "cpu_quota": 100000, "memory_limit_in_bytes": 536870912},
    "security_context": {"namespace_options": {"pid": 1}}
  }
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

# An image of layers has no entrypoint: the pod names one, `/`, as
# SpinKube's do.
step "the app as Spin's OCI layers: compiled by the first container, loaded by the next"
# runwasi marks an image's manifest in the content store once the shim
# has compiled its layers.
compiled() {
    local ctr_=(ctr --address "${CONTAINER_RUNTIME_ENDPOINT#unix://}" -n k8s.io) digest
    digest=$("${ctr_[@]}" images ls name==luge.local/spin-oci:v1 2>/dev/null | awk 'NR == 2 {print $3}')
    [ -n "$digest" ] || fail "no image luge.local/spin-oci:v1"
    "${ctr_[@]}" content ls 2>/dev/null | grep "^$digest" | grep -c "runwasi.io/precompiled/luge/" || true
}
[ "$(compiled)" = 0 ] || fail "the new image is marked compiled before any container ran"
for round in 1 2; do
    port=$((8080 + round))
    sed "s|$image|luge.local/spin-oci:v1|; s|\"name\": \"app\"|\"name\": \"oci-$round\"|; s|app.log|oci-$round.log|; s|\"image\": {|\"command\": [\"/\"], \"image\": {|; s|\"envs\": \[|\"envs\": [{\"key\": \"SPIN_HTTP_LISTEN_ADDR\", \"value\": \"0.0.0.0:$port\"},|" \
        "$work/app.json" >"$work/oci-$round.json"
    started=$(date +%s%N)
    oci=$(crictl create "$pod" "$work/oci-$round.json" "$work/pod.json")
    crictl start "$oci" >/dev/null
    body=""
    for _ in $(seq 500); do
        body=$(curl -sS --max-time 2 "http://$ip:$port/hello" 2>/dev/null) && break
        sleep 0.02
    done
    ms=$((($(date +%s%N) - started) / 1000000))
    [ "$body" = "Hello from a pod, Spin app" ] || {
        crictl logs "$oci" 2>&1 | tail -5
        fail "the OCI app answered: $body"
    }
    echo "container $round: create to first answer ${ms} ms"
    eval "oci_$round=$oci"
    if [ "$round" = 1 ]; then
        # The first container had the shim compile the component; runwasi
        # marks the image, and keeps the artifact in the content store.
        [ "$(compiled)" = 1 ] || fail "the image was not compiled by its first container"
        echo "the image is marked compiled in containerd's content store"
    fi
done
crictl logs "$oci_2" 2>&1 | grep -q "listening" || fail "the second container's log lacks luge's listening line"
for oci in "$oci_1" "$oci_2"; do
    crictl stop "$oci" >/dev/null && crictl rm "$oci" >/dev/null
done

step "bad input as layers: status 1, the reason in the container's log"
for bad in bad-trigger bad-module; do
    sed "s|$image|luge.local/$bad:v1|; s|\"name\": \"app\"|\"name\": \"$bad\"|; s|app.log|$bad.log|; s|\"image\": {|\"command\": [\"/\"], \"image\": {|" \
        "$work/app.json" >"$work/$bad.json"
    id=$(crictl create "$pod" "$work/$bad.json" "$work/pod.json")
    crictl start "$id" >/dev/null
    for _ in $(seq 250); do
        [ "$(crictl inspect -o go-template --template '{{.status.state}}' "$id")" = CONTAINER_EXITED ] && break
        sleep 0.04
    done
    code=$(crictl inspect -o go-template --template '{{.status.exitCode}}' "$id")
    [ "$code" = 1 ] || fail "$bad: exit status $code, not 1"
    why=$(crictl logs "$id" 2>&1 | grep "luge: error" | tail -1)
    [ -n "$why" ] || fail "$bad: no reason in the container's log"
    echo "$bad: ${why:0:200}"
    crictl rm "$id" >/dev/null
done
curl -sS --max-time 2 "http://$ip/hello" >/dev/null || fail "the pod's app stopped answering"

step "a container killed mid-request: the request is answered, the pod goes on"
# A slow upstream on the bridge's own address (this machine): the app's
# /fetch waits 2 s on it while the container is told to stop.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("10.244.77.1", 0)); print(s.getsockname()[1])')
python3 - "$port" <<'PY' &
import http.server, sys, time
class Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(2)
        body = b"slow upstream"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("10.244.77.1", int(sys.argv[1])), Slow)
server.timeout = 30
server.handle_request()
PY
slow=$!
sed "s|\"name\": \"app\"|\"name\": \"slow\"|; s|app.log|slow.log|; s|http://127.0.0.1:1|http://10.244.77.1:$port|; s|\"envs\": \[|\"envs\": [{\"key\": \"SPIN_HTTP_LISTEN_ADDR\", \"value\": \"0.0.0.0:8090\"},|" \
    "$work/app.json" >"$work/slow.json"
id=$(crictl create "$pod" "$work/slow.json" "$work/pod.json")
crictl start "$id" >/dev/null
for _ in $(seq 250); do
    curl -sf --max-time 1 -o /dev/null "http://$ip:8090/hello" && break
    sleep 0.02
done
curl -sS --max-time 20 "http://$ip:8090/fetch" >"$work/slow.out" 2>&1 &
request=$!
sleep 0.5
crictl stop --timeout 10 "$id" >/dev/null
wait "$request" || true
wait "$slow" || true
echo "the request in flight got: $(cat "$work/slow.out")"
grep -q "slow upstream" "$work/slow.out" || fail "the request in flight was not answered"
[ "$(crictl inspect -o go-template --template '{{.status.exitCode}}' "$id")" = 0 ] ||
    fail "the drained container did not exit cleanly"
crictl rm "$id" >/dev/null
curl -sS --max-time 2 "http://$ip/hello" >/dev/null || fail "the pod's app stopped answering"

step "a container short of memory: killed by its cgroup, the pod goes on"
sed "s|\"name\": \"app\"|\"name\": \"starved\"|; s|app.log|starved.log|; s|\"memory_limit_in_bytes\": 536870912|\"memory_limit_in_bytes\": 8388608|; s|\"envs\": \[|\"envs\": [{\"key\": \"SPIN_HTTP_LISTEN_ADDR\", \"value\": \"0.0.0.0:8091\"},|" \
    "$work/app.json" >"$work/starved.json"
grep -q 8388608 "$work/starved.json" || fail "no 8 MiB limit in the config"
id=$(crictl create "$pod" "$work/starved.json" "$work/pod.json")
crictl start "$id" >/dev/null 2>&1 || true
for _ in $(seq 250); do
    [ "$(crictl inspect -o go-template --template '{{.status.state}}' "$id")" = CONTAINER_EXITED ] && break
    sleep 0.04
done
state=$(crictl inspect -o go-template --template '{{.status.state}} {{.status.exitCode}} {{.status.reason}}' "$id")
echo "8 MiB container: $state"
# runc reports such a container OOMKilled; runwasi's shim on cgroup v1
# reports the SIGKILL (137) without the reason, which the kernel's log
# gives (the container's memory cgroup out of memory).
case "$state" in
CONTAINER_EXITED\ 137\ *) ;;
*) fail "expected the container killed (137), got: $state" ;;
esac
if dmesg >/dev/null 2>&1; then
    dmesg | grep "oom_memcg=.*$id" | tail -1 | cut -c1-160
    dmesg | grep -q "oom_memcg=.*$id" || fail "no memory cgroup OOM for the container in the kernel's log"
fi
crictl rm "$id" >/dev/null
curl -sS --max-time 2 "http://$ip/hello" >/dev/null || fail "the pod's app stopped answering"

step "logs"
crictl logs "$ctr_id" 2>&1 | tail -5
crictl logs "$ctr_id" 2>&1 | grep -q "listening" || fail "the container's log lacks luge's listening line"
# The container's 512 MiB limit bounds its sandboxes: a quarter each by
# default, half at most.
crictl logs "$ctr_id" 2>&1 | grep -q -- "--memory-mb 128 --max-memory-mb 256" ||
    fail "the container's memory limit did not reach luge serve"

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
