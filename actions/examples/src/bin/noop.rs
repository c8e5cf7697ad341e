//! Does nothing: the sandbox-lifecycle benchmark's function.
fn main() {}
