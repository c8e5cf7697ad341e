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

mod handler;
mod shared;
pub mod wasi_2023_10_18;
pub mod wasi_2023_11_10;

pub use handler::{Handler, HandlerPre};

/// The interfaces of the candidates this crate serves (their
/// `wasi:http/proxy` worlds, but 10-18's timezone; 11-10's `wasi:io/error`
/// besides), each followed by its version.
const SERVED: &[&str] = &[
    "wasi:io/error@",
    "wasi:io/poll@",
    "wasi:io/streams@",
    "wasi:clocks/wall-clock@",
    "wasi:clocks/monotonic-clock@",
    "wasi:random/random@",
    "wasi:cli/stdin@",
    "wasi:cli/stdout@",
    "wasi:cli/stderr@",
    "wasi:http/types@",
    "wasi:http/outgoing-handler@",
];

/// Whether this crate serves the import `name`, if `name` is of a WASI
/// 0.2.0 release candidate (`...@0.2.0-rc-...`): the candidates' other
/// interfaces, and every other candidate's, are not served. `None` for
/// every other name.
pub fn serves(name: &str) -> Option<bool> {
    let (interface, version) = name.split_once('@')?;
    version.starts_with("0.2.0-rc-").then(|| {
        ["0.2.0-rc-2023-10-18", "0.2.0-rc-2023-11-10"].contains(&version)
            && SERVED
                .iter()
                .any(|served| served.strip_suffix('@') == Some(interface))
            && !(version == "0.2.0-rc-2023-10-18" && interface == "wasi:io/error")
    })
}
