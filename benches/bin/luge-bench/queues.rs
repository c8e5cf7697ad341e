//! `queues`: how fast the durable queue triggers (Redis Streams, NATS
//! JetStream, Kafka) drain a backlog on one worker and on two, and Luge's CPU
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
use luge_testkit::kafka::KafkaServer;
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

fn kafka(setup: &Setup, workers: u32, messages: u64) -> anyhow::Result<Drained> {
    let kafka = KafkaServer::start()?;
    kafka.create_topic("jobs", 4).map_err(anyhow::Error::msg)?;
    let stored = kafka
        .produce(
            "jobs",
            (0..messages).map(|i| (None, i.to_string().into_bytes())),
        )
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(stored as u64 == messages, "Kafka stored {stored}");
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "kafka = {{ address = \"{}\", topic = \"jobs\" }}",
        kafka.address()
    );
    let luge = serve(setup, dir.path(), &trigger, 32, workers)?;
    drain(&luge, messages as f64)
}

/// A Redis server and `luge serve` with the pub/sub trigger on it (room
/// 1,024), once subscribed (a warm-up message reached it); the tempdir
/// is the site's, kept as long as Luge runs.
fn subscribed(
    setup: &Setup,
    workers: u32,
) -> anyhow::Result<(RedisServer, tempfile::TempDir, Served)> {
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
    Ok((redis, dir, luge))
}

fn pubsub(setup: &Setup, workers: u32, messages: u64) -> anyhow::Result<Drained> {
    let (redis, _dir, luge) = subscribed(setup, workers)?;
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

/// Messages of a paced round, and their rate.
const PACED: u64 = 2_000;
const PACED_PER_SECOND: u64 = 1_000;

/// The `q` quantile (0-1) of the histogram `family` of `luge`'s
/// `/metrics` for the first trigger, less the counts `skip` (an earlier
/// reading), interpolated within its bucket as
/// Prometheus' `histogram_quantile` does; in seconds.
fn quantile(luge: &Served, family: &str, q: f64, skip: &[(f64, f64)]) -> f64 {
    let buckets: Vec<(f64, f64)> = bucket_counts(luge, family)
        .into_iter()
        .zip(skip.iter().map(|&(_, n)| n).chain(std::iter::repeat(0.0)))
        .map(|((le, count), skipped)| (le, count - skipped))
        .collect();
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return lower;
            }
            let within = count - below;
            return lower
                + (le - lower)
                    * if within > 0.0 {
                        (rank - below) / within
                    } else {
                        1.0
                    };
        }
        (lower, below) = (le, count);
    }
    lower
}

/// The cumulative bucket counts of the histogram `family` of `luge`'s
/// first trigger: (upper bound, count), in order.
fn bucket_counts(luge: &Served, family: &str) -> Vec<(f64, f64)> {
    let text = ureq::get(&format!("http://{}/metrics", luge.addr))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    let prefix = format!("{family}_bucket{{");
    text.lines()
        .filter(|line| line.starts_with(&prefix) && line.contains("trigger=\"triggers[0]\""))
        .filter_map(|line| {
            let (_, le) = line.split_once("le=\"")?;
            let (le, _) = le.split_once('"')?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, line.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// Publishes [`PACED`] messages at [`PACED_PER_SECOND`] by `publish` (the
/// message's number) to a running `luge`, waits until it handled them,
/// and gives the p50 and p99 of `family` over them, in ms.
fn paced(
    luge: &Served,
    family: &str,
    mut publish: impl FnMut(u64) -> anyhow::Result<()>,
) -> anyhow::Result<(f64, f64)> {
    // A first message, handled before the round: the trigger is reading,
    // and its age (its reader's start) is left out of the round's.
    let warm = handled(luge) + 1.0;
    publish(PACED)?;
    let until = Instant::now() + Duration::from_secs(30);
    while handled(luge) < warm {
        anyhow::ensure!(Instant::now() < until, "the first message was not handled");
        std::thread::sleep(Duration::from_millis(10));
    }
    let skip = bucket_counts(luge, family);
    let before = handled(luge);
    let started = Instant::now();
    for i in 0..PACED {
        let due = started + Duration::from_micros(i * 1_000_000 / PACED_PER_SECOND);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        publish(i)?;
    }
    let until = Instant::now() + Duration::from_secs(30);
    while handled(luge) < before + PACED as f64 {
        anyhow::ensure!(
            Instant::now() < until,
            "the paced messages were not all handled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ms = |q| 1e3 * quantile(luge, family, q, &skip);
    Ok((ms(0.5), ms(0.99)))
}

/// The paced round of a durable queue: a fresh stream on a running Luge.
fn paced_redis_streams(setup: &Setup, workers: u32) -> anyhow::Result<(f64, f64)> {
    let redis = RedisServer::start()?;
    let mut connection = redis::Client::open(redis.url())?.get_connection()?;
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "redis-streams = {{ address = \"{}\", stream = \"jobs\" }}",
        redis.url()
    );
    let luge = serve(setup, dir.path(), &trigger, 32, workers)?;
    paced(&luge, "luge_trigger_message_age_seconds", |i| {
        redis::cmd("XADD")
            .arg("jobs")
            .arg("*")
            .arg("payload")
            .arg(i)
            .exec(&mut connection)?;
        Ok(())
    })
}

fn paced_jetstream(setup: &Setup, workers: u32) -> anyhow::Result<(f64, f64)> {
    let nats = NatsServer::start()?;
    let mut client = nats.client()?;
    client.create_stream("JOBS", &["jobs"])?;
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "nats-jetstream = {{ address = \"{}\", stream = \"JOBS\" }}",
        nats.url()
    );
    let luge = serve(setup, dir.path(), &trigger, 32, workers)?;
    paced(&luge, "luge_trigger_message_age_seconds", |i| {
        anyhow::ensure!(client.publish("jobs", [i.to_string()])? == 1, "not stored");
        Ok(())
    })
}

fn paced_kafka(setup: &Setup, workers: u32) -> anyhow::Result<(f64, f64)> {
    let kafka = KafkaServer::start()?;
    kafka.create_topic("jobs", 4).map_err(anyhow::Error::msg)?;
    let producer = kafka.producer().map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let trigger = format!(
        "kafka = {{ address = \"{}\", topic = \"jobs\" }}",
        kafka.address()
    );
    let luge = serve(setup, dir.path(), &trigger, 32, workers)?;
    paced(&luge, "luge_trigger_message_age_seconds", |i| {
        producer
            .send("jobs", i.to_string().as_bytes())
            .map_err(anyhow::Error::msg)
    })
}

/// Pub/sub keeps no stamp: its lag (arrival at Luge to the start) is the
/// reference, the hop from the broker not in it.
fn paced_pubsub(setup: &Setup, workers: u32) -> anyhow::Result<(f64, f64)> {
    let (redis, _dir, luge) = subscribed(setup, workers)?;
    let mut connection = redis::Client::open(redis.url())?.get_connection()?;
    paced(&luge, "luge_trigger_lag_seconds", |i| {
        redis::cmd("PUBLISH")
            .arg("jobs")
            .arg(i)
            .exec(&mut connection)?;
        Ok(())
    })
}

pub(crate) fn queues(setup: &Setup, messages: u64) -> anyhow::Result<Report> {
    let mut rows = Vec::new();
    type Round = fn(&Setup, u32, u64) -> anyhow::Result<Drained>;
    type Paced = fn(&Setup, u32) -> anyhow::Result<(f64, f64)>;
    let brokers: [(&str, Round, Paced); 4] = [
        ("redis-streams", redis_streams, paced_redis_streams),
        ("nats-jetstream", jetstream, paced_jetstream),
        ("kafka", kafka, paced_kafka),
        ("redis (pub/sub, reference)", pubsub, paced_pubsub),
    ];
    for (name, round, paced) in brokers {
        for workers in [1, 2] {
            let r = round(setup, workers, messages)?;
            let (p50, p99) = paced(setup, workers)?;
            rows.push(vec![
                name.to_owned(),
                workers.to_string(),
                format!("{:.0}", r.handled),
                format!("{:.0}", r.handled / r.elapsed.as_secs_f64()),
                format!(
                    "{:.0}",
                    luge_benches::load::cpu_us_per_request(r.cpu, r.handled as u64)
                ),
                format!("{p50:.2}"),
                format!("{p99:.2}"),
            ]);
        }
    }
    Ok(Report {
        name: "queues",
        title: "Durable queues drained: Redis Streams, NATS JetStream and Kafka triggers".into(),
        columns: vec![
            "trigger",
            "workers",
            "handled",
            "handled msg/s",
            "Luge CPU µs per message",
            "paced p50 ms",
            "paced p99 ms",
        ],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`luge serve --workers N` (this build, its own process) with redis-server 7, nats-server 2.9 (-js, file store) or Kafka 3.9.1 (KRaft, one broker, a topic of 4 partitions) on loopback. Each durable round starts with {messages} messages in the stream and times Luge from its first handled message until it has handled them all (`luge_trigger_events_total`, polled every 20 ms), each message a fresh `noop` sandbox (a core module that does nothing), the trigger at `max_in_flight = 32` (the queues' prefetch), each message acknowledged after it succeeded. The pub/sub round (the reference: the same function on the Redis pub/sub trigger) publishes {messages} messages while Luge runs, in pipelines of 100, each sent once at most 100 are unhandled (admission refuses past the tenant's places), the trigger's room 1,024 (so none is dropped for want of room); its count includes the warm-up message. CPU is Luge's (user + system, /proc/PID/stat, 10 ms ticks) over the span; the brokers and the bench share the machine's cores. The paced columns are another round per row: a fresh broker and Luge, {PACED} messages published one at a time at {PACED_PER_SECOND}/s, and the p50 and p99 of each message's time from its store at the broker to its function's start (`luge_trigger_message_age_seconds`, from the Redis stream id's milliseconds, JetStream's timestamp or the Kafka record's CreateTime (the producer's clock, on this machine), interpolated in its doubling buckets as Prometheus' histogram_quantile does); pub/sub keeps no stamp, so its row gives the time from the message's arrival at Luge to the start (`luge_trigger_lag_seconds`), without the hop from the broker."
        ),
    })
}
