//! `containerd-shim-luge-v1`: see the `containerd_shim_luge` library.

use containerd_shim_wasm::shim::{Cli as _, Config};

fn main() {
    // Before runwasi starts the process containers are forked from: they
    // inherit the node's key from this one (an error is reported when a
    // container would need it).
    let _ = containerd_shim_luge::compiler::node_key();
    containerd_shim_luge::LugeShim::run(Config {
        // containerd keeps the shim's log; errors only, as
        // containerd-shim-spin's default (Luge's own log goes to the
        // container's stderr, which is what `kubectl logs` shows).
        default_log_level: "error".to_owned(),
        ..Default::default()
    });
}
