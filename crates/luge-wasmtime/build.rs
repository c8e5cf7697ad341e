//! Records the target triple and the resolved Wasmtime version, which go into
//! every artifact header.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=LUGE_TARGET_TRIPLE={target}");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let lock = std::path::Path::new(&manifest).join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let lock = std::fs::read_to_string(&lock).unwrap_or_default();
    let mut lines = lock.lines();
    let mut version = String::from("unknown");
    while let Some(line) = lines.next() {
        if line == "name = \"wasmtime\"" {
            if let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = ")) {
                version = v.trim_matches('"').to_owned();
            }
            break;
        }
    }
    println!("cargo:rustc-env=LUGE_WASMTIME_VERSION={version}");
}
