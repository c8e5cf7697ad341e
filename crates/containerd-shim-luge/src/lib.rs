//! Luge as a containerd runtime: `containerd-shim-luge-v1`, the shim
//! containerd starts for a container of the runtime `io.containerd.luge.v1`
//! (a Kubernetes `RuntimeClass` named `luge` whose handler is `luge`).
//!
//! It narrows runwasi's `containerd-shim-wasm` to one job: a container
//! whose image holds an app (a Spin app's `spin.toml` and its components,
//! or a Luge app's `luge.toml` and its modules) is served as `luge serve`
//! would serve it, inside the container's namespaces and cgroup, which
//! youki's libcontainer (through containerd-shim-wasm) set up from the
//! pod's spec: its network namespace (so the app listens on the pod's
//! address), its cgroup (so the pod's CPU limit bounds the workers: Rust's
//! `available_parallelism` reads the cgroup's quota, and Luge's default
//! worker count is that; and its memory limit bounds the sandboxes',
//! [`app::memory_args`]), its root filesystem.
//!
//! An image is either files (`spin.toml` or `luge.toml` at its root) or
//! the OCI layout `spin registry push` writes, the app as layers: a locked
//! app and a layer per component and file ([`oci`], [`locked`]). The
//! components of the latter are compiled once per node by runwasi's
//! `Compiler` ([`compiler`]) and kept in containerd's content store, so
//! the next pod of the image starts without compiling.
//!
//! What it took from containerd-shim-spin's use of the same traits: the
//! `Shim` names its layers and compiler, the `Sandbox` finds the app in
//! the container and serves it until a signal; Spin's names where Spin's
//! shim has them (`/spin.toml`, `/runtime-config.toml`,
//! `SPIN_HTTP_LISTEN_ADDR`, default `0.0.0.0:80`); the container's
//! environment set in the container's process before the app starts
//! (Spin apps read `SPIN_VARIABLE_*` from it).

#![deny(missing_docs)]

pub mod app;
pub mod compiler;
pub mod locked;
pub mod oci;
mod shim;

pub use shim::{LugeSandbox, LugeShim};
