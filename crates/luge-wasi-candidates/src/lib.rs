//! WASI's 0.2 release candidates that toolchains of late 2023 built for:
//! `0.2.0-rc-2023-10-18` (spin-sdk 2, `wit-bindgen` 0.13) and
//! `0.2.0-rc-2023-11-10` (`wit-bindgen` 0.14-0.16, Wasmtime 15). Each
//! candidate's `wasi:http/proxy` world is served by forwarding every
//! function to Wasmtime's WASI 0.2 implementation on the same resources,
//! so a component of a candidate gets the same grants, bounds, deadlines
//! and hooks as a 0.2 one: this crate narrows nothing and adds nothing, it
//! only translates. `luge-wasmtime` links [`wasi_2023_10_18::add_to_linker`]
//! and [`wasi_2023_11_10::add_to_linker`] (its `SLICES`) and calls a
//! handler through each candidate's [`wasi_2023_10_18::Proxy`].
//!
//! Their filesystem, sockets and (10-18's) timezone are not served:
//! spin-sdk 2 imports none of them.

#![deny(missing_docs)]

mod shared;
pub mod wasi_2023_10_18;
pub mod wasi_2023_11_10;
