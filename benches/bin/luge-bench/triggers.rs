//! `triggers`: publish-to-handler latency of Redis and MQTT triggers at
//! 1,000 and 10,000 messages per second, and the most handled per second
//! on this machine; `trigger-flood`: 100,000 Redis messages on one channel
//! beside an HTTP route.
//!
//! The handlers are the Spin app's event components (actions/spin:
//! spin-sdk 7's `#[redis_subscriber]` and a `spin:mqtt-trigger`
//! component) as `[[functions]]` of a luge.toml, each on a trigger with
//! 64 events in flight. A message `echo:SEQ` makes the handler publish
//! SEQ back (on the Redis channel or MQTT topic `acks`, through
//! `spin:redis` / `spin:mqtt` under its grant, a connection per
//! message); the bench, subscribed to `acks`, takes publish-to-reply as
//! each message's latency: an upper bound on publish-to-handler, since it
//! holds the reply's own trip too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use luge_benches::stats::Latencies;
use luge_benches::wasm;
use luge_testkit::mosquitto::MosquittoServer;
use luge_testkit::redis::RedisServer;

use crate::Report;
use crate::Setup;
use crate::http_proxy::{LUGE_MARKER, Served, luge_serve, luge_site, start};

/// What one round of a broker gave.
struct Round {
    sent: u64,
    acked: u64,
    elapsed: Duration,
    latencies: Latencies,
}

/// Publishes on one broker.
enum Publisher {
    Redis(redis::aio::MultiplexedConnection),
    Mqtt(rumqttc::AsyncClient),
}

impl Publisher {
    async fn publish(&mut self, topic: &str, message: String) -> anyhow::Result<()> {
        match self {
            Self::Redis(connection) => {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(topic)
                    .arg(message)
                    .query_async(connection)
                    .await?;
            }
            Self::Mqtt(client) => {
                client
                    .publish(topic, rumqttc::QoS::AtMostOnce, false, message)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Sequence numbers sent and when.
type Sent = Arc<Mutex<HashMap<u64, Instant>>>;

/// Records each `SEQ` reply's latency.
fn ack(sent: &Sent, latencies: &Mutex<Latencies>, payload: &[u8]) {
    let Some(seq) = std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return;
    };
    if let Some(at) = sent.lock().expect("sent").remove(&seq) {
        latencies.lock().expect("latencies").record(at.elapsed());
    }
}

/// Subscribes to `acks` on `broker` ("redis" or "mqtt"), recording into
/// `latencies`; returns once subscribed.
async fn subscribe(
    broker: &str,
    url: &str,
    mqtt_port: u16,
    sent: Sent,
    latencies: Arc<Mutex<Latencies>>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    if broker == "redis" {
        let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
        pubsub.subscribe("acks").await?;
        return Ok(tokio::spawn(async move {
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                ack(&sent, &latencies, message.get_payload_bytes());
            }
        }));
    }
    let mut options = rumqttc::MqttOptions::new("bench-acks", "127.0.0.1", mqtt_port);
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = rumqttc::AsyncClient::new(options, 1024);
    client.subscribe("acks", rumqttc::QoS::AtMostOnce).await?;
    let (ready, subscribed) = tokio::sync::oneshot::channel();
    let mut ready = Some(ready);
    let task = tokio::spawn(async move {
        let _client = client;
        loop {
            match eventloop.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                    ack(&sent, &latencies, &p.payload);
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    subscribed.await?;
    Ok(task)
}

/// A publisher on `broker`, with the task that drives it (MQTT).
async fn publisher(
    broker: &str,
    url: &str,
    mqtt_port: u16,
) -> anyhow::Result<(Publisher, Option<tokio::task::JoinHandle<()>>)> {
    if broker == "redis" {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        return Ok((Publisher::Redis(connection), None));
    }
    let mut options = rumqttc::MqttOptions::new("bench-publisher", "127.0.0.1", mqtt_port);
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = rumqttc::AsyncClient::new(options, 4096);
    let driver = tokio::spawn(async move {
        loop {
            if eventloop.poll().await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    Ok((Publisher::Mqtt(client), Some(driver)))
}

/// One round: `echo:SEQ` on `topic` at `rate` per second (as fast as
/// it goes when `None`) for `window`, then up to 3 s for the last
/// replies (half a second after the last one came).
async fn round(
    broker: &str,
    url: &str,
    mqtt_port: u16,
    rate: Option<u32>,
    window: Duration,
) -> anyhow::Result<Round> {
    let sent: Sent = Arc::default();
    let latencies = Arc::new(Mutex::new(Latencies::new()));
    let listener = subscribe(
        broker,
        url,
        mqtt_port,
        Arc::clone(&sent),
        Arc::clone(&latencies),
    )
    .await?;
    let (mut publisher, driver) = publisher(broker, url, mqtt_port).await?;
    let started = Instant::now();
    let mut seq = 0u64;
    while started.elapsed() < window {
        if let Some(rate) = rate {
            let due = started + Duration::from_secs_f64(seq as f64 / f64::from(rate));
            tokio::time::sleep_until(due.into()).await;
        }
        sent.lock().expect("sent").insert(seq, Instant::now());
        publisher.publish("bench", format!("echo:{seq}")).await?;
        seq += 1;
    }
    let elapsed = started.elapsed();
    // The last replies: until every message has one, or none came for
    // half a second (what was dropped never replies), 3 s at most.
    let settle = Instant::now();
    let (mut replied, mut last_reply) = (latencies.lock().expect("latencies").len(), settle);
    while !sent.lock().expect("sent").is_empty()
        && settle.elapsed() < Duration::from_secs(3)
        && last_reply.elapsed() < Duration::from_millis(500)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = latencies.lock().expect("latencies").len();
        if now != replied {
            (replied, last_reply) = (now, Instant::now());
        }
    }
    listener.abort();
    if let Some(driver) = driver {
        driver.abort();
    }
    let latencies = std::mem::take(&mut *latencies.lock().expect("latencies"));
    Ok(Round {
        sent: seq,
        acked: latencies.len(),
        elapsed,
        latencies,
    })
}

/// The luge.toml of both experiments.
fn site(dir: &std::path::Path, redis: u16, mqtt: u16) -> anyhow::Result<()> {
    for name in ["spin-subscriber", "spin-mqtt", "c-hello", "c-count"] {
        std::fs::write(dir.join(format!("{name}.wasm")), wasm(name))?;
    }
    luge_site(
        dir,
        &format!(
            r#"
[[functions]]
name = "echo-redis"
module = "spin-subscriber.wasm"
allowed_outbound_hosts = ["redis://127.0.0.1:{redis}"]
variables = {{ redis_address = "redis://127.0.0.1:{redis}" }}

[[functions]]
name = "echo-mqtt"
module = "spin-mqtt.wasm"
allowed_outbound_hosts = ["mqtt://127.0.0.1:{mqtt}"]
variables = {{ mqtt_address = "mqtt://127.0.0.1:{mqtt}" }}

[[routes]]
path = "/hello"
module = "c-hello.wasm"

[[routes]]
path = "/count"
module = "c-count.wasm"

[[triggers]]
function = "echo-redis"
redis = {{ address = "redis://127.0.0.1:{redis}", channel = "bench" }}
max_in_flight = 64

[[triggers]]
function = "echo-mqtt"
mqtt = {{ address = "mqtt://127.0.0.1:{mqtt}", topic = "bench", qos = 0 }}
max_in_flight = 64

[[triggers]]
function = "/count"
redis = {{ address = "redis://127.0.0.1:{redis}", channel = "flood" }}
max_in_flight = 16
"#
        ),
    )
}

/// Luge serving [`site`], with the brokers it listens to.
fn serve(
    setup: &Setup,
) -> anyhow::Result<(Served, RedisServer, MosquittoServer, tempfile::TempDir)> {
    let redis = RedisServer::start()?;
    let mqtt = MosquittoServer::start()?;
    let dir = tempfile::tempdir()?;
    site(dir.path(), redis.port, mqtt.port)?;
    let luge = start(luge_serve(setup, dir.path(), "state", &[])?, LUGE_MARKER)?;
    // Subscribed before the first round: Redis's PUBSUB NUMSUB.
    let until = Instant::now() + Duration::from_secs(10);
    while redis.command(&[b"PUBLISH", b"bench", b"warm-up"])? == 0 {
        anyhow::ensure!(Instant::now() < until, "Luge never subscribed");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    Ok((luge, redis, mqtt, dir))
}

pub(crate) fn triggers(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let (luge, redis, mqtt, _dir) = serve(setup)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for broker in ["redis", "mqtt"] {
        for rate in [Some(1000), Some(10_000), None] {
            let cpu = luge.cpu();
            let r = runtime.block_on(round(broker, &redis.url(), mqtt.port, rate, window))?;
            let cpu = luge.cpu() - cpu;
            rows.push(vec![
                broker.to_owned(),
                rate.map_or("as fast as it goes".to_owned(), |r| r.to_string()),
                r.sent.to_string(),
                format!("{:.0}", r.sent as f64 / r.elapsed.as_secs_f64()),
                r.acked.to_string(),
                format!("{:.0}", r.acked as f64 / r.elapsed.as_secs_f64()),
                format!("{:.2}", r.latencies.percentile_ms(50.0)),
                format!("{:.2}", r.latencies.percentile_ms(99.0)),
                format!(
                    "{:.0}",
                    luge_benches::load::cpu_us_per_request(cpu, r.acked)
                ),
            ]);
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    Ok(Report {
        name: "triggers",
        title: "Publish to handler: Redis and MQTT triggers".into(),
        columns: vec![
            "broker",
            "offered msg/s",
            "published",
            "published msg/s",
            "replied",
            "handled msg/s",
            "p50 ms",
            "p99 ms",
            "server CPU µs per message",
        ],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`luge serve` (this build, its own process) with redis-server and mosquitto on loopback; the handlers are the Spin app's event components (spin-sdk 7 `#[redis_subscriber]`, a `spin:mqtt-trigger@3.0.0` component) as luge.toml `[[functions]]`, each trigger with `max_in_flight = 64`. Each message `echo:SEQ` is published (Redis PUBLISH on one multiplexed connection; MQTT QoS 0) at the offered rate for {} ms; the handler opens a connection (spin:redis / spin:mqtt, under its grant) and publishes SEQ on `acks`, where the bench is subscribed: latency is publish to reply, an upper bound on publish to handler. Messages beyond the trigger's room are dropped (Redis pub/sub, MQTT QoS 0), so `replied` below `published` is what was dropped or still running once no reply had come for half a second (3 s at most). Server CPU from /proc/PID/stat (10 ms ticks) over the replied messages. The bench (publisher, subscriber) shares the machine's cores with Luge and the brokers.",
            window.as_millis()
        ),
    })
}

/// `GET` `path` on `addr` over one keep-alive connection until `stop`:
/// how many, how many answered 200, and their latencies.
fn http_client(
    addr: std::net::SocketAddr,
    stop: &std::sync::atomic::AtomicBool,
) -> (u64, u64, Latencies) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("http://{addr}/hello");
    let (mut sent, mut ok, mut latencies) = (0, 0, Latencies::new());
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let started = Instant::now();
        let status = agent.get(&url).call().map(|r| r.status().as_u16());
        latencies.record(started.elapsed());
        sent += 1;
        if status.is_ok_and(|s| s == 200) {
            ok += 1;
        }
    }
    (sent, ok, latencies)
}

/// A value of Luge's `/metrics` (0 when absent).
pub(crate) fn metric(addr: std::net::SocketAddr, needle: &str) -> f64 {
    let text = ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    text.lines()
        .find(|l| l.contains(needle) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

pub(crate) fn trigger_flood(setup: &Setup) -> anyhow::Result<Report> {
    const MESSAGES: u64 = 100_000;
    let (luge, redis, _mqtt, _dir) = serve(setup)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    // The HTTP route alone first, then beside the flood.
    let mut rows = Vec::new();
    for flood in [false, true] {
        let (published, took, (sent, ok, latencies)) =
            std::thread::scope(|s| -> anyhow::Result<_> {
                stop.store(false, std::sync::atomic::Ordering::Relaxed);
                let client = s.spawn(|| http_client(luge.addr, &stop));
                let started = Instant::now();
                let mut published = 0;
                if flood {
                    let client = redis::Client::open(redis.url())?;
                    let mut connection = client.get_connection()?;
                    while published < MESSAGES {
                        let mut pipe = redis::pipe();
                        for _ in 0..1000 {
                            pipe.cmd("PUBLISH").arg("flood").arg("x").ignore();
                        }
                        pipe.exec(&mut connection)?;
                        published += 1000;
                    }
                } else {
                    std::thread::sleep(Duration::from_secs(3));
                }
                let took = started.elapsed();
                // The trigger's backlog (none: pub/sub drops) and the client
                // a moment more.
                std::thread::sleep(Duration::from_millis(500));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok((published, took, client.join().expect("client")))
            })?;
        let trigger = "triggers[2]";
        rows.push(vec![
            if flood { "beside the flood" } else { "alone" }.to_owned(),
            published.to_string(),
            format!("{:.0}", published as f64 / took.as_secs_f64()),
            format!(
                "{:.0}",
                metric(
                    luge.addr,
                    &format!(
                        "luge_trigger_events_total{{trigger=\"{trigger}\",result=\"handled\"}}"
                    )
                )
            ),
            format!(
                "{:.0}",
                metric(
                    luge.addr,
                    &format!(
                        "luge_trigger_events_total{{trigger=\"{trigger}\",result=\"dropped\"}}"
                    )
                )
            ),
            sent.to_string(),
            format!("{:.2}", ok as f64 * 100.0 / sent.max(1) as f64),
            format!("{:.2}", latencies.percentile_ms(50.0)),
            format!("{:.2}", latencies.percentile_ms(99.0)),
        ]);
    }
    Ok(Report {
        name: "trigger-flood",
        title: "100,000 Redis messages on one channel beside an HTTP route".into(),
        columns: vec![
            "HTTP route",
            "messages published",
            "published msg/s",
            "handled (so far)",
            "dropped (so far)",
            "HTTP requests",
            "HTTP 200 %",
            "HTTP p50 ms",
            "HTTP p99 ms",
        ],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: "`luge serve` (this build, its own process) with redis-server on loopback: 100,000 `PUBLISH flood x` in pipelines of 1,000, as fast as one connection sends them, on a channel whose trigger runs `c-count` (a core module adding one to a state counter) with `max_in_flight = 16`, while one keep-alive client sends `GET /hello` (`c-hello`) in a closed loop, until half a second after Luge has taken the last message off its subscription (its trigger's `received` count). The row `alone` is the same client for 3 s with no messages. Handled and dropped are the trigger's counts from /metrics (cumulative). Pub/sub has no redelivery: what finds the trigger full is dropped and counted.".into(),
    })
}
