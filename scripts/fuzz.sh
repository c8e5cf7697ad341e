#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer) of what a tenant controls: OpenWhisk
# bodies, code and artifact detection, luge.toml and the Sledge spec, upload
# metadata, every host API import, and the times, sizes and values guests
# hand the capabilities (fuzz/, see its Cargo.toml for why
# libFuzzer on stable). Usage:
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]
#
# (default: 15 s for each target, as CI runs it). An input that runs
# longer than LUGE_FUZZ_TIMEOUT seconds (10 by default) is a failure (and
# only such an input is kept: libFuzzer's slow-unit reports start there
# too, as the check below takes any kept file for a failure); an
# hour's run beside other work (`nice`) sets it higher, so that a unit
# the scheduler left waiting is not taken for a hang (replay it alone:
# `target/fuzz/HOST/release/TARGET FILE`). New inputs go to
# target/fuzz/corpus/<target>; the seeds in fuzz/corpus/<target> are read.
# A crash leaves its input in target/fuzz/artifacts/<target>/ and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(openwhisk_bodies code config upload_metadata host_api guest_values)
fi
host=$(rustc -vV | sed -n 's/^host: //p')
# cargo-fuzz's instrumentation, without AddressSanitizer (nightly only).
# `--target` keeps it off build scripts and proc macros.
RUSTFLAGS="-Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo build --release --locked --manifest-path fuzz/Cargo.toml --target "$host" \
    --target-dir target/fuzz --bins
for target in "${targets[@]}"; do
    mkdir -p "target/fuzz/corpus/$target" "target/fuzz/artifacts/$target"
    echo "== fuzz $target for ${seconds} s"
    "target/fuzz/$host/release/$target" \
        -max_total_time="$seconds" -timeout="${LUGE_FUZZ_TIMEOUT:-10}" \
        -report_slow_units="${LUGE_FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="target/fuzz/artifacts/$target/" -print_final_stats=1 \
        "target/fuzz/corpus/$target" "fuzz/corpus/$target" 2>&1 |
        grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|.*panicked|.*ERROR)' || true
    # libFuzzer's exit status is lost in the pipe: a crash leaves a file.
    if compgen -G "target/fuzz/artifacts/$target/*" >/dev/null; then
        echo "fuzz $target: a crash, kept in target/fuzz/artifacts/$target/" >&2
        exit 1
    fi
done
