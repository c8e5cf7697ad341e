//! `queues`: how fast the durable queue triggers (Redis Streams, NATS
//! JetStream) drain a backlog on one worker and on two, and Luge's CPU
//! per message; Redis pub/sub with the same function as the reference.
//!
//! Each round fills its broker with its messages (2,000 per `--rounds`:
//! 20,000 by default) first, then
//! starts `luge serve` (this build, its own process) with one trigger on
//! `noop` (a core module that does nothing, so what is measured is the
//! trigger's path: read, admit, a fresh sandbox, acknowledge) and times
//! it from its first handled message until the trigger has handled them
//! all (its `/metrics`), taking the process's CPU over the same span.
//! Pub/sub cannot hold a backlog: its round publishes the same number
//! while Luge runs, in pipelines of [`PACE`], each sent once no more than
//! that many are left unhandled, the trigger's room 1,024: the same work,
//! nothing dropped for want of room.

use std::time::{Duration, Instant};

use luge_benches::wasm;
use luge_testkit::nats::NatsServer;
use luge_testkit::redis::RedisServer;

use crate::Report;
use crate::Setup;
use crate::http_proxy::{LUGE_MARKER, Served, luge_serve, luge_site, start};

/// Messages per pipeline of the pub/sub round, and how many it leaves
/// unhandled at most.
const PACE: u64 = 100;

fn handled(luge: &Served) -> f64 {
    crate::triggers::metric(
        luge.addr,
        "luge_trigger_events_total{trigger=\"triggers[0]\",result=\"handled\"}",
    )
}

/// `luge serve` of a site whose one trigger (`trigger`, luge.toml's
/// inline table) runs `noop` with `room` events in flight, on `workers`
/// workers.
fn serve(
    setup: &Setup,
    dir: &std::path::Path,
    trigger: &str,
    room: usize,
    workers: u32,
) -> anyhow::Result<Served> {
    std::fs::write(dir.join("noop.wasm"), wasm("noop"))?;
    luge_site(
        dir,
        &format!(
            r#"
[[functions]]
name = "sink"
module = "noop.wasm"

[[triggers]]
function = "sink"
{trigger}
max_in_flight = {room}
"#
        ),
    )?;
    let workers = workers.to_string();
    start(
        luge_serve(setup, dir, "state", &["--workers", &workers])?,
        LUGE_MARKER,
    )
}

/// What one round measured.
struct Drained {
    handled: f64,
    elapsed: Duration,
    cpu: Duration,
}

/// Times `luge` from its first handled message until it handled `until`
/// (or nothing more came for 2 s), its CPU over the same span.
fn drain(luge: &Served, until: f64) -> anyhow::Result<Drained> {
    let first = Instant::now() + Duration::from_secs(30);
    while handled(luge) < 1.0 {
        anyhow::ensure!(Instant::now() < first, "nothing handled in 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (started, cpu) = (Instant::now(), luge.cpu());
    let (mut last, mut moved) = (0.0, Instant::now());
    loop {
        let now = handled(luge);
        if now >= until || moved.elapsed() > Duration::from_secs(2) {
            return Ok(Drained {
                handled: now,
                elapsed: started.elapsed(),
                cpu: luge.cpu() - cpu,
            });
        }
        if now != last {
            (last, moved) = (now, Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn redis_streams(setup: &Setup, workers: u32, messages: u64) -> anyhow::Result<Drained> {
    let redis = RedisServer::start()?;
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_connection()?;
    for chunk in 0..messages.div_ceil(1000) {
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.cmd("XADD")
                .arg("jobs")
                .arg("*")
                .arg("payload")
                .arg(chunk * 1000 + i)
                .ignore();
        }
        pipe.exec(&mut connection)?;
    }
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "redis-streams = {{ address = \"{}\", stream = \"jobs\" }}",
        redis.url()
    );
    let luge = serve(setup, dir.path(), &trigger, 32, workers)?;
    drain(&luge, messages as f64)
}

fn jetstream(setup: &Setup, workers: u32, messages: u64) -> anyhow::Result<Drained> {
    let nats = NatsServer::start()?;
    let mut client = nats.client()?;
    client.create_stream("JOBS", &["jobs"])?;
    let stored = client.publish("jobs", (0..messages).map(|i| i.to_string()))?;
    anyhow::ensure!(stored as u64 == messages, "JetStream stored {stored}");
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "nats-jetstream = {{ address = \"{}\", stream = \"JOBS\" }}",
        nats.url()
    );
    let luge = serve(setup, dir.path(), &trigger, 32, workers)?;
    drain(&luge, messages as f64)
}

fn pubsub(setup: &Setup, workers: u32, messages: u64) -> anyhow::Result<Drained> {
    let redis = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "redis = {{ address = \"{}\", channel = \"jobs\" }}",
        redis.url()
    );
    let luge = serve(setup, dir.path(), &trigger, 1024, workers)?;
    let until = Instant::now() + Duration::from_secs(10);
    while redis.publish("jobs", b"warm-up")? == 0 {
        anyhow::ensure!(Instant::now() < until, "Luge never subscribed");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::scope(|s| {
        let publisher = s.spawn(|| -> anyhow::Result<()> {
            let mut sent = 0;
            while sent < messages {
                let started = Instant::now();
                while handled(&luge) + (PACE as f64) < sent as f64 {
                    anyhow::ensure!(started.elapsed() < Duration::from_secs(30), "stalled");
                    std::thread::sleep(Duration::from_millis(5));
                }
                redis.publish_many("jobs", b"x", PACE as usize)?;
                sent += PACE;
            }
            Ok(())
        });
        let drained = drain(&luge, messages as f64 + 1.0);
        publisher.join().expect("publisher")?;
        drained
    })
}

pub(crate) fn queues(setup: &Setup, messages: u64) -> anyhow::Result<Report> {
    let mut rows = Vec::new();
    type Round = fn(&Setup, u32, u64) -> anyhow::Result<Drained>;
    let brokers: [(&str, Round); 3] = [
        ("redis-streams", redis_streams),
        ("nats-jetstream", jetstream),
        ("redis (pub/sub, reference)", pubsub),
    ];
    for (name, round) in brokers {
        for workers in [1, 2] {
            let r = round(setup, workers, messages)?;
            rows.push(vec![
                name.to_owned(),
                workers.to_string(),
                format!("{:.0}", r.handled),
                format!("{:.0}", r.handled / r.elapsed.as_secs_f64()),
                format!(
                    "{:.0}",
                    luge_benches::load::cpu_us_per_request(r.cpu, r.handled as u64)
                ),
            ]);
        }
    }
    Ok(Report {
        name: "queues",
        title: "Durable queues drained: Redis Streams and NATS JetStream triggers".into(),
        columns: vec![
            "trigger",
            "workers",
            "handled",
            "handled msg/s",
            "Luge CPU µs per message",
        ],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`luge serve --workers N` (this build, its own process) with redis-server 7 or nats-server 2.9 (-js, file store) on loopback. Each durable round starts with {messages} messages in the stream and times Luge from its first handled message until it has handled them all (`luge_trigger_events_total`, polled every 20 ms), each message a fresh `noop` sandbox (a core module that does nothing), the trigger at `max_in_flight = 32` (the queues' prefetch), each message acknowledged after it succeeded. The pub/sub round (the reference: the same function on the Redis pub/sub trigger) publishes {messages} messages while Luge runs, in pipelines of 100, each sent once at most 100 are unhandled (admission refuses past the tenant's places), the trigger's room 1,024 (so none is dropped for want of room); its count includes the warm-up message. CPU is Luge's (user + system, /proc/PID/stat, 10 ms ticks) over the span; the brokers and the bench share the machine's cores."
        ),
    })
}
