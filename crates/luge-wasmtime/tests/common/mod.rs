//! Helpers shared by this crate's integration tests.

use std::path::PathBuf;

/// The same lookup as `luge_testkit::example_wasm`, repeated here because
/// luge-testkit depends on this crate: using it from this crate's own tests
/// would build two copies of luge-wasmtime whose types do not mix.
pub fn wasm(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/build-actions.sh first",
            path.display()
        )
    })
}
