#!/usr/bin/env bash
# Sets up a fresh machine, builds the example actions, and runs the whole
# test suite, formatting and lint checks included.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build-actions.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
