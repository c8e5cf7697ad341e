#!/usr/bin/env bash
# Packs the scaling table and the engine's lifecycle benchmarks into one
# folder for a machine with neither a toolchain nor a network (a lent
# many-core machine, a Raspberry Pi of the same architecture): the
# `luge-bench` binary and the `lifecycle` criterion bench, built here in
# the dist profile (what ships: about 15 % less CPU per request than
# the bench profile), stripped and compressed; the .wasm they load; the
# `wasmtime` CLI they compare with (when ./scripts/setup.sh installed it);
# and `run.sh`, which unpacks them and runs the measurements.
#
#   scripts/bench-bundle.sh DIR          # about 40 MiB with the wasmtime CLI and perf
#   PGO=1 scripts/bench-bundle.sh DIR    # luge-bench built by scripts/pgo.sh
#   DIR/run.sh RESULTS [--cores 1,8] [--only workers]
#
# run.sh writes into RESULTS: the machine (uname, lscpu, the bundle's
# commit, the clock source and how an idle vCPU waits), `luge-bench
# scaling` with the rounds' medians (ROUNDS, default 2, of
# SECONDS_PER_POINT, default 3; other flags are passed on; SCALING=0
# leaves it out), the lifecycle bench on one thread and on
# every core at once (LIFECYCLE=0 leaves it out), and, where this machine
# has perf, each server's one-connection cycle taken apart by
# scripts/critical-path.awk (CRITICAL_PATH=0 leaves it out) and a flat
# profile of each server's own threads at one core (PROFILE=0 leaves it
# out): perf travels with every library it links, loaded by the loader it
# came with, since the lent machine has none, and luge-bench keeps its
# symbols.
set -euo pipefail
out=${1:?usage: scripts/bench-bundle.sh DIR}
cd "$(dirname "$0")/.."
[ -f target/wasm/http-handler.wasm ] || ./scripts/build-actions.sh
# PGO=1: luge-bench laid out by a profile of its own serving
# (scripts/pgo.sh), the lifecycle bench as it is.
if [ "${PGO:-0}" = 1 ]; then
    ./scripts/pgo.sh
    luge_bench="target/$(rustc -vV | sed -n 's/^host: //p')/dist/luge-bench"
else
    # The shipped profile: the figures are held against targets.
    cargo build --profile dist -p luge-benches --bin luge-bench
    luge_bench=target/dist/luge-bench
fi
lifecycle=$(cargo bench --profile dist -p luge-benches --bench lifecycle --no-run --message-format=json 2>/dev/null |
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
# Its symbols kept (2 MiB more, compressed): the profile names its code.
cp "$luge_bench" "$out/bin/luge-bench"
xz -T0 -6 -f "$out/bin/luge-bench"
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
perf=$(command -v perf || true)
if [ -n "$perf" ]; then
    # perf, its libraries and the loader, in one archive (about 8 MiB).
    staging=$(mktemp -d)
    mkdir -p "$staging/perf/lib"
    cp -L "$perf" "$staging/perf/perf"
    ldd "$perf" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | grep / |
        while read -r library; do cp -L "$library" "$staging/perf/lib/"; done
    tar -C "$staging" -cJf "$out/perf.tar.xz" perf
    rm -rf "$staging"
else
    echo "bench-bundle: no perf here: run.sh will take no profile" >&2
fi
cp scripts/critical-path.awk "$out/"
git rev-parse HEAD > "$out/commit"
git status --porcelain | grep -q . && echo "(with uncommitted changes)" >> "$out/commit"
[ "${PGO:-0}" = 1 ] && echo "(luge-bench built with profile-guided optimization, scripts/pgo.sh)" >> "$out/commit"

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
    # What a one-connection cycle pays outside the server: whether the
    # clock is read without a system call (tsc, kvm-clock), and whether an
    # idle vCPU halts at once (docs/BENCHMARKS-ARCHIVE.md, "Parking instead of
    # spinning": on the 2-core VM, haltpoll with guest_halt_poll_ns 0).
    for knob in devices/system/clocksource/clocksource0/current_clocksource \
        devices/system/cpu/cpuidle/current_driver devices/system/cpu/cpuidle/current_governor \
        module/haltpoll/parameters/guest_halt_poll_ns; do
        if [ -r "/sys/$knob" ]; then echo "$knob: $(cat "/sys/$knob")"; fi
    done
} > "$results/machine.txt"
if [ "${SCALING:-1}" != 0 ]; then
    "$work/luge-bench" scaling --seconds "${SECONDS_PER_POINT:-3}" --rounds "${ROUNDS:-2}" \
        --out "$results" "$@" 2>&1 | tee "$results/scaling.txt"
fi
if [ "${LIFECYCLE:-1}" != 0 ]; then
    # criterion writes its reports under the working folder.
    (cd "$work" && "$work/lifecycle" --bench "http-handler" --measurement-time 3 --noplot) \
        2>&1 | tee "$results/lifecycle.txt"
fi
if [ -f "$here/perf.tar.xz" ]; then
    tar -C "$work" -xJf "$here/perf.tar.xz"
    perf() { "$work/perf/lib/ld-linux-x86-64.so.2" --library-path "$work/perf/lib" "$work/perf/perf" "$@"; }
fi
# The servers the perf steps below take one at a time: the scaling row
# (`--only`) and the tag their files are named by.
servers=("workers, component|component" "workers, c-ping|c-ping" "wasmtime|wasmtime")
# threads TAG LUGE: the server's own threads, as perf names them: `wasmtime
# serve`'s main thread and tokio's, or Luge's that the step names.
threads() { if [ "$1" = wasmtime ]; then echo wasmtime,tokio-rt-worker; else echo "$2"; fi; }
# The one-connection cycle taken apart (issue 49's item 4: a p50 is the
# server's time, the send, and what lies outside the server): each
# server alone on its cores (CRITICAL_CORES, default 1; with more, the
# connection is served by whichever worker accepted it), one connection,
# the kernel's timestamps of its reads and writes
# (scripts/critical-path.awk says what each part is).
if [ -f "$here/perf.tar.xz" ] && [ "${CRITICAL_PATH:-1}" != 0 ]; then
    cores=${CRITICAL_CORES:-1}
    workers=""
    for ((i = 0; i < cores; i++)); do workers+="${workers:+,}luge-worker-$i"; done
    for server in "${servers[@]}"; do
        IFS='|' read -r row tag <<< "$server"
        comms=$(threads "$tag" "$workers")
        data="$work/critical-$tag.data"
        if ! perf record -q -a -o "$data" -e syscalls:sys_enter_recvfrom -e syscalls:sys_exit_recvfrom \
            -e syscalls:sys_enter_writev -e syscalls:sys_exit_writev -e syscalls:sys_enter_sendto \
            -e syscalls:sys_exit_sendto -- "$work/luge-bench" scaling \
            --cores "$cores" --only "$row" --rounds 1 --seconds 3 --connections 1 --no-p50 \
            --out "$results/critical-$tag" > "$results/critical-path-$tag.log" 2>&1; then
            echo "run.sh: no critical path of $row (see critical-path-$tag.log)" >&2
            continue
        fi
        {
            echo "## $row, one connection, $cores server cores: the server's threads ($comms)"
            perf script -i "$data" --ns --comms "$comms" -F tid,time,event,trace 2>/dev/null |
                awk -f "$here/critical-path.awk"
        } > "$results/critical-path-$tag.txt"
    done
fi
if [ -f "$here/perf.tar.xz" ] && [ "${PROFILE:-1}" != 0 ]; then
    # One server at a time on one core, 64 connections, every CPU sampled
    # 999 times a second (software clock: a guest may have no hardware
    # counters); the report keeps the server's own threads. Luge's are its
    # workers, the epoch ticker and the ambient runtime; `wasmtime
    # serve`'s its main thread and tokio's. The client's threads are
    # luge-bench's unnamed ones, left out.
    for server in "${servers[@]}"; do
        IFS='|' read -r row tag <<< "$server"
        comms=$(threads "$tag" luge-worker-0,luge-epoch,tokio-rt-worker)
        data="$work/perf-$tag.data"
        if ! perf record -q -a -e cpu-clock -F 999 -o "$data" -- "$work/luge-bench" scaling --cores 1 \
            --only "$row" --rounds 1 --seconds 4 --no-p50 --out "$results/profile-$tag" \
            > "$results/profile-$tag.log" 2>&1; then
            echo "run.sh: no profile of $row (see profile-$tag.log)" >&2
            continue
        fi
        {
            echo "## $row: samples by thread (every CPU)"
            perf report -i "$data" --sort comm --stdio 2>/dev/null | grep -v '^#' | grep . | head -20
            # (By thread and library: perf 6.1 sorts a comm-filtered
            # report by library alone wrongly.)
            echo "## $row: the server's threads ($comms), by thread and library"
            perf report -i "$data" --comms "$comms" --percentage relative --sort comm,dso \
                --stdio 2>/dev/null | grep -v '^#' | grep . | head -20
            echo "## $row: the server's threads, by library and symbol"
            perf report -i "$data" --comms "$comms" --percentage relative --sort dso,sym \
                --stdio --percent-limit 0.3 2>/dev/null | grep -v '^#' | grep .
        } > "$results/profile-$tag.txt"
    done
fi
RUN
chmod +x "$out/run.sh"
du -sh "$out"
