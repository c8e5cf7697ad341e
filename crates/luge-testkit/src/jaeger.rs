//! A real Jaeger (v1.76.0, its all-in-one mode: an OpenTelemetry
//! collector receiving OTLP with an in-memory store and the query API)
//! for the telemetry tests: started on free loopback ports, killed when
//! dropped; traces are read back through its HTTP query API
//! (`/api/traces`); log records and metrics, which it does not store, are
//! printed by its `debug` exporter ([`JaegerServer::received`]).
//! `./scripts/build-jaeger.sh` (which `./scripts/test.sh` runs) builds it
//! from the Go module proxy into `target/tools/jaeger/jaeger` (or set
//! `LUGE_JAEGER`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::{self, ServerError};

const NAME: &str = "jaeger";

/// Why Jaeger could not be started or read.
#[derive(Debug, thiserror::Error)]
pub enum JaegerError {
    /// It could not be prepared, run, or did not listen in time.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The query API could not be asked.
    #[error("jaeger's query API")]
    Query(#[from] ureq::Error),
    /// The query API's answer was not JSON.
    #[error("jaeger's query API answered no JSON")]
    Json(#[from] serde_json::Error),
    /// A trace did not have its spans in time.
    #[error("trace {id} has {found} of its {spans} spans after {timeout:?}")]
    Incomplete {
        /// The trace.
        id: String,
        /// The spans awaited.
        spans: usize,
        /// The spans found at the last look.
        found: usize,
        /// How long it was awaited.
        timeout: Duration,
        /// The last look's error, if it failed.
        #[source]
        last: Option<ureq::Error>,
    },
}

/// A running Jaeger on 127.0.0.1.
#[derive(Debug)]
pub struct JaegerServer {
    child: Child,
    _dir: tempfile::TempDir,
    /// OTLP over gRPC.
    pub otlp_grpc_port: u16,
    /// OTLP over HTTP.
    pub otlp_http_port: u16,
    /// The query API (HTTP).
    pub query_port: u16,
}

/// Where the binary is: `LUGE_JAEGER`, else build-jaeger.sh's build.
pub fn binary() -> PathBuf {
    std::env::var_os("LUGE_JAEGER").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/jaeger/jaeger"),
        PathBuf::from,
    )
}

impl JaegerServer {
    /// Starts one on free ports; waits up to 30 s for its receivers and
    /// query API.
    pub fn start() -> Result<Self, JaegerError> {
        let port = || server::free_port(NAME);
        let (grpc, http, query, query_grpc) = (port()?, port()?, port()?, port()?);
        let dir = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let config = dir.path().join("jaeger.yaml");
        server::write(
            NAME,
            &config,
            format!(
                "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    logs:
      receivers: [otlp]
      exporters: [debug]
    metrics:
      receivers: [otlp]
      exporters: [debug]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
  debug:
    verbosity: detailed
    use_internal_logger: false
"
            ),
        )?;
        let output =
            std::fs::File::create(dir.path().join("output")).map_err(ServerError::setup(NAME))?;
        let child = server::spawn(
            Command::new(binary())
                .arg("--config")
                .arg(format!("file:{}", config.display()))
                .stdout(output)
                .stderr(Stdio::null()),
            "./scripts/build-jaeger.sh builds it",
        )?;
        // Killed when dropped, should it not start.
        let this = Self {
            child,
            _dir: dir,
            otlp_grpc_port: grpc,
            otlp_http_port: http,
            query_port: query,
        };
        server::wait_listening(NAME, &[grpc, http, query], Duration::from_secs(30))?;
        Ok(this)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The OTLP/gRPC endpoint, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_grpc_port)
    }

    /// The OTLP/HTTP base endpoint.
    pub fn http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_http_port)
    }

    /// The traces of `service` Jaeger holds (up to `limit`), as its query
    /// API returns them (`data`: each with `traceID`, `spans` and
    /// `processes`).
    pub fn traces(
        &self,
        service: &str,
        limit: usize,
    ) -> Result<Vec<serde_json::Value>, JaegerError> {
        let url = format!(
            "http://127.0.0.1:{}/api/traces?service={service}&limit={limit}&lookback=1h",
            self.query_port
        );
        let text = ureq::get(&url).call()?.body_mut().read_to_string()?;
        let body: serde_json::Value = serde_json::from_str(&text)?;
        Ok(body["data"].as_array().cloned().unwrap_or_default())
    }

    /// The trace `id` (hex), once Jaeger holds at least `spans` spans of
    /// it; waits up to `timeout`.
    pub fn wait_for_trace(
        &self,
        id: &str,
        spans: usize,
        timeout: Duration,
    ) -> Result<serde_json::Value, JaegerError> {
        let url = format!("http://127.0.0.1:{}/api/traces/{id}", self.query_port);
        let until = Instant::now() + timeout;
        loop {
            let (found, last) = match ureq::get(&url).call() {
                Ok(mut response) => {
                    let text = response.body_mut().read_to_string()?;
                    let body: serde_json::Value = serde_json::from_str(&text)?;
                    let trace = body["data"][0].clone();
                    let found = trace["spans"].as_array().map_or(0, Vec::len);
                    if found >= spans {
                        return Ok(trace);
                    }
                    (found, None)
                }
                Err(e) => (0, Some(e)),
            };
            if Instant::now() > until {
                return Err(JaegerError::Incomplete {
                    id: id.to_owned(),
                    spans,
                    found,
                    timeout,
                    last,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What it printed of the log records and metrics it received (its
    /// `debug` exporter's detailed output).
    pub fn received(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("output")).unwrap_or_default()
    }

    /// Stops it answering (SIGSTOP): its ports still accept connections,
    /// which then stall, as a collector that hangs does.
    pub fn pause(&self) {
        signal(self.child.id(), "-STOP");
    }

    /// Lets it answer again (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.id(), "-CONT");
    }
}

fn signal(pid: u32, which: &str) {
    let _ = Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status();
}

impl Drop for JaegerServer {
    fn drop(&mut self) {
        signal(self.child.id(), "-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
