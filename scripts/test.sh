#!/usr/bin/env bash
# Sets up a fresh machine, builds the example actions, and runs the whole
# test suite, formatting and lint checks included, with every engine
# compiled in; the end-to-end suite then runs once more per extra engine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says when it starts (seconds since the suite began), so a
# slow run shows where its time went.
phase() { echo "== [${SECONDS}s] $*"; }
phase "set-up"
./scripts/setup.sh
# The vendored Wasmtime is the published crate plus vendor/patches only.
./scripts/vendor.sh --check
# Luge's one WIT root (wit/) matches the crates its packages come from.
./scripts/vendor-wit.sh --check
# fuzz/ is a workspace of its own with its own lock file: a dependency
# change in the main workspace must be carried into it (fail in seconds,
# not after the whole build).
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null
# The aarch64 check's profile sets back to opt-level 0 every package the
# dev profile optimizes (Cargo.toml, `cross-check`): the two lists agree.
python3 - <<'PY'
import sys, tomllib
profiles = tomllib.load(open("Cargo.toml", "rb"))["profile"]
def named(profile, level):
    return {name for name, settings in profiles[profile]["package"].items()
            if settings.get("opt-level") == level}
dev, cross = named("dev", 2), named("cross-check", 0)
if dev != cross:
    sys.exit(f"Cargo.toml: optimized in dev, not set back in cross-check: {sorted(dev - cross)}; "
             f"set back in cross-check, not optimized in dev: {sorted(cross - dev)}")
PY
phase "example functions"
./scripts/build-actions.sh
# The telemetry tests' collector: a real Jaeger, built once from source.
./scripts/build-jaeger.sh
cargo fmt --all -- --check
# The book (docs/book) and the README: every chapter listed, every include,
# link and repository path they name resolves; then mdBook builds the book
# (target/book), failing on a chapter it cannot render. Its generated
# references (the CLI's, the metrics') are checked against the code by
# tests of the suite below.
python3 scripts/check-book.py
phase "the book"
target/tools/mdbook/bin/mdbook build docs/book --dest-dir "$PWD/target/book"
# The scheduler's lock-free protocols (luge-sched's `protocol` module),
# model-checked with loom in a build of their own (`--cfg luge_loom`, its
# own target directory so the main build stays cached). Bounded at three
# preemptions per execution (see tests/loom.rs).
phase "loom"
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg luge_loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p luge-sched --test loom
# Both run before the main build, and CI (LUGE_TEST_LEAN=1) drops each
# once run: the disk a run needs at its peak is then the main build's
# alone (a CI machine once finished the suite with 42 MB left).
lean() { [ "${LUGE_TEST_LEAN:-0}" = 1 ] && rm -rf "$@" || true; }
lean target/loom
# Coverage-guided fuzzing of what a tenant controls (fuzz/: libFuzzer on
# stable, a build of its own in target/fuzz): each target for 15 s from its
# seeds, a smoke run (LUGE_FUZZ_SECONDS, 15 unless set; CI gives each 5
# s). `scripts/fuzz.sh 3600` runs an hour per target.
phase "fuzzing"
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
./scripts/fuzz.sh "${LUGE_FUZZ_SECONDS:-15}"
lean target/fuzz
# Clippy with `-D warnings` on every target (tests and benches included),
# in the same build as the tests (scripts/cargo-linted.sh says why).
phase "the build, with clippy"
./scripts/cargo-linted.sh test --workspace --all-targets --all-features --no-run
phase "the test suite"
./scripts/cargo-linted.sh test --workspace --all-features
# The engine-neutral end-to-end tests (executor/tests/e2e, one binary)
# against each other engine; `scheduling` is Wasmtime's alone (only it
# preempts). `--workspace` keeps the feature set of the run above, so the
# same test binary runs again: `-p luge-executor` would unify features
# differently and rebuild them all.
for engine in wasmer wamr; do
    phase "end-to-end suite on $engine"
    LUGE_TEST_ENGINE=$engine ./scripts/cargo-linted.sh test --workspace --all-features --test e2e
done
# WASI 0.1 conformance: wasi-testsuite's Rust and C tests through `luge
# run` on every engine; each engine's known failures are listed (and
# explained) in scripts/wasi-testsuite/expected-<engine>.txt.
phase "wasi-testsuite"
./scripts/wasi-testsuite.sh
# Spin's conformance suite (fermyon/conformance-tests) against `luge serve
# --spin`: 19 tests, each app's services on loopback. Needs a checkout in
# SPIN_CONFORMANCE_SRC; CI has none: there it says SKIPPED and why.
phase "Spin conformance"
./scripts/spin-conformance.sh
# The OpenWhisk kit against a real OpenWhisk: compiles the factory against
# OPENWHISK_SRC and runs actions through OpenWhisk's standalone server. CI
# has no OpenWhisk checkout: there it says SKIPPED and why.
phase "OpenWhisk"
./deploy/openwhisk/check.sh
# The same against a multi-invoker OpenWhisk (Kafka, pouchdb-server, a
# controller and two invokers, each with its Luge), driven by `wsk`. Needs
# OPENWHISK_SRC too (and OPENWHISK_CLI_SRC); SKIPPED in CI.
./deploy/openwhisk/cluster.sh
# Luge on Kubernetes: containerd v2.4 with Luge's shim, driven through CRI
# with crictl. Needs root, runc and Go builds: SKIPPED unless
# LUGE_K8S_CHECK=1.
LUGE_K8S_CHECK="${LUGE_K8S_CHECK:-0}" ./deploy/kubernetes/check.sh
phase "done"
