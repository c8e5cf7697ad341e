//! Never returns: an endless loop with no host calls (`ms` bounds it, for
//! benchmarks that need a long CPU-bound run).
use luge_action::{Error, Value, json};

fn spin(params: Value) -> Result<Value, Error> {
    let mut x: u64 = 1;
    match params["iterations"].as_u64() {
        Some(n) => {
            for i in 0..n {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
        }
        None => loop {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        },
    }
    Ok(json!({ "x": x }))
}

luge_action::main!(spin);
