#!/usr/bin/env bash
# Pod start to first answer, and memory per pod, through the CRI as
# kubelet drives it: the same Spin app (actions/spin) four ways, ROUNDS
# pods each (default 5), one at a time, each in a pod of its own:
#
#   oci-new     Luge's shim, the app as Spin's OCI layers, an image no pod
#               has run (the shim compiles its component first);
#   oci-cached  the same image again (the compiled artifact comes from
#               containerd's content store);
#   files       Luge's shim, the app as files (spin.toml at the root;
#               `luge serve` compiles in the container);
#   runc        runc, a scratch image holding the static `luge` binary and
#               the same files, serving them with the same flags.
#
# The time runs from `crictl runp` to the first 200 on GET /hello (polled
# every 10 ms); memory is the container's working set (`crictl stats`,
# what `kubectl top pod` shows) after 200 requests, and the RSS of the
# pod's shim process on the node. Run by check.sh with LUGE_K8S_MEASURE=1
# (containerd up); LUGE_STATIC_LUGE names the static binary:
#
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile bench \
#       -p luge-executor --bin luge --target x86_64-unknown-linux-gnu
#
#   measure.sh WORK
set -euo pipefail
work="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rounds="${ROUNDS:-5}"
luge="${LUGE_STATIC_LUGE:?the static luge binary (see the header)}"
ctr_=(ctr --address "${CONTAINER_RUNTIME_ENDPOINT#unix://}" -n k8s.io)
fail() {
    echo "measure: $*" >&2
    exit 1
}

# The runc image: the static binary beside the app's files, nothing else.
root="$work/runc-root"
rm -rf "$root" && cp -a "$work/app-root" "$root"
sed -i 's/^greeting = { default = "Hello from v2" }$/greeting = { default = "Hello" }/' "$root/spin.toml"
cp "$luge" "$root/luge"
entrypoint=()
for arg in /luge serve --spin /spin.toml --listen 0.0.0.0:80 --state-dir /luge-state \
    --cache-dir /luge-state/cache; do
    entrypoint+=("--entrypoint=$arg")
done
"$here/oci-image.py" "$work/images/luge-runc.tar" luge.local/luge-runc:v1 --layer "$root" "${entrypoint[@]}"
"${ctr_[@]}" images import "$work/images/luge-runc.tar" >/dev/null 2>>"$work/logs/ctr.log"

# variant, round: one pod, timed; prints "ms working-set-bytes shim-rss-kib"
pod_once() {
    local variant="$1" round="$2" runtime=luge image command='' pod ctr_id ip started ms
    case "$variant" in
    oci-new | oci-cached) image=luge.local/spin-oci-measure:v1 command='"command": ["/"],' ;;
    files) image=luge.local/spin-app:v1 ;;
    runc) image=luge.local/luge-runc:v1 runtime=runc ;;
    esac
    cat >"$work/measure-pod.json" <<JSON
{"metadata": {"name": "measure-$variant-$round", "namespace": "default", "uid": "measure-$variant-$round-$$"},
 "log_directory": "$work/logs/measure", "linux": {}}
JSON
    cat >"$work/measure-app.json" <<JSON
{"metadata": {"name": "app"}, $command "image": {"image": "$image"},
 "envs": [{"key": "SPIN_VARIABLE_UPSTREAM", "value": "http://127.0.0.1:1"}],
 "log_path": "$variant-$round.log",
 "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 100000, "memory_limit_in_bytes": 268435456},
           "security_context": {"namespace_options": {"pid": 1}}}}
JSON
    mkdir -p "$work/logs/measure"
    started=$(date +%s%N)
    pod=$(crictl runp --runtime "$runtime" "$work/measure-pod.json")
    ctr_id=$(crictl create "$pod" "$work/measure-app.json" "$work/measure-pod.json")
    crictl start "$ctr_id" >/dev/null
    ip=$(crictl inspectp -o go-template --template '{{.status.network.ip}}' "$pod")
    for _ in $(seq 3000); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://$ip/hello")" = 200 ] && break
        sleep 0.01
    done
    ms=$((($(date +%s%N) - started) / 1000000))
    [ "$(curl -sS --max-time 2 "http://$ip/hello")" = "Hello, Spin app" ] ||
        fail "$variant: the pod did not answer"
    for _ in $(seq 200); do curl -s -o /dev/null "http://$ip/hello"; done
    local stats shim_pid rss
    stats=$(crictl stats -o json --id "$ctr_id" 2>/dev/null |
        python3 -c 'import json,sys; s=json.load(sys.stdin)["stats"][0]; print(s["memory"]["workingSetBytes"]["value"])')
    shim_pid=$(pgrep -f "containerd-shim-(luge-v1|runc-v2).*-id $pod" | head -1)
    rss=$(ps -o rss= -p "$shim_pid" 2>/dev/null | tr -d ' ')
    crictl stopp "$pod" >/dev/null && crictl rmp "$pod" >/dev/null
    echo "$ms $stats ${rss:-0}"
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

echo "variant      start-to-answer ms (median, min..max)  working set MiB  shim RSS MiB"
for variant in oci-new oci-cached files runc; do
    : >"$work/measure-$variant.txt"
    for round in $(seq "$rounds"); do
        if [ "$variant" = oci-new ]; then
            # A new image each round: its first pod compiles.
            "$here/spin-oci.py" "$work/images/spin-oci-measure.tar" luge.local/spin-oci-measure:v1 \
                "$work/app-root/spin.toml" --build-id "measure-$(date +%s%N)" --set-default greeting=Hello
            "${ctr_[@]}" images import "$work/images/spin-oci-measure.tar" >/dev/null 2>>"$work/logs/ctr.log"
        fi
        pod_once "$variant" "$round" >>"$work/measure-$variant.txt"
    done
    t=$(awk '{print $1}' "$work/measure-$variant.txt" | median)
    lo=$(awk '{print $1}' "$work/measure-$variant.txt" | sort -n | head -1)
    hi=$(awk '{print $1}' "$work/measure-$variant.txt" | sort -n | tail -1)
    ws=$(awk '{print $2}' "$work/measure-$variant.txt" | median)
    rss=$(awk '{print $3}' "$work/measure-$variant.txt" | median)
    awk -v v="$variant" -v t="$t" -v lo="$lo" -v hi="$hi" -v ws="$ws" -v rss="$rss" \
        'BEGIN {printf "%-12s %6s (%s..%s)%27.1f %13.1f\n", v, t, lo, hi, ws / 1048576, rss / 1024}'

done
