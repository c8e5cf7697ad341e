//! A closed-loop HTTP load generator for loopback experiments.
//!
//! `concurrency` clients each keep one keep-alive connection and send the
//! next request as soon as the previous answer is read (Sledge's and wrk's
//! model). The generator runs on one thread, so on a small machine it takes
//! at most one core from the server under test, the same for every target
//! measured in a run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// What one load point measured.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Requests answered 200 with the expected body length in the window.
    pub ok: u64,
    /// Other answers and connection failures in the window.
    pub errors: u64,
    /// Length of the measured window.
    pub window: Duration,
    /// Latency of each successful request, µs, sorted.
    pub latencies_us: Vec<u32>,
}

impl LoadReport {
    /// Successful requests per second.
    pub fn throughput(&self) -> f64 {
        self.ok as f64 / self.window.as_secs_f64()
    }

    /// Latency at percentile `p` (0-100), µs.
    pub fn percentile_us(&self, p: f64) -> u32 {
        let latencies: crate::stats::Latencies = self
            .latencies_us
            .iter()
            .map(|&us| Duration::from_micros(u64::from(us)))
            .collect();
        u32::try_from(latencies.percentile(p).as_micros()).unwrap_or(u32::MAX)
    }
}

/// One request shape.
#[derive(Debug, Clone)]
pub struct Target {
    /// Server address.
    pub addr: SocketAddr,
    /// Method and path.
    pub method: hyper::Method,
    /// Path and query.
    pub path: String,
    /// Request body.
    pub body: Bytes,
    /// Body length a correct answer has, when known.
    pub expect_len: Option<usize>,
    /// Headers sent besides Host.
    pub headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
}

/// Drives `target` with `concurrency` clients: `warmup`, then a measured
/// `window`.
pub fn closed_loop(
    target: &Target,
    concurrency: usize,
    warmup: Duration,
    window: Duration,
) -> LoadReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let start = Instant::now() + warmup;
        let end = start + window;
        let mut clients = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            clients.push(tokio::spawn(client(target.clone(), start, end)));
        }
        let mut report = LoadReport {
            window,
            ..LoadReport::default()
        };
        for c in clients {
            if let Ok(part) = c.await {
                report.ok += part.ok;
                report.errors += part.errors;
                report.latencies_us.extend(part.latencies_us);
            }
        }
        report.latencies_us.sort_unstable();
        report
    })
}

/// `target`'s request: its method, path, body and headers, Host set.
fn request(target: &Target) -> hyper::Request<Full<Bytes>> {
    let mut request = hyper::Request::builder()
        .method(target.method.clone())
        .uri(&target.path)
        .header(hyper::header::HOST, "127.0.0.1")
        .body(Full::new(target.body.clone()))
        .expect("request");
    request.headers_mut().extend(target.headers.iter().cloned());
    request
}

async fn client(target: Target, start: Instant, end: Instant) -> LoadReport {
    let mut report = LoadReport::default();
    let mut sender = None;
    while Instant::now() < end {
        if sender.is_none() {
            sender = connect(target.addr).await;
            if sender.is_none() {
                report.errors += u64::from(Instant::now() >= start);
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        let request = request(&target);
        let sent = Instant::now();
        let answer = match s.send_request(request).await {
            Ok(response) => {
                let status = response.status();
                response
                    .into_body()
                    .collect()
                    .await
                    .ok()
                    .map(|b| (status, b.to_bytes().len()))
            }
            Err(_) => None,
        };
        let measured = sent >= start && Instant::now() <= end;
        match answer {
            Some((status, len))
                if status == hyper::StatusCode::OK
                    && target.expect_len.is_none_or(|e| e == len) =>
            {
                if measured {
                    report.ok += 1;
                    report
                        .latencies_us
                        .push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
            }
            Some(_) => report.errors += u64::from(measured),
            None => {
                report.errors += u64::from(measured);
                sender = None;
            }
        }
    }
    report
}

async fn connect(addr: SocketAddr) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    Some(sender)
}

/// Sends `target`'s request once on a connection of its own and waits up
/// to `timeout` for the whole answer: its status and body, or `None` if the
/// connection failed or the time ran out. For the requests that set up an
/// experiment (seeding a store), whose first answer may take a sandbox's
/// cold start and so must not be bound to a load window.
pub fn once(target: &Target, timeout: Duration) -> Option<(hyper::StatusCode, Bytes)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        tokio::time::timeout(timeout, async {
            let mut sender = connect(target.addr).await?;
            let request = request(target);
            let response = sender.send_request(request).await.ok()?;
            let status = response.status();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, body))
        })
        .await
        .ok()
        .flatten()
    })
}

/// Keep-alive connections to one server, shared by the tasks of an
/// open-loop run: a task takes an idle one (or opens one) per request and
/// gives it back after reading the answer.
#[derive(Clone)]
pub struct Pool {
    addr: SocketAddr,
    idle: std::sync::Arc<std::sync::Mutex<Vec<Sender>>>,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

impl Pool {
    /// A pool of connections to `addr`, none open yet.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            idle: std::sync::Arc::default(),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Sender>> {
        // Held for a push or a pop only; ignore poisoning.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// POSTs `body` to `path`: the status and body, or `None` if the
    /// connection failed.
    pub async fn post(&self, path: &str, body: Bytes) -> Option<(hyper::StatusCode, Bytes)> {
        let popped = self.idle().pop();
        let mut sender = match popped {
            Some(sender) => sender,
            None => connect(self.addr).await?,
        };
        sender.ready().await.ok()?;
        let request = hyper::Request::builder()
            .method(hyper::Method::POST)
            .uri(path)
            .header(hyper::header::HOST, "127.0.0.1")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("request");
        let response = sender.send_request(request).await.ok()?;
        let status = response.status();
        let body = response.into_body().collect().await.ok()?.to_bytes();
        self.idle().push(sender);
        Some((status, body))
    }
}

/// Drives an open loop: arrivals of a Poisson process at `rate` per second
/// (seeded by `seed`), each starting `job` in a task of its own whether or
/// not earlier ones have finished. The first `warmup` of arrivals is not
/// measured; latency runs from an arrival's scheduled time (so a generator
/// that falls behind counts against the server, not for it) to its job's
/// end. Jobs return whether they succeeded. Arrivals are paced by a thread
/// of their own with `std::thread::sleep` (tens of µs late at most, where
/// tokio's timer would round up to the next millisecond); the jobs run on
/// one other thread.
pub fn open_loop<F, Fut>(
    rate: f64,
    warmup: Duration,
    window: Duration,
    seed: u64,
    job: F,
) -> LoadReport
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    use rand::{RngExt, SeedableRng};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let begin = Instant::now();
    let (start, end) = (begin + warmup, begin + warmup + window);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let pacer = std::thread::spawn(move || {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut at = begin;
        while at < end {
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if tx.send(at).is_err() {
                return;
            }
            let u: f64 = rng.random();
            at += Duration::from_secs_f64(-(1.0 - u).ln() / rate);
        }
    });
    let report = runtime.block_on(async {
        let mut running = Vec::new();
        while let Some(scheduled) = rx.recv().await {
            let measured = scheduled >= start;
            let work = job();
            running.push(tokio::spawn(async move {
                let ok = work.await;
                (measured, ok, scheduled.elapsed())
            }));
        }
        let mut report = LoadReport {
            window,
            ..LoadReport::default()
        };
        for task in running {
            match task.await {
                Ok((true, true, latency)) => {
                    report.ok += 1;
                    report
                        .latencies_us
                        .push(latency.as_micros().min(u32::MAX as u128) as u32);
                }
                Ok((true, false, _)) | Err(_) => report.errors += 1,
                Ok((false, _, _)) => {}
            }
        }
        report.latencies_us.sort_unstable();
        report
    });
    let _ = pacer.join();
    report
}

/// TLB shootdowns so far, every core's together: the `TLB:` line of
/// `/proc/interrupts` (x86 Linux; `None` elsewhere). Each is an
/// inter-processor interrupt one core sent another to flush a mapping that
/// changed (a copy-on-write fault or a decommit in a process running on
/// both); the count over a load point, divided by its requests, is the
/// cost in IPIs of a request. It counts the whole machine: a quiet one is
/// needed, as for every figure here.
pub fn tlb_shootdowns() -> Option<u64> {
    let interrupts = std::fs::read_to_string("/proc/interrupts").ok()?;
    let line = interrupts
        .lines()
        .find(|line| line.trim_start().starts_with("TLB:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map_while(|cell| cell.parse::<u64>().ok())
            .sum(),
    )
}

/// Microseconds of `cpu` (a server's, over a window) per request of the
/// `requests` it answered then (none answered: all of it).
pub fn cpu_us_per_request(cpu: Duration, requests: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / requests.max(1) as f64
}

/// TLB shootdowns per request between two [`tlb_shootdowns`] readings, as
/// a table cell ("-" where the kernel does not count them).
pub fn shootdowns_per_request(before: Option<u64>, after: Option<u64>, requests: u64) -> String {
    match (before, after) {
        (Some(before), Some(after)) => format!(
            "{:.2}",
            after.saturating_sub(before) as f64 / requests.max(1) as f64
        ),
        _ => "-".to_owned(),
    }
}
