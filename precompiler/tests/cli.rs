//! `luge-precompile` as an operator uses it.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::path::PathBuf;
use std::process::Command;

use luge_registry::{ArtifactKey, ModuleCode, ModuleRegistry};

const KEY: &str = "precompiler test key 0123456789";

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../target/wasm/{name}.wasm"))
}

fn precompile(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_luge-precompile"))
        .args(args)
        .env("LUGE_KEY", KEY)
        .output()
        .expect("luge-precompile runs")
}

/// A registry on the engine the precompiler builds by default.
fn registry(key: &str) -> ModuleRegistry {
    let runtime = luge_engines::build(
        luge_engines::EngineKind::Wasmtime,
        &luge_engines::EngineSettings::compile_only(None, false),
    )
    .unwrap();
    ModuleRegistry::new(
        runtime,
        ArtifactKey::from_secret(key.as_bytes()).unwrap(),
        None,
    )
}

#[test]
fn artifact_loads_with_the_same_key_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("echo.luge");
    let run = precompile(&[
        example("echo").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let bytes = std::fs::read(&out).unwrap();
    let code = ModuleCode::detect(bytes, usize::MAX).unwrap();
    assert!(matches!(code, ModuleCode::Artifact(_)));
    assert!(registry(KEY).load(&code).is_ok());
    assert_eq!(registry(KEY).stats().compiles, 0);
    let err = registry("another operator's key 987654")
        .load(&code)
        .err()
        .unwrap();
    assert!(err.to_string().contains("authentication failed"), "{err}");
}

#[test]
fn zip_output_is_accepted_as_action_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("echo.zip");
    let run = precompile(&[
        example("echo").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--zip",
    ]);
    assert!(run.status.success());
    let code = ModuleCode::detect(std::fs::read(&out).unwrap(), 64 << 20).unwrap();
    assert!(registry(KEY).load(&code).is_ok());
}

#[test]
fn cross_target_artifact_is_refused_on_this_host() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("noop-aarch64.luge");
    let run = precompile(&[
        example("noop").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--target",
        "aarch64-unknown-linux-gnu",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let code = ModuleCode::detect(std::fs::read(&out).unwrap(), usize::MAX).unwrap();
    let err = registry(KEY).load(&code).err().unwrap().to_string();
    assert!(
        err.contains("aarch64-unknown-linux-gnu") && err.contains("this executor runs"),
        "{err}"
    );
}

#[test]
fn invalid_input_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"\0asm\x01\0\0\0\x01\xff\xff").unwrap();
    let out = dir.path().join("out");
    let run = precompile(&[bad.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("invalid WebAssembly module"), "{stderr}");
    assert!(!out.exists());

    std::fs::write(&bad, b"plain text").unwrap();
    let run = precompile(&[bad.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("not a WebAssembly module"));
}

/// Another engine's artifact (`--engine NAME`) names that engine; a
/// Wasmtime executor refuses it, naming both; invalid Wasm is refused by
/// that engine's compiler or loader too.
#[allow(dead_code)] // used only when an engine besides Wasmtime is built in
fn other_engine_artifacts_name_their_engine(engine: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("echo-{engine}.luge"));
    let run = precompile(&[
        example("echo").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--engine",
        engine,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(
        luge_registry::artifact::peek_engine(&bytes).unwrap().engine,
        engine
    );
    let code = ModuleCode::detect(bytes, usize::MAX).unwrap();
    let err = registry(KEY).load(&code).err().unwrap().to_string();
    assert!(err.contains(engine) && err.contains("wasmtime"), "{err}");
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"\0asm\x01\0\0\0\x05junk").unwrap();
    let run = precompile(&[bad.to_str().unwrap(), "-o", "/dev/null", "--engine", engine]);
    assert!(!run.status.success());
}

#[cfg(feature = "wamr")]
#[test]
fn wamr_artifacts_name_their_engine() {
    other_engine_artifacts_name_their_engine("wamr");
}

#[cfg(feature = "wasmer")]
#[test]
fn wasmer_artifacts_name_their_engine() {
    other_engine_artifacts_name_their_engine("wasmer");
}

/// Precompiles the example `name` with `flags` and runs its artifact once
/// on `stdin`.
fn precompile_and_run(name: &str, flags: &[&str], stdin: &[u8]) -> luge_core::Outcome {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.luge"));
    let (input, output) = (example(name), out.to_str().unwrap().to_owned());
    let mut args = vec![input.to_str().unwrap(), "-o", output.as_str()];
    args.extend_from_slice(flags);
    let run = precompile(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let code = ModuleCode::detect(std::fs::read(&out).unwrap(), usize::MAX).unwrap();
    let module = registry(KEY).load(&code).unwrap();
    let action = std::sync::Arc::new(luge_core::Action::command(name));
    module.run(luge_core::Invocation::new(action, stdin))
}

/// A module exporting `wizer.initialize` is shipped as its snapshot: the
/// artifact's invocations find the initialisation's table already built.
#[test]
fn an_initializable_module_is_precompiled_as_its_snapshot() {
    let outcome = precompile_and_run("preinit", &[], b"{\"nth\": 1}");
    assert!(
        outcome.termination.is_success(),
        "{:?}",
        outcome.termination
    );
    let out: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&outcome.stdout).trim()).unwrap();
    assert_eq!(out["prime"], 3);
    assert_eq!(out["built_here"], false, "{out}");
}

/// `--init-function` names the initialisation export: the artifact holds
/// what `setup` made (here: no grants, so no file and no environment),
/// and without the flag `setup` is an ordinary export, never run.
#[test]
fn the_initialisation_export_can_be_named() {
    let answer = |flags: &[&str]| {
        let outcome = precompile_and_run("c-init_named", flags, b"");
        serde_json::from_slice::<serde_json::Value>(&outcome.stdout).unwrap()
    };
    assert_eq!(
        answer(&["--init-function", "setup"])["config"],
        "unreadable"
    );
    assert_eq!(answer(&[])["config"], "");
}
