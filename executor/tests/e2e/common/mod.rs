//! Test harness: starts the real `luge` binary on 127.0.0.1 (port 0), talks
//! HTTP to it, and captures its stdout/stderr. Every test uses example
//! actions built from actions/ by scripts/build-actions.sh.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The artifact key secret every test executor runs with.
pub const TEST_KEY: &str = "luge integration test key 0123456789";

#[allow(unused_imports)]
pub use luge_testkit::init_body;

/// The engine the suite runs against: `LUGE_TEST_ENGINE` (wasmtime, wasmer,
/// wamr),
/// wasmtime by default. scripts/test.sh runs the suite once per engine.
pub fn engine() -> &'static str {
    static ENGINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| std::env::var("LUGE_TEST_ENGINE").unwrap_or_else(|_| "wasmtime".into()))
}

/// Whether the suite runs against Wasmtime, the one engine that serves
/// components (Spin apps, their databases) and describes every metric.
pub fn on_wasmtime() -> bool {
    engine() == "wasmtime"
}

/// Writes `dir/spin.toml`: a Spin app of one component, `app`, whose
/// `source` is as given and whose route is `/...`, with the component's
/// `extra` lines. Its path.
pub fn catch_all_app(dir: &Path, source: &str, extra: &str) -> std::path::PathBuf {
    let manifest = dir.join("spin.toml");
    let text = format!(
        "spin_manifest_version = 2\n[application]\nname = \"app\"\n\
         [[trigger.http]]\nroute = \"/...\"\ncomponent = \"app\"\n\
         [component.app]\nsource = \"{source}\"\n{extra}"
    );
    std::fs::write(&manifest, text).unwrap();
    manifest
}

/// Ends the test at once, passing, unless the suite runs against Wasmtime
/// ([`on_wasmtime`]): the opening of each test of what only it serves.
#[allow(unused_macros)] // each test binary uses its part
macro_rules! wasmtime_only {
    () => {
        if !$crate::common::on_wasmtime() {
            return;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use wasmtime_only;

/// Example `name` through the luge-precompile binary (built with the
/// workspace) for the engine under test.
fn sealed_by_precompiler(name: &str) -> Vec<u8> {
    precompiled(name, &["--engine", engine()])
}

/// The example action `name` as `luge-precompile <args>` seals it under
/// the test key.
pub fn precompiled(name: &str, args: &[&str]) -> Vec<u8> {
    precompiled_with_key(name, args, TEST_KEY)
}

/// Like [`precompiled`], sealed with the key secret `key`.
pub fn precompiled_with_key(name: &str, args: &[&str], key: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.wasm");
    let output = dir.path().join("out.luge");
    std::fs::write(&input, wasm(name)).unwrap();
    let status = Command::new(precompiler())
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .args(args)
        .env("LUGE_KEY", key)
        .status()
        .expect("luge-precompile runs");
    assert!(status.success(), "luge-precompile {args:?}");
    std::fs::read(output).unwrap()
}

/// The luge-precompile binary built beside luge.
fn precompiler() -> std::path::PathBuf {
    Path::new(env!("CARGO_BIN_EXE_luge")).with_file_name("luge-precompile")
}

/// A built example action.
pub fn wasm(name: &str) -> Vec<u8> {
    luge_testkit::example_wasm(name)
}

/// Example `name` precompiled for the engine under test and sealed with the
/// key the test executors run with.
pub fn sealed(name: &str) -> Vec<u8> {
    sealed_by_precompiler(name)
}

/// A running `luge` process.
pub struct Luge {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    _cache: tempfile::TempDir,
    agent: ureq::Agent,
}

fn capture(
    stream: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
    announce: Option<std::sync::mpsc::Sender<String>>,
) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if let (Some(tx), Some(addr)) =
                (&announce, line.trim().strip_prefix("luge listening on "))
            {
                let _ = tx.send(addr.to_owned());
            }
            into.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
}

/// What luge is started under.
#[derive(Clone, Copy)]
enum Wrap<'a> {
    /// Nothing.
    None,
    /// An address-space limit, KiB.
    Ulimit(u64),
    /// A tmpfs of this many KiB mounted on this directory.
    Tmpfs(&'a Path, u64),
}

/// A response with its headers.
pub struct Reply {
    pub status: u16,
    pub headers: ureq::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    /// A header as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The body as JSON (`null` when it is not JSON).
    pub fn json(&self) -> Value {
        parse(&self.body)
    }

    /// The body as text (lossy), for a message.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Panics, showing the body, unless the status is `status`.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "{}", self.text());
        self
    }
}

/// Panics, showing `body`, unless its `error` (a JSON error answer's, or
/// a call's result's) holds `needle`.
#[track_caller]
pub fn assert_error(body: &Value, needle: &str) {
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(needle),
        "no {needle:?} in the error of {body}"
    );
}

thread_local! {
    /// Whether the luge this test thread starts share one compile cache
    /// ([`sharing_compiles`]).
    static SHARING_COMPILES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Until the guard it returns is dropped, every luge this test starts
/// keeps its compiled modules in one cache shared by all such tests of
/// this build (under `CARGO_TARGET_TMPDIR`) rather than a fresh one of its
/// own: for tests of the 12-18 MB interpreter components (JavaScript,
/// Python), each of which costs a cold compile of 20-40 s on the 2-core
/// machine, and more beside the suite's other tests. Their subject is what
/// the function does, not how it was compiled; tests of the cache itself
/// (compiles counted, artifacts refused) keep caches of their own. Every
/// server signs with the suite's one key, so each accepts what another
/// wrote; artifacts are written whole (temp file and rename), so servers
/// compiling one module at once leave a whole one.
#[must_use = "sharing ends when the guard is dropped"]
pub fn sharing_compiles() -> SharingCompiles {
    SHARING_COMPILES.with(|on| on.set(true));
    SharingCompiles(())
}

/// While it lives, this test's luge share compiled modules
/// ([`sharing_compiles`]).
pub struct SharingCompiles(());

impl Drop for SharingCompiles {
    fn drop(&mut self) {
        SHARING_COMPILES.with(|on| on.set(false));
    }
}

impl Luge {
    /// Starts `luge <mode> --listen 127.0.0.1:0 <args>`.
    pub fn start(mode: &str, args: &[&str]) -> Self {
        Self::try_start(mode, args).unwrap_or_else(|stderr| panic!("luge did not start: {stderr}"))
    }

    /// Starts luge like [`Luge::start`]; if it exits or does not announce
    /// its address within 30 s, returns what it wrote to stderr.
    pub fn try_start(mode: &str, args: &[&str]) -> Result<Self, String> {
        Self::try_start_within(mode, args, None, &[])
    }

    /// Starts luge like [`Luge::start`] with `env` added to its
    /// environment (what OpenWhisk gives an action container).
    pub fn start_with_env(mode: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::try_start_within(mode, args, None, env)
            .unwrap_or_else(|stderr| panic!("luge did not start: {stderr}"))
    }

    /// [`Luge::start_with_env`], or luge's error output if it did not start.
    pub fn try_start_with_env(
        mode: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        Self::try_start_within(mode, args, None, env)
    }

    /// Starts luge like [`Luge::start`] under an address-space limit
    /// (`ulimit -v`, KiB): what a Raspberry Pi OS kernel's 39-bit user
    /// addresses allow, or an operator's limit.
    pub fn start_within(mode: &str, args: &[&str], address_space_kib: u64) -> Self {
        Self::try_start_within(mode, args, Some(address_space_kib), &[])
            .unwrap_or_else(|stderr| panic!("luge did not start: {stderr}"))
    }

    /// Whether this machine lets a test mount a small filesystem of its
    /// own (a tmpfs in a user and mount namespace, `unshare -Urm`).
    pub fn can_mount_tmpfs() -> bool {
        Command::new("unshare")
            .args([
                "-Urm",
                "sh",
                "-c",
                "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\"; rc=$?; umount \"$d\"; rmdir \"$d\"; exit $rc",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts luge like [`Luge::start`] in a mount namespace of its own
    /// where `dir` is a tmpfs of `kib` KiB (with `dir/fill` made in it):
    /// a small filesystem the test can fill up. Only luge sees it.
    pub fn start_on_tmpfs(mode: &str, args: &[&str], dir: &Path, kib: u64) -> Self {
        Self::try_start_wrapped(mode, args, Wrap::Tmpfs(dir, kib), &[])
            .unwrap_or_else(|stderr| panic!("luge did not start: {stderr}"))
    }

    fn try_start_within(
        mode: &str,
        args: &[&str],
        address_space_kib: Option<u64>,
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        let wrap = address_space_kib.map_or(Wrap::None, Wrap::Ulimit);
        Self::try_start_wrapped(mode, args, wrap, env)
    }

    fn try_start_wrapped(
        mode: &str,
        args: &[&str],
        wrap: Wrap<'_>,
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        let cache = tempfile::tempdir().unwrap();
        let mut command = match wrap {
            Wrap::None => Command::new(env!("CARGO_BIN_EXE_luge")),
            Wrap::Ulimit(kib) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_luge"));
                shell
            }
            Wrap::Tmpfs(dir, kib) => {
                let mut shell = Command::new("unshare");
                shell
                    .args(["-Urm", "--propagation", "private", "sh", "-c"])
                    .arg(format!(
                        "mount -t tmpfs -o size={kib}k tmpfs \"$LUGE_TMPFS\" && mkdir \"$LUGE_TMPFS/fill\" && exec \"$0\" \"$@\""
                    ))
                    .arg(env!("CARGO_BIN_EXE_luge"))
                    .env("LUGE_TMPFS", dir);
                shell
            }
        };
        // On a tmpfs, the compile cache is there too.
        let cache_dir = match wrap {
            Wrap::Tmpfs(dir, _) => dir.join("cache"),
            _ => cache.path().to_owned(),
        };
        if !matches!(wrap, Wrap::Tmpfs(..)) && SHARING_COMPILES.with(std::cell::Cell::get) {
            let shared = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join("e2e-compiled")
                .join(engine());
            std::fs::create_dir_all(&shared).unwrap();
            std::os::unix::fs::symlink(&shared, cache_dir.join("modules")).unwrap();
        }
        let mut child = command
            .arg(mode)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--engine",
                engine(),
                "--cache-dir",
            ])
            .arg(cache_dir)
            .args(args)
            .env("LUGE_KEY", TEST_KEY)
            // The data directory (state, uploads) is the test's own.
            .env("XDG_DATA_HOME", cache.path())
            .envs(env.iter().copied())
            .env_remove("LUGE_LOG")
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("luge binary starts");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        capture(child.stdout.take().unwrap(), Arc::clone(&stdout), None);
        capture(child.stderr.take().unwrap(), Arc::clone(&stderr), Some(tx));
        let started = Instant::now();
        let base = loop {
            if let Ok(base) = rx.recv_timeout(Duration::from_millis(50)) {
                break base;
            }
            let exited = child.try_wait().unwrap().is_some();
            // Generous: routes of 12-18 MB components (JavaScript, Python)
            // compile before the listener opens, beside other tests on two
            // cores.
            if exited || started.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let _ = child.wait();
                // Let the capture thread take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Err(stderr.lock().unwrap().clone());
            }
        };
        let agent = luge_testkit::http_agent();
        Ok(Self {
            child,
            base,
            stdout,
            stderr,
            _cache: cache,
            agent,
        })
    }

    /// `http://ADDR` of a Sledge tenant's listener, from its announcement.
    pub fn tenant(&self, name: &str) -> String {
        let prefix = format!("luge tenant {name} listening on ");
        self.stderr
            .lock()
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("tenant {name} not announced"))
    }

    /// Sends `method url` (a path on this executor, or a full URL) with
    /// `headers` and `body`.
    pub fn send(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let url = if url.starts_with("http") {
            url.to_owned()
        } else {
            format!("{}{url}", self.base)
        };
        let mut request = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = match method {
            "GET" | "DELETE" => self.agent.run(request.body(()).unwrap()),
            "POST" | "PUT" => self.agent.run(request.body(body).unwrap()),
            other => panic!("method {other}"),
        };
        let response = response.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let headers = response.headers().clone();
        let (status, body) = luge_testkit::status_and_body(response);
        Reply {
            status,
            headers,
            body,
        }
    }

    /// Sends luge SIGTERM (what Kubernetes and systemd send to stop it).
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// luge's exit status, once it has exited within `within`.
    pub fn exited_within(
        &mut self,
        within: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let until = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() > until {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Everything luge wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Everything luge wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether luge's stderr holds `needle` within 5 s: a thread collects
    /// stderr, so a line written just before a response may arrive after it.
    pub fn stderr_shows(&self, needle: &str) -> bool {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if self.stderr().contains(needle) {
                return true;
            }
            if std::time::Instant::now() > until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Sends `method path` with `body`; returns status and raw body.
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let response = match method {
            "GET" => self.agent.get(&url).call(),
            "POST" => self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(body),
            "PUT" => self.agent.put(&url).send(body),
            "DELETE" => self.agent.delete(&url).call(),
            other => panic!("method {other}"),
        };
        luge_testkit::status_and_body(response.unwrap_or_else(|e| panic!("{method} {path}: {e}")))
    }

    /// POSTs JSON; returns status and the JSON reply.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, body) = self.request("POST", path, &serde_json::to_vec(body).unwrap());
        (status, parse(&body))
    }

    /// POSTs the init `body` to `path`, which must take it (200).
    #[track_caller]
    pub fn init_ok(&self, path: &str, body: &Value) {
        let (status, reply) = self.post(path, body);
        assert_eq!(status, 200, "{path}: {reply}");
    }

    /// Uploads `code` as function `name` (`PUT /v1/functions/NAME`) with
    /// the operator's `token`.
    pub fn upload(&self, token: &str, name: &str, code: &[u8]) -> Reply {
        let auth = format!("Bearer {token}");
        let path = format!("/v1/functions/{name}");
        self.send("PUT", &path, &[("authorization", &auth)], code)
    }

    /// Initializes container `name` (`/NAME/init`) with example action
    /// `example` and its `main`, with `annotations`: the status.
    pub fn init_example(&self, name: &str, example: &str, annotations: Value) -> u16 {
        let body = init_body(
            &wasm(example),
            "main",
            json!({ "annotations": annotations }),
        );
        self.post(&format!("/{name}/init"), &body).0
    }

    /// The value of the first sample of `/metrics` whose line holds
    /// `needle` (0 when none does).
    pub fn metric(&self, needle: &str) -> f64 {
        self.get_text("/metrics")
            .lines()
            .find(|l| l.contains(needle) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// GET `path`, the body as text.
    pub fn get_text(&self, path: &str) -> String {
        String::from_utf8(self.request("GET", path, b"").1).unwrap()
    }

    /// GETs JSON.
    pub fn get(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.request("GET", path, b"");
        (status, parse(&body))
    }

    /// Everything the process wrote to stdout and stderr so far, once both
    /// hold at least `sentinels` activation sentinels (or after 5 s).
    pub fn streams(&self, sentinels: usize) -> (String, String) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let out = self.stdout.lock().unwrap().clone();
            let err = self.stderr.lock().unwrap().clone();
            let enough = |s: &str| s.matches(luge_openwhisk_sentinel()).count() >= sentinels;
            if (enough(&out) && enough(&err)) || Instant::now() > deadline {
                return (out, err);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the process, bytes (VmRSS: in kB whatever the
    /// page size).
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb << 10
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Luge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn luge_openwhisk_sentinel() -> &'static str {
    "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
}

/// A reply body as JSON (`null` when it is not JSON).
pub fn parse(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// One action container as OpenWhisk sees it, behind either front end.
pub trait ActionContainer {
    /// POST /init.
    fn init(&self, body: &Value) -> (u16, Value);
    /// POST /run.
    fn run(&self, body: &Value) -> (u16, Value);
    /// The activation logs so far: (stdout, stderr), waiting for `sentinels`.
    fn logs(&self, sentinels: usize) -> (String, String);
    /// POSTs the init `body`, which must be taken (200).
    #[track_caller]
    fn init_ok(&self, body: &Value) {
        let (status, reply) = self.init(body);
        assert_eq!(status, 200, "{reply}");
    }

    /// Initializes the example `module`, runs it and expects OpenWhisk's
    /// answer to a result that is no JSON object.
    #[track_caller]
    fn refuses_a_result_not_a_dictionary(&self, module: &str) {
        self.init_example(module);
        let (status, body) = self.run(&serde_json::json!({}));
        assert_ne!(status, 200);
        let error = "The action did not return a dictionary.";
        assert_eq!(body, serde_json::json!({ "error": error }));
    }

    /// Initializes the example `module` (its `main`, no parameters),
    /// which must succeed.
    #[track_caller]
    fn init_example(&self, module: &str) {
        self.init_ok(&init_body(&wasm(module), "main", serde_json::json!({})));
    }

    /// Both log streams together, once they hold `needle` (or after 5 s):
    /// a line outside an activation has no sentinel to wait for, and the
    /// process's streams are read by another thread.
    fn logs_containing(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (out, err) = self.logs(0);
            let both = format!("{out}{err}");
            if both.contains(needle) || Instant::now() > deadline {
                return both;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `luge proxy`: the container is the process.
pub struct ProxyContainer(pub Luge);

impl ActionContainer for ProxyContainer {
    fn init(&self, body: &Value) -> (u16, Value) {
        self.0.post("/init", body)
    }
    fn run(&self, body: &Value) -> (u16, Value) {
        self.0.post("/run", body)
    }
    fn logs(&self, sentinels: usize) -> (String, String) {
        let (out, err) = self.0.streams(sentinels);
        // The announcement line is the executor's, not the action's.
        let err = err
            .lines()
            .filter(|l| !l.starts_with("luge listening on"))
            .collect::<Vec<_>>()
            .join("\n");
        (out, err)
    }
}

/// `luge serve`: one container id on a shared process.
pub struct ServeContainer<'a> {
    pub luge: &'a Luge,
    pub id: String,
}

impl ActionContainer for ServeContainer<'_> {
    fn init(&self, body: &Value) -> (u16, Value) {
        self.luge.post(&format!("/{}/init", self.id), body)
    }
    fn run(&self, body: &Value) -> (u16, Value) {
        self.luge.post(&format!("/{}/run", self.id), body)
    }
    fn logs(&self, _sentinels: usize) -> (String, String) {
        let (status, logs) = self.luge.get(&format!("/{}/logs", self.id));
        assert_eq!(status, 200, "{logs}");
        let mut out = String::new();
        let mut err = String::new();
        for line in logs["logs"].as_array().unwrap() {
            let target = if line["stream"] == "stdout" {
                &mut out
            } else {
                &mut err
            };
            target.push_str(line["log"].as_str().unwrap());
            target.push('\n');
        }
        (out, err)
    }
}

/// Runs `scenario` against a fresh `luge proxy` and against a container of
/// a shared `luge serve`, with the same extra flags.
pub fn on_both_front_ends(args: &[&str], scenario: impl Fn(&dyn ActionContainer)) {
    let proxy = ProxyContainer(Luge::start("proxy", args));
    scenario(&proxy);
    let serve = Luge::start("serve", args);
    scenario(&ServeContainer {
        luge: &serve,
        id: "c1".into(),
    });
}

/// The directory the tests use as `--fs-root`, with fixtures inside.
pub fn fs_root_fixture() -> (tempfile::TempDir, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("data/ro")).unwrap();
    std::fs::create_dir_all(root.path().join("data/rw")).unwrap();
    std::fs::write(root.path().join("data/ro/hello.txt"), "hello from the host").unwrap();
    std::fs::write(root.path().join("secret.txt"), "not granted").unwrap();
    std::fs::write(outside.path().join("outside.txt"), "outside the root").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("data/escape")).unwrap();
    (root, outside)
}

/// Path as a str.
pub fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Reads a whole raw HTTP reply: status and JSON body.
pub fn read_reply(stream: &mut std::net::TcpStream) -> (u16, serde_json::Value) {
    use std::io::Read;
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// Reads one reply from a keep-alive connection (its head, then as many
/// body bytes as its `content-length` says): its status and body; status 0
/// if the connection ends or fails first.
pub fn read_one_reply(stream: &mut std::net::TcpStream) -> (u16, Vec<u8>) {
    use std::io::Read;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&reply).to_ascii_lowercase();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let body = head_end + 4;
            if reply.len() >= body + length {
                let status = text
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return (status, reply[body..body + length].to_vec());
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return (0, Vec::new()),
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A raw connection to `luge`.
pub fn connect(luge: &Luge) -> std::net::TcpStream {
    let addr = luge.base.trim_start_matches("http://");
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Sends only the headers of a `method path` announcing a `len`-byte body,
/// and reads the answer (a well-behaved server refuses before reading).
pub fn announce_oversized(
    luge: &Luge,
    method: &str,
    path: &str,
    len: usize,
) -> (u16, serde_json::Value) {
    use std::io::Write;
    let mut stream = connect(luge);
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_reply(&mut stream)
}

/// Streams a `len`-byte chunked body with no Content-Length.
pub fn raw_chunked(luge: &Luge, path: &str, len: usize) -> (u16, serde_json::Value) {
    use std::io::Write;
    let mut stream = connect(luge);
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let chunk = vec![b'a'; 64 << 10];
    for _ in 0..len / chunk.len() {
        if write!(stream, "{:x}\r\n", chunk.len()).is_err()
            || stream.write_all(&chunk).is_err()
            || stream.write_all(b"\r\n").is_err()
        {
            break; // the server answered and closed: read what it said
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    read_reply(&mut stream)
}

/// A folder holding example modules (`NAME.wasm`) and a `luge.toml`, for
/// `luge serve --config`.
pub struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    /// Writes the examples `modules` and `toml`.
    pub fn new(modules: &[&str], toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for name in modules {
            std::fs::write(dir.path().join(format!("{name}.wasm")), wasm(name)).unwrap();
        }
        let site = Self { dir };
        site.write_config(toml);
        site
    }

    /// Writes `wasm` as the module `NAME.wasm`.
    pub fn add_module(&self, name: &str, wasm: &[u8]) {
        std::fs::write(self.dir.path().join(format!("{name}.wasm")), wasm).unwrap();
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces the config.
    pub fn write_config(&self, toml: &str) {
        std::fs::write(self.config(), toml).unwrap();
    }

    /// Its `luge.toml`.
    pub fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("luge.toml")
    }

    /// `luge serve --config luge.toml ARGS`, or its error output.
    pub fn try_start(&self, args: &[&str]) -> Result<Luge, String> {
        let config = self.config();
        let mut all = vec!["--config", path_str(&config)];
        all.extend_from_slice(args);
        Luge::try_start("serve", &all)
    }

    /// `luge serve --config luge.toml ARGS` with `env` besides.
    pub fn start_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Luge {
        let config = self.config();
        let mut all = vec!["--config", path_str(&config)];
        all.extend_from_slice(args);
        Luge::start_with_env("serve", &all, env)
    }

    /// `luge serve --config luge.toml ARGS`.
    pub fn start(&self, args: &[&str]) -> Luge {
        self.try_start(args)
            .unwrap_or_else(|stderr| panic!("luge did not start: {stderr}"))
    }
}

/// `luge serve --spin MANIFEST --state-dir STATE ARGS` with `env` besides.
pub fn serve_spin(manifest: &Path, state: &Path, args: &[&str], env: &[(&str, &str)]) -> Luge {
    let mut all = vec!["--spin", path_str(manifest), "--state-dir", path_str(state)];
    all.extend_from_slice(args);
    Luge::start_with_env("serve", &all, env)
}

/// A one-page HTTP answer (`upstream!`), what the tests' upstreams send.
pub const UPSTREAM: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nupstream!";

/// A TCP server on 127.0.0.1 that answers each connection with `reply`
/// once it has read `ping\n`; it runs until the test process ends. Its
/// port.
pub fn ping_peer(reply: &'static [u8]) -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        while let Ok((mut stream, _)) = listener.accept() {
            let mut line = [0u8; 5];
            if stream.read_exact(&mut line).is_ok() && &line == b"ping\n" {
                let _ = stream.write_all(reply);
            }
        }
    });
    port
}

/// A TCP peer on 127.0.0.1 that answers each connection's first read
/// with `reply` and closes it; it runs until the test process ends. Its
/// port.
pub fn tcp_peer(reply: &'static [u8]) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                if std::io::Read::read(&mut stream, &mut buf).is_ok() {
                    let _ = std::io::Write::write_all(&mut stream, reply);
                }
            });
        }
    });
    port
}
