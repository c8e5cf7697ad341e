//! Copies stdin to stdout byte for byte (binary-safe standalone routes).
use std::io::{Read, Write};

fn main() {
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_ok() {
        let _ = std::io::stdout().write_all(&input);
    }
}
