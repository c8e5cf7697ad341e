//! A full disk (issue 26): the upload store, the compile cache and the
//! local state tier on a small tmpfs of their own, which a granted
//! function fills up. Every write that needs space fails with a clear
//! error (the guest's own writes too: Wasmer's WASI acknowledged them
//! unwritten until its files were made to write through), nothing already
//! there is damaged, and writes succeed again, with no restart, once space
//! returns.

use crate::common;

use std::time::{Duration, Instant};

use common::{Luge, path_str, wasm};
use serde_json::{Value, json};

const TOKEN: &str = "operator-token-for-tests-0123456789";

fn upload(luge: &Luge, name: &str, module: &[u8]) -> common::Reply {
    luge.upload(TOKEN, name, module)
}

/// One state operation through `kv`: its result (`{"error": ...}` when the
/// host refused it).
fn kv(luge: &Luge, op: Value) -> Value {
    let (status, body) = luge.post("/kv", &json!({ "ops": [op] }));
    assert_eq!(status, 200, "{body}");
    body["results"][0].clone()
}

/// `n` letters no compressor shrinks much (the store's journal compresses
/// values, so repeated bytes would fit where these do not).
fn noise(n: usize) -> String {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// Appends `chunk` bytes to the ballast until the filesystem refuses:
/// whether it did.
fn fill(luge: &Luge, chunk: usize, most: usize) -> bool {
    let text = "x".repeat(chunk);
    for _ in 0..most {
        let (status, body) = luge.post(
            "/files",
            &json!({ "path": "/fill/ballast", "append": text }),
        );
        assert_eq!(status, 200, "{body}");
        if let Some(error) = body["error"].as_str() {
            // Wasmer's WASI has no errno for a full disk (its filesystem
            // errors lack one): the guest reads EIO there, ENOSPC elsewhere.
            let expected = match common::engine() {
                "wasmer" => "I/O error",
                _ => "No space left",
            };
            assert!(error.contains(expected), "{error}");
            return true;
        }
    }
    false
}

#[test]
fn a_full_disk_is_a_clear_error_and_writes_resume_when_space_returns() {
    if !Luge::can_mount_tmpfs() {
        eprintln!("SKIPPED: this machine does not let a test mount a tmpfs (unshare -Urm)");
        return;
    }
    let site = tempfile::tempdir().unwrap();
    for name in ["files", "kv"] {
        std::fs::write(site.path().join(format!("{name}.wasm")), wasm(name)).unwrap();
    }
    let token = site.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let config = site.path().join("luge.toml");
    std::fs::write(
        &config,
        r#"
        [server]
        workers = 2

        [[routes]]
        path = "/files"
        module = "files.wasm"
        dirs = [{ host = ".", guest = "/fill", mode = "rw" }]

        [[routes]]
        path = "/kv"
        module = "kv.wasm"
        state = ["shared"]
        "#,
    )
    .unwrap();
    // Uploads, compile cache and state on an 8 MiB tmpfs; the function's
    // directory (the fs root) on the same filesystem.
    let disk = site.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let (store, state, root) = (disk.join("store"), disk.join("state"), disk.join("fill"));
    let luge = Luge::start_on_tmpfs(
        "serve",
        &[
            "--config",
            path_str(&config),
            "--token-file",
            path_str(&token),
            "--store",
            path_str(&store),
            "--state-dir",
            path_str(&state),
            "--fs-root",
            path_str(&root),
        ],
        &disk,
        8 << 10,
    );

    // Before: a value and an uploaded function.
    assert_eq!(
        kv(
            &luge,
            json!({ "op": "set", "key": "shared/kept", "value": "before" })
        ),
        "ok"
    );
    let reply = upload(&luge, "kept", &wasm("c-echo"));
    reply.expect(201);

    // Fill it: big appends, then small ones, until nothing fits.
    assert!(
        fill(&luge, 256 << 10, 64),
        "8 MiB never filled: {}",
        luge.stderr()
    );
    assert!(fill(&luge, 4 << 10, 256), "the last KiBs never filled");

    // A state write fails as the store being unavailable; what is there
    // stays readable.
    let big = noise(100_000);
    let refused = kv(
        &luge,
        json!({ "op": "set", "key": "shared/big", "value": big }),
    );
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or("")
            .contains("unavailable"),
        "{refused}"
    );
    assert_eq!(
        kv(&luge, json!({ "op": "get", "key": "shared/kept" })),
        "before"
    );
    assert_eq!(
        kv(&luge, json!({ "op": "get", "key": "shared/big" })),
        Value::Null
    );
    // An upload (a new module, so a compile-cache write too) is 507 with
    // the reason, and is not installed. (Its partial files are removed,
    // which frees a little space: hence last.)
    let reply = upload(&luge, "late", &wasm("c-hello"));
    reply.expect(507);
    assert!(
        reply.json()["error"]
            .as_str()
            .unwrap_or("")
            .contains("No space left"),
        "{}",
        reply.json()
    );
    assert_eq!(luge.request("POST", "/fn/late", b"").0, 404);
    // Functions stored before still run, and the host is healthy.
    assert_eq!(
        luge.request("POST", "/fn/kept", b"still here"),
        (200, b"still here".to_vec())
    );
    assert_eq!(luge.get("/healthz").0, 200);

    // Space returns: writes succeed again without a restart (the state
    // store is reopened at the next write, within a second).
    let (status, body) = luge.post("/files", &json!({ "path": "/fill/ballast", "write": "" }));
    assert_eq!((status, &body["written"]), (200, &json!(0)), "{body}");
    let started = Instant::now();
    loop {
        let result = kv(
            &luge,
            json!({ "op": "set", "key": "shared/big", "value": big }),
        );
        if result == "ok" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "state writes did not resume: {result}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The store refused every write after the first failure until it was
    // opened again.
    assert!(
        luge.stderr_shows("state store reopened"),
        "{}",
        luge.stderr()
    );
    assert_eq!(
        kv(&luge, json!({ "op": "size", "key": "shared/big" })),
        100_000
    );
    assert_eq!(
        kv(&luge, json!({ "op": "get", "key": "shared/kept" })),
        "before"
    );
    let reply = upload(&luge, "late", &wasm("c-hello"));
    reply.expect(201);
    assert_eq!(luge.request("POST", "/fn/late", b"").0, 200);
    assert_eq!(
        luge.request("POST", "/fn/kept", b"again"),
        (200, b"again".to_vec())
    );
}
