//! `luge run`: one WASI command on this terminal, on the engine under test
//! (the real binary, real modules from `actions/`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use luge_testkit::last_json;

use crate::common::{TEST_KEY, engine, path_str, ping_peer};

fn module(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm")
        .join(format!("{name}.wasm"))
}

fn luge_run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_luge"))
        .args(["run", "--engine", engine()])
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

/// `luge --version` names the version, the commit it was built from
/// (this checkout's HEAD when the test binary was built with it) and the
/// engines compiled in.
#[test]
fn the_version_names_its_commit_and_engines() {
    let out = Command::new(env!("CARGO_BIN_EXE_luge"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.trim_end();
    let prefix = format!("luge {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&prefix), "{line}");
    let commit = &line[prefix.len()..line.find(';').unwrap_or(line.len())];
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{line}"
    );
    // This suite's build has every engine.
    assert!(
        line.ends_with("; engines: wasmtime, wasmer, wasmer-singlepass, wamr)"),
        "{line}"
    );
}

/// `luge completions SHELL` prints clap's completion script for the whole
/// command tree, each mode and its flags; an unknown shell is refused.
#[test]
fn completions_cover_every_mode_and_flag() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_luge"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        // Flags as each shell writes them: `--from`, or fish's `-l from`.
        for word in ["serve", "proxy", "up", "run", "spin", "from", "listen"] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_luge"))
        .args(["completions", "cmd"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
}

/// A port another server holds is one line that says so and how to
/// choose another, for `luge serve` and `luge proxy` alike.
#[test]
fn a_taken_port_is_one_line_with_the_fix() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let cache = tempfile::tempdir().unwrap();
    for mode in ["serve", "proxy"] {
        let out = Command::new(env!("CARGO_BIN_EXE_luge"))
            .args([
                mode,
                "--listen",
                &addr,
                "--cache-dir",
                path_str(cache.path()),
            ])
            .env("LUGE_KEY", TEST_KEY)
            .env("XDG_DATA_HOME", cache.path())
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("luge: error: cannot listen on {addr} (another server holds it: choose a free one with --listen)")),
            "{said}"
        );
    }
}

/// A module that is no command (here: a memory and nothing else) is one
/// line that says what to build instead.
#[test]
fn a_module_that_is_no_command_says_what_to_build() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("library.wasm");
    std::fs::write(
        &module,
        wat::parse_str("(module (memory (export \"memory\") 1))").unwrap(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_luge"))
        .arg("run")
        .arg(&module)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains(
            "it exports no _start (build a program with a main function for wasm32-wasip1"
        ),
        "{said}"
    );
}

#[test]
fn streams_arguments_environment_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    std::fs::write(&input, r#"{"mode":"x"}"#).unwrap();
    let echo = module("echo");
    let out = luge_run(&["--stdin", input.to_str().unwrap(), echo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(last_json(&out.stdout)["mode"], "x");
    assert!(String::from_utf8_lossy(&out.stderr).contains("hello stderr"));

    // Exactly the variables given, and the arguments after the module
    // (hyphens included) as argv[1..].
    let env = module("env");
    let out = luge_run(&[
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        env.to_str().unwrap(),
        "a",
        "-b",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let seen = last_json(&out.stdout);
    assert_eq!(seen["env"], serde_json::json!({"A": "1", "B": "x=y"}));
    assert_eq!(seen["args"], serde_json::json!(["env.wasm", "a", "-b"]));
}

#[test]
fn exit_statuses_and_traps_are_the_process_status() {
    let dir = tempfile::tempdir().unwrap();
    let fail = module("fail");
    let exit = dir.path().join("exit.json");
    std::fs::write(&exit, r#"{"mode":"exit"}"#).unwrap();
    let out = luge_run(&["--stdin", exit.to_str().unwrap(), fail.to_str().unwrap()]);
    assert_exit(&out, 3, "giving up with status 3");

    let trap = dir.path().join("trap.json");
    std::fs::write(&trap, r#"{"mode":"trap"}"#).unwrap();
    let out = luge_run(&["--stdin", trap.to_str().unwrap(), fail.to_str().unwrap()]);
    assert_exit(&out, 134, "luge: trap");

    let spin = module("spin");
    let out = luge_run(&["--timeout-ms", "300", spin.to_str().unwrap()]);
    assert_exit(&out, 134, "time limit");
}

/// Panics, showing the run, unless it exited with `code` and its stdout
/// or stderr holds `needle`.
#[track_caller]
fn assert_exit(out: &Output, code: i32, needle: &str) {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let said = [&out.stdout, &out.stderr].map(|s| String::from_utf8_lossy(s).into_owned());
    assert!(
        said.iter().any(|s| s.contains(needle)),
        "{needle:?}: {out:?}"
    );
}

#[test]
fn directories_are_granted_by_flag_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.txt"), "granted").unwrap();
    let request = dir.path().join("request.json");
    std::fs::write(&request, r#"{"path":"/data/note.txt"}"#).unwrap();
    let files = module("files");
    let grant = format!("{}::/data", dir.path().display());
    for flag in ["--dir", "--dir-ro"] {
        let out = luge_run(&[
            flag,
            &grant,
            "--stdin",
            request.to_str().unwrap(),
            files.to_str().unwrap(),
        ]);
        if flag == "--dir-ro" && engine() == "wamr" {
            // What the engine cannot enforce is refused, as at any init.
            assert_exit(&out, 1, "read-only");
            continue;
        }
        assert_exit(&out, 0, "granted");
    }
    // Without the grant, the file is not there.
    let out = luge_run(&[
        "--stdin",
        request.to_str().unwrap(),
        files.to_str().unwrap(),
    ]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("granted"),
        "{out:?}"
    );
}

#[test]
fn bad_input_is_one_line_and_status_one() {
    let out = luge_run(&["/nonexistent/module.wasm"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("luge: error: cannot read"), "{stderr}");
    let echo = module("echo");
    let out = luge_run(&["--env", "NOEQUALS", echo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected NAME=VALUE"));
    // Limits are checked as at any init: within the operator's maxima.
    for (flag, value, says) in [
        ("--memory-mb", "4096", "exceeds the operator maximum"),
        ("--timeout-ms", "0", "greater than zero"),
    ] {
        let out = luge_run(&[flag, value, echo.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{flag}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{out:?}"
        );
    }
}

/// A UDP peer on 127.0.0.1 that answers each `ping` with `pong`, but
/// first has another socket on 127.0.0.1 (not granted) send `spoof` to
/// the pinger; the peer's port.
fn spoofed_udp_peer() -> u16 {
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let spoofer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = peer.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = peer.recv_from(&mut buf) {
            if &buf[..n] == b"ping" {
                let _ = spoofer.send_to(b"spoof", from);
                std::thread::sleep(std::time::Duration::from_millis(100));
                let _ = peer.send_to(b"pong", from);
            }
        }
    });
    port
}

/// A datagram from a peer no grant names, to a socket that is not
/// connected (so the kernel lets anyone's through), is dropped before the
/// function sees it; the granted peer's reply is received. Under
/// `--inherit-network`, which checks nothing, the spoofed one is first.
#[test]
fn udp_datagrams_from_a_peer_not_granted_are_dropped() {
    crate::common::wasmtime_only!();
    let sockets = module("sockets3");
    let sockets = sockets.to_str().unwrap();
    let port = spoofed_udp_peer();
    let target = format!("127.0.0.1:{port}");
    let grant = format!("udp://127.0.0.1:{port}");
    let out = luge_run(&["--allow-outbound", &grant, sockets, "udp", &target]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("pong from {target}")
    );
    let out = luge_run(&["--inherit-network", sockets, "udp", &target]);
    assert_exit(&out, 0, "spoof from 127.0.0.1:");
}

#[test]
fn wasi_sockets_reach_what_the_flags_grant_and_the_host_network_only_by_inherit_network() {
    let sockets = module("sockets3");
    let sockets = sockets.to_str().unwrap();
    if engine() != "wasmtime" {
        // WASI 0.3 components and wasi:sockets are Wasmtime's.
        let out = luge_run(&["--inherit-network", sockets, "loop"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("has no wasi:sockets"),
            "{out:?}"
        );
        return;
    }
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // Nothing granted: no socket at all.
    let out = luge_run(&[sockets, "loop"]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stderr(&out).contains("error: create: access-denied"),
        "{out:?}"
    );

    // The host's network: a listener, a connection to it, UDP between two
    // sockets, all on loopback, as under `wasmtime run -S inherit-network`.
    let out = luge_run(&["--inherit-network", sockets, "loop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "tcp ping\nudp ping\n");

    // A grant names the server: connect there, and nowhere else; never a
    // listener, even on loopback.
    let port = ping_peer(b"pong");
    let grant = format!("tcp://127.0.0.1:{port}");
    let target = format!("127.0.0.1:{port}");
    let out = luge_run(&["--allow-outbound", &grant, sockets, "connect", &target]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pong");
    let other = format!("127.0.0.1:{}", port.wrapping_add(1).max(1));
    let out = luge_run(&["--allow-outbound", &grant, sockets, "connect", &other]);
    assert!(
        stderr(&out).contains("error: connect: access-denied"),
        "{out:?}"
    );
    let out = luge_run(&["--allow-outbound", &grant, sockets, "loop"]);
    assert!(
        stderr(&out).contains("error: listen: access-denied"),
        "{out:?}"
    );
    // A wildcard reaches public addresses only: not this loopback server.
    let out = luge_run(&["--allow-outbound", "tcp://*:*", sockets, "connect", &target]);
    assert!(
        stderr(&out).contains("error: connect: access-denied"),
        "{out:?}"
    );
    // Output as it is written, as `wasmtime run`'s: a server announces
    // its address, is reached there, and ends.
    let mut server = Command::new(env!("CARGO_BIN_EXE_luge"))
        .args(["run", "--inherit-network", sockets, "listen"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let (line, announced) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut announced = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut announced);
        let _ = line.send(announced);
    });
    // Bounded: output held back until the end would never come.
    let Ok(announced) = announced.recv_timeout(std::time::Duration::from_secs(30)) else {
        let _ = server.kill();
        panic!("no address announced while the server runs");
    };
    let mut peer = std::net::TcpStream::connect(announced.trim()).unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut peer, &mut reply).unwrap();
    assert_eq!(reply, "pong");
    assert!(server.wait().unwrap().success());

    // Name lookups come with a socket grant, and not without one.
    let out = luge_run(&[
        "--allow-outbound",
        "tcp://*:*",
        sockets,
        "resolve",
        "localhost",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("127.0.0.1"),
        "{out:?}"
    );
    let out = luge_run(&[sockets, "resolve", "localhost"]);
    assert!(stderr(&out).contains("error: resolve: "), "{out:?}");
}

#[test]
fn stdin_dash_is_this_process_stdin() {
    use std::io::Write as _;
    // A WASI 0.3 command on Wasmtime (read as it reads it), a core module
    // elsewhere (read whole first): either way what was written arrives.
    let module = if engine() == "wasmtime" {
        module("cli3")
    } else {
        module("echo")
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_luge"))
        .args(["run", "--engine", engine(), "--stdin", "-"])
        .arg(&module)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"mode":"piped"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("piped"),
        "{out:?}"
    );
}
