//! Records the target triple, the one artifacts of this build are for.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=LUGE_TARGET_TRIPLE={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
