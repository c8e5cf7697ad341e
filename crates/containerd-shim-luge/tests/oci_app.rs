//! A Spin app as OCI layers, end to end without containerd: the layers
//! runwasi would hand the shim (the app's real component, built from
//! actions/spin, and its locked app), compiled by the shim's `Compiler`
//! into sealed artifacts, written out as the app, and served by `luge
//! serve` in this process on 127.0.0.1, as the container would.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser as _;
use containerd_shim_luge::compiler::{self, LugeCompiler};
use containerd_shim_luge::locked::{LOCKED_APP_MEDIA_TYPE, WASM_MEDIA_TYPE};
use containerd_shim_luge::oci;
use containerd_shim_wasm::sandbox::context::WasmLayer;
use containerd_shim_wasm::shim::Compiler as _;
use oci_spec::image::{Descriptor, MediaType};

fn layer(media_type: &str, bytes: Vec<u8>) -> WasmLayer {
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    WasmLayer {
        config: Descriptor::new(
            MediaType::Other(media_type.to_owned()),
            bytes.len() as u64,
            oci_spec::image::Digest::try_from(digest.as_str()).unwrap(),
        ),
        precompiled: false,
        layer: bytes,
    }
}

/// A digest for the test's layers, shaped as SHA-256 (containerd checks
/// real ones; the shim only matches them).
fn sha256_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn get(addr: &str, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nhost: app\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_app_in_oci_layers_is_compiled_once_and_served() {
    let wasm_path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../actions/spin/target/wasm32-wasip2/release/luge_spin_app.wasm");
    let wasm = std::fs::read(&wasm_path)
        .unwrap_or_else(|e| panic!("{} (./scripts/build-actions.sh): {e}", wasm_path.display()));
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: set before any thread of this test reads the environment
    // (the only test in this binary; the server starts below).
    unsafe {
        std::env::set_var(compiler::KEY_FILE_ENV, dir.path().join("node.key"));
        std::env::set_var("SPIN_VARIABLE_UPSTREAM", "http://127.0.0.1:1");
    }

    let component = layer(WASM_MEDIA_TYPE, wasm);
    let locked = serde_json::json!({
        "spin_lock_version": 0,
        "metadata": {"name": "oci-app"},
        "variables": {"greeting": {"default": "Hello from layers"}, "upstream": {}},
        "triggers": [{"id": "t", "trigger_type": "http",
                      "trigger_config": {"route": "/...", "component": "app"}}],
        "components": [{
            "id": "app",
            "metadata": {"key_value_stores": ["default"]},
            "source": {"content_type": "application/wasm",
                       "digest": component.config.digest().to_string()},
            "files": [{"inline": "c3RhdGlj", "path": "static/hello.txt"}],
            "config": {"greeting": "{{ greeting }}", "upstream": "{{ upstream }}"}
        }]
    });
    let app = layer(LOCKED_APP_MEDIA_TYPE, serde_json::to_vec(&locked).unwrap());
    let mut layers = vec![component, app];

    // The compiler seals the component and leaves the locked app as it is.
    let compiler = LugeCompiler::new().unwrap();
    let compiled = compiler.compile(&layers).await.unwrap();
    assert_eq!(compiled.len(), 2);
    assert_eq!(compiled[1].as_ref(), Some(&layers[1].layer));
    let sealed = compiled[0].clone().expect("the component is compiled");
    assert!(sealed.starts_with(b"LUGEART"), "a sealed Luge artifact");
    // What runwasi hands the next container of the image: compiled
    // already, kept as it is.
    layers[0].layer = sealed.clone();
    layers[0].precompiled = true;
    assert_eq!(compiler.compile(&layers).await.unwrap()[0], Some(sealed));
    // A module that does not compile fails the call (runwasi then runs
    // the original layers, and `luge serve` says why).
    let bad = layer(WASM_MEDIA_TYPE, b"\0asm\x01\0\0\0no module".to_vec());
    assert!(compiler.compile(&[bad]).await.is_err());

    // A directory (or link) already where the app goes is refused, never
    // written through.
    let taken = dir.path().join("taken");
    std::os::unix::fs::symlink(dir.path(), &taken).unwrap();
    let refused = oci::write_app(&layers, &taken).unwrap_err();
    assert!(refused.to_string().contains("already holds"), "{refused}");
    let manifest = oci::write_app(&layers, &dir.path().join("app")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let secret = compiler::node_key().unwrap().secret().to_owned();
    // SAFETY: as above; the server has not started.
    unsafe { std::env::set_var("LUGE_KEY", secret) };
    let app = containerd_shim_luge::app::App::Spin {
        manifest,
        runtime_config: None,
    };
    let files = oci::files_root(&dir.path().join("app"));
    let mut argv = vec!["luge".to_owned()];
    argv.extend(containerd_shim_luge::app::serve_args(
        &app,
        dir.path(),
        addr.parse().unwrap(),
        Some(&files),
    ));
    let cli = luge_executor::cli::Cli::try_parse_from(argv).unwrap();
    let server = std::thread::spawn(move || luge_executor::main_with(cli));
    let started = Instant::now();
    let body = loop {
        if let Some(body) = get(&addr, "/hello") {
            break body;
        }
        if server.is_finished() {
            let ended = server.join().unwrap();
            panic!("luge serve ended: {:#}", ended.err().unwrap());
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never served");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(body, "Hello from layers, Spin app\n");
    // The file the locked app carries, at its path.
    assert_eq!(get(&addr, "/file/hello.txt").as_deref(), Some("static"));
}
