//! `containerd-shim-luge-v1`: see the `containerd_shim_luge` library.

use containerd_shim_wasm::shim::{Cli as _, Config};

fn main() {
    containerd_shim_luge::LugeShim::run(Config {
        // containerd keeps the shim's log; errors only, as
        // containerd-shim-spin's default (Luge's own log goes to the
        // container's stderr, which is what `kubectl logs` shows).
        default_log_level: "error".to_owned(),
        ..Default::default()
    });
}
