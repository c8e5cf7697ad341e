#!/usr/bin/env bash
# Packs the scaling table and the engine's lifecycle benchmarks into one
# folder for a machine with neither a toolchain nor a network (a lent
# many-core machine, a Raspberry Pi of the same architecture): the
# `luge-bench` binary and the `lifecycle` criterion bench, built here in
# the bench profile, stripped and compressed; the .wasm they load; the
# `wasmtime` CLI they compare with (when ./scripts/setup.sh installed it);
# and `run.sh`, which unpacks them and runs the measurements.
#
#   scripts/bench-bundle.sh DIR          # about 40 MiB with the wasmtime CLI
#   DIR/run.sh RESULTS [--cores 1,8] [--only workers]
#
# run.sh writes into RESULTS: the machine (uname, lscpu, the bundle's
# commit), `luge-bench scaling` with the rounds' medians (ROUNDS, default
# 2, of SECONDS_PER_POINT, default 3; other flags are passed on), and the
# lifecycle bench on one thread and on every core at once (LIFECYCLE=0
# leaves it out).
set -euo pipefail
out=${1:?usage: scripts/bench-bundle.sh DIR}
cd "$(dirname "$0")/.."
[ -f target/wasm/http-handler.wasm ] || ./scripts/build-actions.sh
cargo build --profile bench -p luge-benches --bin luge-bench
lifecycle=$(cargo bench -p luge-benches --bench lifecycle --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "lifecycle" and m.get("executable"):
        print(m["executable"])')
[ -n "$lifecycle" ] || { echo "bench-bundle: no lifecycle bench binary was built" >&2; exit 1; }

mkdir -p "$out/bin" "$out/built/wasm"
pack() { # SOURCE NAME: stripped, then xz
    strip -o "$out/bin/$2" "$1"
    xz -T0 -6 -f "$out/bin/$2"
}
pack target/release/luge-bench luge-bench
pack "$lifecycle" lifecycle
# The scaling table's two (c-ping, the `actions/http` hello) and what the
# lifecycle bench's groups load.
for name in c-ping http-handler noop c-hello echo big; do
    cp "target/wasm/$name.wasm" "$out/built/wasm/"
done
if [ -x target/tools/wasmtime ]; then
    pack target/tools/wasmtime wasmtime
else
    echo "bench-bundle: no target/tools/wasmtime (./scripts/setup.sh): the wasmtime serve rows will fail" >&2
fi
git rev-parse HEAD > "$out/commit"
git status --porcelain | grep -q . && echo "(with uncommitted changes)" >> "$out/commit"

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Unpacks the bundle beside this script and runs its measurements (see
# scripts/bench-bundle.sh in Luge's repository).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${1:?usage: run.sh RESULTS [luge-bench scaling flags]}
shift
mkdir -p "$results"
results=$(cd "$results" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for packed in "$here"/bin/*.xz; do
    name=$(basename "$packed" .xz)
    xz -dc "$packed" > "$work/$name"
    chmod +x "$work/$name"
done
export LUGE_BUILT_DIR="$here/built"
[ -x "$work/wasmtime" ] && export LUGE_BENCH_WASMTIME="$work/wasmtime"
{
    echo "bundle: $(cat "$here/commit")"
    date -u
    uname -a
    lscpu 2>/dev/null || true
    # The kernel's flags (a guest's virtualisation mode, idle polling)
    # and the host's steal so far, per CPU (the eighth number).
    cat /proc/cmdline 2>/dev/null || true
    grep '^cpu' /proc/stat 2>/dev/null || true
} > "$results/machine.txt"
"$work/luge-bench" scaling --seconds "${SECONDS_PER_POINT:-3}" --rounds "${ROUNDS:-2}" \
    --out "$results" "$@" 2>&1 | tee "$results/scaling.txt"
if [ "${LIFECYCLE:-1}" != 0 ]; then
    # criterion writes its reports under the working folder.
    (cd "$work" && "$work/lifecycle" --bench "http-handler" --measurement-time 3 --noplot) \
        2>&1 | tee "$results/lifecycle.txt"
fi
RUN
chmod +x "$out/run.sh"
du -sh "$out"
