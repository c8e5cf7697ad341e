//! Mutation fuzzing of everything that parses a client's bytes before an
//! engine sees them: the `/init` body (JSON, base64), the code detector
//! (zip, magic bytes), the artifact envelope (header, MAC) and the compile
//! budget (Wasm sections). Valid seeds are mutated (bit flips, byte
//! overwrites, truncations, splices, insertions of boundary values) and fed
//! in; every input must give a value or an error, never a panic, a hang or
//! an allocation beyond the caps.
//!
//! CI runs 50,000 cases from a fixed seed (well under a second). A longer
//! run, with another seed: `LUGE_FUZZ_SECONDS=3600 LUGE_FUZZ_SEED=7 cargo
//! test -p luge-openwhisk --test hostile_inputs -- --nocapture`
//! (docs/SECURITY.md records one). A hand-written mutator that runs with
//! the unit tests, on stable, with no extra tooling; the coverage-guided
//! fuzzing of the same parsers and more is `fuzz/` (`scripts/fuzz.sh`).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::io::Write;
use std::time::{Duration, Instant};

use base64::Engine as _;
use luge_core::EngineId;
use luge_registry::ModuleCode;
use luge_registry::artifact::{self, ArtifactKey};

/// xorshift64*: a tiny, seedable generator; quality is not the point.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [u8; 8] = [0x00, 0xff, 0x7f, 0x80, b'P', b'K', b'{', b'"'];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(8) {
        let len = data.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => data.truncate(rng.below(len + 1)),
            3 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                let to = from + rng.below(other.len() - from + 1);
                let at = rng.below(len + 1);
                data.splice(at..at, other[from..to].iter().copied());
            }
            4 => {
                let at = rng.below(len + 1);
                let n = rng.below(16);
                let byte = INTERESTING[rng.below(INTERESTING.len())];
                data.splice(at..at, std::iter::repeat_n(byte, n));
            }
            _ if len > 4 => {
                // A little-endian u32 length field somewhere, made huge.
                let i = rng.below(len - 4);
                data[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
            _ => {}
        }
    }
    data
}

fn zip_of(name: &str, data: &[u8]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut out);
    writer
        .start_file(name, zip::write::SimpleFileOptions::default())
        .unwrap();
    writer.write_all(data).unwrap();
    writer.finish().unwrap();
    out.into_inner()
}

fn engine() -> EngineId {
    EngineId {
        engine: "wasmtime".into(),
        version: "48.0.8".into(),
        target: "x86_64-unknown-linux-gnu".into(),
    }
}

/// Runs one input through every parser.
fn exercise(key: &ArtifactKey, input: &[u8]) {
    let _ = luge_openwhisk::protocol::parse_init(input);
    let _ = luge_openwhisk::protocol::parse_run(input);
    let _ = luge_registry::check_compile_budget(input);
    let _ = artifact::open(key, input, &engine(), None);
    if let Ok(code) = ModuleCode::detect(input.to_vec(), 1 << 20) {
        assert!(code.bytes().len() <= 1 << 20);
    }
    // The same bytes as an init's code.
    let init = format!(
        r#"{{"value":{{"main":"main","code":"{}"}}}}"#,
        base64::engine::general_purpose::STANDARD.encode(input)
    );
    if let Ok(request) = luge_openwhisk::protocol::parse_init(init.as_bytes()) {
        let _ = ModuleCode::detect(request.code, 1 << 20);
    }
}

#[test]
fn parsers_survive_mutated_inputs() {
    let key = ArtifactKey::from_secret(b"fuzzing key 0123456789abcdef").unwrap();
    let wasm = b"\0asm\x01\0\0\0\x01\x04\x01\x60\0\0\x03\x02\x01\0\x0a\x04\x01\x02\0\x0b".to_vec();
    let sealed = artifact::seal(&key, &engine(), None, b"native code, in theory");
    let seeds = vec![
        wasm.clone(),
        sealed.clone(),
        zip_of("main.wasm", &wasm),
        zip_of("a/action.luge", &sealed),
        zip_of("main.wasm", &zip_of("main.wasm", &wasm)),
        br#"{"value":{"name":"a","main":"main","binary":true,"code":"AGFzbQEAAAA=","env":{"A":"1"},"annotations":{"wasi.dirs":[{"host":"d","guest":"/d"}]}}}"#.to_vec(),
        br#"{"value":{"x":1},"deadline":"1700000000000","activation_id":"a"}"#.to_vec(),
    ];
    let seconds: u64 = std::env::var("LUGE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let budget = Duration::from_secs(seconds);
    let seed: u64 = std::env::var("LUGE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1ced_cafe_f00d);
    let mut rng = Rng(seed | 1);
    let started = Instant::now();
    let mut cases = 0u64;
    let mut slowest = Duration::ZERO;
    while cases < 50_000 || started.elapsed() < budget {
        let input = mutate(&mut rng, &seeds);
        let one = Instant::now();
        exercise(&key, &input);
        let took = one.elapsed();
        if took > slowest {
            slowest = took;
        }
        // Bounded work per input: no parser may spin on hostile bytes.
        assert!(
            took < Duration::from_secs(2),
            "an input of {} bytes took {took:?}",
            input.len()
        );
        cases += 1;
    }
    eprintln!(
        "hostile_inputs: {cases} cases in {:?} from seed {seed:#x}, slowest {slowest:?}",
        started.elapsed()
    );
}
