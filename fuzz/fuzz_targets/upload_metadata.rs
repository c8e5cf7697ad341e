//! An upload's metadata (a `FunctionSpec` in JSON, as `PUT
//! /v1/functions/{name}` takes it): parsed, its route checked, and
//! written back, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use luge_host::FunctionSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<FunctionSpec>(data) else {
        return;
    };
    if let Some(path) = &spec.path {
        let _ = luge_host::spec::check_route_path(path);
    }
    let _ = spec.content_type();
    let again = serde_json::to_vec(&spec).expect("a parsed spec serializes");
    let back: FunctionSpec = serde_json::from_slice(&again).expect("and parses again");
    assert_eq!(back, spec, "a spec changed in a round trip");
});
