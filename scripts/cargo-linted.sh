#!/usr/bin/env bash
# `cargo ARGS` on Luge's workspace with Clippy's lints run inside the
# build: clippy-driver (what `cargo clippy` itself runs) as the workspace's
# compiler wrapper, every warning an error, as `cargo clippy -- -D
# warnings`. The workspace's own crates are linted as they are compiled;
# dependencies are compiled once, by plain rustc, for the tests. A `cargo
# clippy` of its own checks every dependency again in check mode, a second
# build of the whole graph that the test build cannot reuse: 17.5 of a
# cold CI run's minutes on the 2-core machine (2026-11-30).
#
# Every build of the workspace in the suite goes through here with the same
# settings, so none rebuilds what another built (a plain `cargo test` after
# it rebuilds the workspace's own crates, not the dependencies: cargo keys
# a build by its compiler wrapper). Builds of other
# workspaces (actions/, fuzz/, wasi-testsuite) do not: their code is not
# held to Luge's lints.
set -euo pipefail
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
export RUSTC_WORKSPACE_WRAPPER
# cargo-clippy's encoding of the arguments after `--`.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
exec cargo "$@"
