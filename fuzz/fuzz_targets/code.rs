//! Code as a client sends it: detection (zip, Wasm, sealed artifact, a
//! zip's entries), the compile budget's section walk, and an artifact's
//! envelope (header, MAC). Detection never yields more than its cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use luge_core::EngineId;
use luge_registry::ModuleCode;
use luge_registry::artifact::{self, ArtifactKey};

const CAP: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let key = ArtifactKey::from_secret(b"fuzzing key 0123456789abcdef").expect("a valid key");
    let engine = EngineId {
        engine: "wasmtime".into(),
        version: "48.0.8".into(),
        target: "x86_64-unknown-linux-gnu".into(),
    };
    let _ = luge_registry::check_compile_budget(data);
    let _ = artifact::open(&key, data, &engine, None);
    if let Ok(code) = ModuleCode::detect(data.to_vec(), CAP) {
        assert!(code.bytes().len() <= CAP, "detection exceeded its cap");
    }
});
