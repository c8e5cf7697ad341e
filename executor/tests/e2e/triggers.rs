//! Triggers end to end: a real `redis-server` and `mosquitto` on free
//! loopback ports, Luge subscribed to them, and cron ticks at one-second
//! resolution; the Spin app's events manifest (actions/spin/events.toml:
//! spin-sdk 7's `#[redis_subscriber]`, a `spin:mqtt-trigger` and a
//! `fermyon:spin-cron` component) and `luge.toml` triggers on core
//! modules and an HTTP handler.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use luge_testkit::kafka::KafkaServer;
use luge_testkit::mosquitto::MosquittoServer;
use luge_testkit::nats::{NatsClient, NatsServer};
use luge_testkit::redis::RedisServer;

use crate::common::*;

/// Waits up to 20 s for `test`.
fn eventually(what: &str, test: impl Fn() -> bool) {
    let started = Instant::now();
    while !test() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Publishes `message` until a subscriber receives it (Luge has
/// subscribed); `message` is then handled once or more.
fn publish_when_subscribed(redis: &RedisServer, channel: &str, message: &[u8]) {
    eventually("Luge never subscribed", || {
        redis.publish(channel, message).unwrap_or(0) > 0
    });
}

/// Events of `trigger` that ended one way or another (handled, failed,
/// refused or dropped).
fn ended(luge: &Luge, trigger: &str) -> f64 {
    ["handled", "failed", "refused", "dropped"]
        .iter()
        .map(|result| events(luge, trigger, result))
        .sum()
}

fn events(luge: &Luge, trigger: &str, result: &str) -> f64 {
    luge.metric(&format!(
        "luge_trigger_events_total{{trigger=\"{trigger}\",result=\"{result}\"}}"
    ))
}

/// The Spin app's events manifest, its sources absolute.
fn events_manifest(dir: &std::path::Path, edit: impl Fn(String) -> String) -> std::path::PathBuf {
    let manifest = crate::spin::manifest().with_file_name("events.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "source = \"target/",
        &format!(
            "source = \"{}/target/",
            manifest.parent().unwrap().display()
        ),
    );
    let copy = dir.join("events.toml");
    std::fs::write(&copy, edit(text)).unwrap();
    copy
}

/// `luge serve --spin events.toml` on `redis` and `mqtt`, its state in
/// `state`.
fn serve_events(
    manifest: &std::path::Path,
    state: &std::path::Path,
    redis: u16,
    mqtt: u16,
) -> Luge {
    serve_spin(
        manifest,
        state,
        &[],
        &[
            ("SPIN_VARIABLE_REDIS_HOST", &format!("127.0.0.1:{redis}")),
            ("SPIN_VARIABLE_MQTT_HOST", &format!("127.0.0.1:{mqtt}")),
        ],
    )
}

/// The Spin app's events half (events.toml, edited by `edit`) with the
/// servers it listens to, its state kept across restarts.
struct EventsApp {
    /// `None` only while it restarts.
    redis: Option<RedisServer>,
    broker: MosquittoServer,
    manifest: std::path::PathBuf,
    state: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl EventsApp {
    fn new(edit: impl Fn(String) -> String) -> Self {
        let redis = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
        let broker = MosquittoServer::start().expect("mosquitto (./scripts/setup.sh)");
        let dir = tempfile::tempdir().unwrap();
        let manifest = events_manifest(dir.path(), edit);
        let state = dir.path().join("state");
        Self {
            redis: Some(redis),
            broker,
            manifest,
            state,
            _dir: dir,
        }
    }

    fn redis(&self) -> &RedisServer {
        self.redis.as_ref().expect("running")
    }

    /// Stops Redis and starts it again on its port, empty.
    fn restart_redis(&mut self) {
        let port = self.redis().port;
        self.redis = None;
        self.redis = Some(RedisServer::on(port).unwrap());
    }

    /// `luge serve --spin` of the app.
    fn serve(&self) -> Luge {
        let redis = self.redis().port;
        serve_events(&self.manifest, &self.state, redis, self.broker.port)
    }
}

/// `kill -9` of `luge`: nothing it held is given back.
fn kill_9(luge: Luge) {
    let status = std::process::Command::new("kill")
        .args(["-9", &luge.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Publishes `message` on `topic` (QoS 1) until the app stored it as its
/// last MQTT message (Luge has subscribed).
fn mqtt_when_subscribed(luge: &Luge, broker: &MosquittoServer, topic: &str, message: &str) {
    let stored = format!("{topic} {message}");
    eventually("never subscribed to MQTT", || {
        broker.publish(topic, message, 1).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        luge.get_text("/kv/last-mqtt") == stored
    });
}

#[test]
fn a_spin_apps_redis_mqtt_and_cron_components_run_on_their_events() {
    wasmtime_only!();
    let mut app = EventsApp::new(|text| text);
    let luge = app.serve();

    // MQTT: a QoS 1 message reaches the component with its topic.
    mqtt_when_subscribed(&luge, &app.broker, "sensors/kitchen", "21.5");
    assert!(luge.stderr_shows("mqtt message on sensors/kitchen: 21.5"));
    // One that fails is not acknowledged: the broker sends it again
    // (marked a redelivery), up to three attempts.
    app.broker.publish("sensors/hall", "fail", 1).unwrap();
    eventually("three attempts", || {
        events(&luge, "trigger.mqtt[0]", "failed") == 3.0
    });
    assert!(events(&luge, "trigger.mqtt[0]", "redelivered") >= 2.0);
    // A message past the bound (2 MiB, QoS 1) is never sent to Luge (the
    // broker was told its maximum packet size): the trigger goes on with
    // the next, without reconnecting for it.
    let lost_before = luge.stderr().matches("connection lost").count();
    app.broker
        .publish_bytes("sensors/big", &vec![b'x'; 2 << 20], 1)
        .unwrap();
    app.broker.publish("sensors/after", "22.0", 1).unwrap();
    eventually("the message after the big one", || {
        luge.get_text("/kv/last-mqtt") == "sensors/after 22.0"
    });
    assert_eq!(
        luge.stderr().matches("connection lost").count(),
        lost_before,
        "{}",
        luge.stderr()
    );
    // The app's HTTP component publishes (spin:mqtt, under its mqtt://
    // grant) to the broker, and the MQTT component receives it.
    let (status, body) = luge.request("POST", "/mqtt/publish/sensors/outbound", b"from the app");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    eventually("the published message came back", || {
        luge.get_text("/kv/last-mqtt") == "sensors/outbound from the app"
    });

    // A message reaches the subscriber, which writes the app's store.
    publish_when_subscribed(app.redis(), "messages", b"hello");
    eventually("the subscriber stored the message", || {
        luge.get_text("/kv/last-message") == "hello"
    });
    assert!(luge.stderr_shows("redis message: hello"));
    assert!(events(&luge, "trigger.redis[0]", "handled") >= 1.0);
    // A subscriber in Spin 2's shape (fermyon:spin/inbound-redis).
    publish_when_subscribed(app.redis(), "legacy", b"from an older SDK");
    assert!(luge.stderr_shows("spin 2 redis message: from an older SDK"));
    app.redis().publish("legacy", b"fail").unwrap();
    eventually("its failure counted", || {
        events(&luge, "trigger.redis[1]", "failed") == 1.0
    });

    // Its error result is a failed event, its error logged.
    app.redis().publish("messages", b"fail").unwrap();
    eventually("the failure counted", || {
        events(&luge, "trigger.redis[0]", "failed") == 1.0
    });
    assert!(luge.stderr_shows("asked to fail"));

    // Cron fires every second, on time: consecutive ticks one second
    // apart, each within 10 s of the guest's clock (else it fails).
    eventually("three ticks handled", || {
        events(&luge, "trigger.cron[0]", "handled") >= 3.0
    });
    assert_eq!(events(&luge, "trigger.cron[0]", "failed"), 0.0);
    let ticks: BTreeSet<u64> = luge
        .stderr()
        .lines()
        .filter_map(|line| line.split("cron tick ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    let ticks: Vec<u64> = ticks.into_iter().collect();
    assert!(ticks.len() >= 3, "{ticks:?}");
    assert!(ticks.windows(2).all(|w| w[1] - w[0] == 1), "{ticks:?}");
    assert!(luge.metric("luge_trigger_lag_seconds_count{trigger=\"trigger.cron[0]\"}") >= 3.0);

    // Redis restarts: Luge resubscribes, and what is published after
    // that arrives.
    app.restart_redis();
    publish_when_subscribed(app.redis(), "messages", b"after the restart");
    eventually("resubscribed", || {
        luge.get_text("/kv/last-message") == "after the restart"
    });

    // A flood beyond the trigger's bound (8 in flight): the rest is
    // dropped and counted, every message is accounted for, and HTTP is
    // answered meanwhile.
    // Every message received so far ends first: one published to find
    // the subscription may still be in its handler (counted as ended only
    // once it is), and would otherwise end after `before` was read.
    eventually("the earlier messages accounted for", || {
        ended(&luge, "trigger.redis[0]") == events(&luge, "trigger.redis[0]", "received")
    });
    let received_before = events(&luge, "trigger.redis[0]", "received");
    for _ in 0..40 {
        app.redis().publish("messages", b"sleep:300").unwrap();
    }
    let (status, body) = luge.request("GET", "/hello", b"");
    assert_eq!((status, body.as_slice()), (200, &b"Hello, Spin app\n"[..]));
    eventually("all 40 accounted for", || {
        let received = events(&luge, "trigger.redis[0]", "received");
        received - received_before == 40.0 && ended(&luge, "trigger.redis[0]") == received
    });
    assert!(events(&luge, "trigger.redis[0]", "dropped") >= 1.0);
}

/// `kill -9` with QoS 1 messages in flight: after the restart, the broker
/// sends what was not acknowledged again, and every message is handled.
#[test]
fn qos1_messages_in_flight_when_luge_is_killed_are_handled_after_its_restart() {
    wasmtime_only!();
    let app = EventsApp::new(|text| text);
    let broker = &app.broker;
    let luge = app.serve();
    mqtt_when_subscribed(&luge, broker, "sensors/a", "ready");
    // Twelve slow messages: eight in flight (the trigger's bound), the
    // rest waiting, none acknowledged when Luge dies.
    let messages: Vec<String> = (0..12).map(|i| format!("sleep:1500:k{i}")).collect();
    let lines: Vec<&str> = messages.iter().map(String::as_str).collect();
    broker.publish_lines("sensors/slow", &lines, 1).unwrap();
    eventually("messages in flight", || {
        events(&luge, "trigger.mqtt[0]", "received") >= 9.0
    });
    kill_9(luge);
    let luge = app.serve();
    for i in 0..12 {
        eventually(&format!("k{i} handled after the restart"), || {
            luge.get_text(&format!("/kv/k{i}")) == "done"
        });
    }
    assert!(events(&luge, "trigger.mqtt[0]", "redelivered") >= 1.0);
}

/// A Redis stream read by a consumer group (`[[trigger.redis-streams]]`)
/// wakes the Spin app's unchanged `inbound-redis` subscriber: each message
/// acknowledged once handled, one that always fails dead-lettered after
/// `max_attempts`, and messages in flight when Luge is killed handled
/// after its restart (the new process takes over the old one's).
#[test]
fn a_redis_stream_is_a_durable_queue_for_a_spin_subscriber() {
    wasmtime_only!();
    let app = EventsApp::new(|text| {
        text + "\n[[trigger.redis-streams]]\naddress = \"redis://{{ redis_host }}\"\n\
                stream = \"jobs\"\ncomponent = \"subscriber\"\nmax_attempts = 2\n\
                claim_idle_ms = 1000\n"
    });
    let redis = app.redis();
    // Added before Luge starts: a new group reads the stream from its start.
    redis.add("jobs", b"queued early").unwrap();
    let luge = app.serve();
    eventually("the early message handled", || {
        luge.get_text("/kv/last-message") == "queued early"
    });
    redis.add("jobs", b"fail").unwrap();
    redis.add("jobs", b"after the poison").unwrap();
    eventually("the poison dead-lettered", || {
        redis.command(&[b"XLEN", b"jobs:dead"]).unwrap_or(0) == 1
    });
    eventually("the next handled", || {
        luge.get_text("/kv/last-message") == "after the poison"
    });
    let trigger = "trigger.redis-streams[0]";
    assert_eq!(events(&luge, trigger, "failed"), 2.0);
    // Six slow messages in flight, none acknowledged, when Luge dies.
    let received = events(&luge, trigger, "received");
    for _ in 0..6 {
        redis.add("jobs", b"sleep:1500").unwrap();
    }
    eventually("slow messages in flight", || {
        events(&luge, trigger, "received") >= received + 6.0
    });
    kill_9(luge);
    let luge = app.serve();
    eventually("the dead process's messages handled here", || {
        events(&luge, trigger, "handled") >= 6.0
    });
    assert!(events(&luge, trigger, "redelivered") >= 6.0);
    redis.add("jobs", b"still going").unwrap();
    eventually("new messages handled", || {
        luge.get_text("/kv/last-message") == "still going"
    });
    assert_eq!(redis.command(&[b"XLEN", b"jobs:dead"]).unwrap(), 1);
}

/// A durable queue's server for [`a_queue_loses_nothing`]: the stream
/// `jobs` filled, the trigger reading it, and what is left to acknowledge.
enum QueueServer {
    Nats(NatsServer),
    Redis(RedisServer),
    Kafka(KafkaServer),
}

impl QueueServer {
    /// Fills the stream with `n` messages, each stored before the test
    /// goes on, and makes its dead-letter place.
    fn fill(&mut self, n: usize) {
        let payloads = (0..n).map(|i| format!("{{\"n\":{i}}}"));
        match self {
            Self::Nats(nats) => {
                let mut client = nats.client().unwrap();
                client.create_stream("JOBS", &["jobs"]).unwrap();
                client.create_stream("DEAD", &["jobs-dead"]).unwrap();
                assert_eq!(client.publish("jobs", payloads).unwrap(), n);
            }
            Self::Kafka(kafka) => {
                // Four partitions: two processes share them.
                kafka.create_topic("jobs", 4).unwrap();
                let keyless = payloads.map(|p| (None, p.into_bytes()));
                assert_eq!(kafka.produce("jobs", keyless), Ok(n));
            }
            Self::Redis(redis) => {
                let mut connection = redis::Client::open(redis.url())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let payloads: Vec<String> = payloads.collect();
                for chunk in payloads.chunks(1000) {
                    let mut pipe = redis::pipe();
                    for payload in chunk {
                        pipe.cmd("XADD")
                            .arg("jobs")
                            .arg("*")
                            .arg("payload")
                            .arg(payload)
                            .ignore();
                    }
                    pipe.exec(&mut connection).unwrap();
                }
            }
        }
    }

    /// The trigger's luge.toml key and table.
    fn trigger(&self) -> String {
        match self {
            Self::Nats(nats) => format!(
                "nats-jetstream = {{ address = \"nats://127.0.0.1:{}\", stream = \"JOBS\", \
                 dead_letter = \"jobs-dead\", ack_wait_ms = 2000 }}",
                nats.port
            ),
            Self::Redis(redis) => format!(
                "redis-streams = {{ address = \"redis://127.0.0.1:{}\", stream = \"jobs\", \
                 dead_letter = \"jobs-dead\", claim_idle_ms = 2000 }}",
                redis.port
            ),
            Self::Kafka(kafka) => format!(
                "kafka = {{ address = \"{}\", topic = \"jobs\", dead_letter = \"jobs-dead\", \
                 session_timeout_ms = 6000 }}",
                kafka.address()
            ),
        }
    }

    fn kill(&mut self) {
        match self {
            Self::Nats(nats) => nats.kill(),
            Self::Redis(redis) => redis.kill(),
            Self::Kafka(kafka) => kafka.kill(),
        }
    }

    fn restart(&mut self) {
        match self {
            Self::Nats(nats) => nats.restart().unwrap(),
            Self::Redis(redis) => redis.restart().unwrap(),
            Self::Kafka(kafka) => kafka.restart().unwrap(),
        }
    }

    /// Whether every one of `n` messages was acknowledged, and what the
    /// server says of its reader.
    fn all_acknowledged(&self, n: usize) -> (bool, String) {
        match self {
            Self::Nats(nats) => {
                let info = nats
                    .client()
                    .and_then(|mut c| {
                        c.api("$JS.API.CONSUMER.INFO.JOBS.luge", serde_json::json!({}))
                    })
                    .unwrap_or_default();
                let done = info["ack_floor"]["stream_seq"].as_u64() == Some(n as u64)
                    && info["num_ack_pending"] == 0
                    && info["num_pending"] == 0;
                (done, info.to_string())
            }
            Self::Kafka(kafka) => {
                let lag = kafka.lag("jobs", "luge");
                (lag == Some(0), format!("the group's lag {lag:?}"))
            }
            Self::Redis(redis) => {
                let groups: Result<redis::Value, _> = redis::Client::open(redis.url())
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| redis::cmd("XINFO").arg("GROUPS").arg("jobs").query(&mut c));
                // [[name, luge, consumers, N, pending, N, ..., lag, N]]
                let field = |name: &str| -> Option<i64> {
                    let redis::Value::Array(groups) = groups.as_ref().ok()? else {
                        return None;
                    };
                    let redis::Value::Array(fields) = groups.first()? else {
                        return None;
                    };
                    fields.chunks(2).find_map(|pair| match pair {
                        [redis::Value::BulkString(key), redis::Value::Int(value)]
                            if key == name.as_bytes() =>
                        {
                            Some(*value)
                        }
                        _ => None,
                    })
                };
                let (pending, lag) = (field("pending"), field("lag"));
                (
                    pending == Some(0) && lag == Some(0),
                    format!("pending {pending:?}, lag {lag:?}"),
                )
            }
        }
    }

    /// Messages dead-lettered.
    fn dead(&self) -> u64 {
        match self {
            Self::Nats(nats) => nats.client().unwrap().stream_messages("DEAD").unwrap(),
            Self::Redis(redis) => redis.command(&[b"XLEN", b"jobs-dead"]).unwrap() as u64,
            Self::Kafka(kafka) => kafka.messages("jobs-dead").unwrap().len() as u64,
        }
    }
}

/// 100,000 messages on a durable queue, read by two Luge processes with
/// the same trigger: one process is killed with `kill -9` mid-stream
/// (what it held goes to the other after the trigger's lease), then the
/// server is killed and is away for 10 s (both reconnect), and a new
/// process joins. Every message is acknowledged in the end (nothing
/// pending or unread), a message is acknowledged only after its function
/// succeeded, and none was dead-lettered.
fn a_queue_loses_nothing(mut server: QueueServer) {
    const MESSAGES: usize = 100_000;
    server.fill(MESSAGES);
    let site = Site::new(
        &["noop"],
        &format!(
            r#"
[[routes]]
path = "/noop"
module = "noop.wasm"

[[triggers]]
function = "/noop"
{}
max_in_flight = 16
"#,
            server.trigger()
        ),
    );
    let trigger = "triggers[0]";
    let a = site.start(&[]);
    let b = site.start(&[]);
    eventually("both processes handle messages", || {
        events(&a, trigger, "handled") >= 1000.0 && events(&b, trigger, "handled") >= 1000.0
    });
    kill_9(a);
    let handled_before = events(&b, trigger, "handled");
    eventually("the other goes on", || {
        events(&b, trigger, "handled") >= handled_before + 1000.0
    });
    server.kill();
    std::thread::sleep(Duration::from_secs(10));
    server.restart();
    let c = site.start(&[]);
    let started = Instant::now();
    loop {
        let (done, said) = server.all_acknowledged(MESSAGES);
        if done {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "not every message acknowledged: {said}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // What `a` held when it died was delivered again (to b or c): the
    // queues that count deliveries say so (Kafka counts none: its
    // consumers read a dead member's partitions from the last commit,
    // which passed nothing `a` had not finished).
    if !matches!(server, QueueServer::Kafka(_)) {
        let redelivered = events(&b, trigger, "redelivered") + events(&c, trigger, "redelivered");
        assert!(redelivered >= 1.0);
    }
    assert_eq!(
        events(&b, trigger, "failed") + events(&c, trigger, "failed"),
        0.0
    );
    assert_eq!(server.dead(), 0);
}

#[test]
fn a_jetstream_queue_loses_nothing_across_kill_9_of_luge_and_of_the_server() {
    wasmtime_only!();
    let nats = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    a_queue_loses_nothing(QueueServer::Nats(nats));
}

#[test]
fn a_kafka_topic_loses_nothing_across_kill_9_of_luge_and_of_the_broker() {
    wasmtime_only!();
    let kafka = KafkaServer::start().expect("a Kafka broker (./scripts/setup.sh)");
    a_queue_loses_nothing(QueueServer::Kafka(kafka));
}

#[test]
fn a_redis_stream_loses_nothing_across_kill_9_of_luge_and_of_the_server() {
    wasmtime_only!();
    let redis = RedisServer::durable().expect("redis-server (./scripts/setup.sh)");
    a_queue_loses_nothing(QueueServer::Redis(redis));
}

/// A nats-server with JetStream, its stream `ORDERS` (`orders.>`) and
/// the dead letters' `DEAD` (`dead.orders`), and a client to it.
fn orders_queue() -> (NatsServer, NatsClient) {
    let nats = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    let mut client = nats.client().unwrap();
    client.create_stream("ORDERS", &["orders.>"]).unwrap();
    client.create_stream("DEAD", &["dead.orders"]).unwrap();
    (nats, client)
}

/// luge.toml: the function `handler`, `MODULE.wasm` with `extra` keys, on
/// the `ORDERS` stream of the server on `port`, dead-lettered to
/// `dead.orders` after `max_attempts`.
fn on_orders(port: u16, module: &str, extra: &str, max_attempts: u32) -> String {
    format!(
        r#"
[[functions]]
name = "handler"
module = "{module}.wasm"
{extra}

[[triggers]]
function = "handler"
nats-jetstream = {{ address = "nats://127.0.0.1:{port}", stream = "ORDERS", max_attempts = {max_attempts}, dead_letter = "dead.orders" }}
"#
    )
}

/// A wasmCloud messaging component (`wasmcloud:messaging/handler@0.2.0`,
/// actions/spin/messaging) on a NATS JetStream trigger, unchanged: each
/// message reaches its `handle-message` with its subject and body, its
/// error result fails the message (dead-lettered after `max_attempts`);
/// a Spin Redis subscriber on the same trigger is refused at start.
#[test]
fn a_wasmcloud_messaging_component_takes_jetstream_messages() {
    wasmtime_only!();
    let (nats, mut client) = orders_queue();
    let config = |module: &str| on_orders(nats.port, module, "", 2);
    let site = Site::new(&["messaging", "spin-subscriber"], &config("messaging"));
    let luge = site.start(&[]);
    client
        .publish("orders.new", ["first", "fail", "second"])
        .unwrap();
    let trigger = "triggers[0]";
    eventually("the good ones handled, the bad one dead-lettered", || {
        events(&luge, trigger, "handled") >= 2.0
            && nats.client().unwrap().stream_messages("DEAD").unwrap() == 1
    });
    assert_eq!(events(&luge, trigger, "failed"), 2.0);
    // Each run's message was as old as JetStream's stamp says: under the
    // retry's backoff and the runs, not since Luge's start.
    let ages = luge.metric("luge_trigger_message_age_seconds_count{trigger=\"triggers[0]\"}");
    let age_sum = luge.metric("luge_trigger_message_age_seconds_sum{trigger=\"triggers[0]\"}");
    assert_eq!(ages, 4.0, "two handled, two failed runs");
    assert!(age_sum > 0.0 && age_sum < 60.0, "{age_sum}");
    let letter = nats.client().unwrap().stream_message("DEAD", 1).unwrap();
    assert_eq!(letter.payload, b"fail");
    assert!(
        letter.headers.contains("Luge-Attempts: 2"),
        "{}",
        letter.headers
    );
    drop(luge);
    // A Spin Redis subscriber takes Redis messages only.
    site.write_config(&config("spin-subscriber"));
    let Err(error) = site.try_start(&[]) else {
        panic!("started");
    };
    assert!(error.contains("takes no messaging events"), "{error}");
}

/// wasmCloud's messaging consumer (`wasmcloud:messaging/consumer@0.2.0`)
/// from the same component, unchanged: it asks a service on the one NATS
/// server its `nats://` grant names and publishes the answer; a subject of
/// the server's own (JetStream's API) is refused to it, the stream left
/// alone; without the grant nothing is sent. Each refusal fails its
/// message (dead-lettered), the reason in the function's log.
#[test]
fn a_wasmcloud_messaging_component_asks_and_publishes_on_its_granted_server() {
    wasmtime_only!();
    let (nats, mut client) = orders_queue();
    // A service that answers in capitals until the server goes.
    let mut service = nats.client().unwrap();
    service.subscribe("svc.upper").unwrap();
    service.read_timeout(None).unwrap();
    std::thread::spawn(move || {
        while let Ok(asked) = service.next_message() {
            if let Some(reply_to) = asked.reply_to {
                let _ = service.send(&reply_to, &asked.payload.to_ascii_uppercase());
            }
        }
    });
    let mut answers = nats.client().unwrap();
    answers.subscribe("answers.>").unwrap();
    // Luge's start and the first run, on a loaded machine.
    answers.read_timeout(Some(Duration::from_secs(60))).unwrap();
    let config = |grants: &str| {
        let grants = format!("allowed_outbound_hosts = [{grants}]");
        // Three runs: a first one slowed past the request's timeout by a
        // loaded machine (CI runs the triggers' tests side by side) is
        // run again, not dead-lettered. A refusal is refused each time.
        on_orders(nats.port, "messaging", &grants, 3)
    };
    let granted = format!("\"nats://127.0.0.1:{}\"", nats.port);
    let site = Site::new(&["messaging"], &config(&granted));
    let luge = site.start(&[]);
    client
        .publish(
            "orders.new",
            ["ask:svc.upper:hello", "send:$JS.API.STREAM.DELETE.ORDERS"],
        )
        .unwrap();
    let answer = answers.next_message().unwrap();
    assert_eq!(answer.subject, "answers.orders.new");
    assert_eq!(answer.payload, b"HELLO");
    let dead = || nats.client().unwrap().stream_messages("DEAD").unwrap();
    eventually("the send to the API dead-lettered", || dead() == 1);
    let letter = nats.client().unwrap().stream_message("DEAD", 1).unwrap();
    assert_eq!(letter.payload, b"send:$JS.API.STREAM.DELETE.ORDERS");
    assert!(
        luge.stderr_shows("is not a subject a function may send to"),
        "{}",
        luge.stderr()
    );
    // The stream is still there, with both messages.
    assert_eq!(client.stream_messages("ORDERS").unwrap(), 2);
    drop(luge);
    // No nats:// grant: the consumer reaches no server.
    site.write_config(&config(""));
    let luge = site.start(&[]);
    client.publish("orders.new", ["send:orders.out"]).unwrap();
    eventually("the ungranted send dead-lettered", || dead() == 2);
    let letter = nats.client().unwrap().stream_message("DEAD", 2).unwrap();
    assert_eq!(letter.payload, b"send:orders.out");
    assert!(
        luge.stderr_shows("0 NATS servers are granted"),
        "{}",
        luge.stderr()
    );
    drop(luge);
}

/// A queue component of spin-trigger-sqs (`spin:sqs@3.0.0`,
/// actions/spin/sqs) on a NATS JetStream trigger, unchanged: each message
/// reaches its `handle-queue-message` as SQS hands one over (an id, the
/// `SentTimestamp` attribute, its text); `delete` acknowledges it, while
/// `leave` and an error have it delivered again, then dead-lettered after
/// `max_attempts`, as SQS's redrive policy would.
#[test]
fn a_spin_sqs_component_takes_a_queues_messages() {
    wasmtime_only!();
    let (nats, mut client) = orders_queue();
    let site = Site::new(&["sqs"], &on_orders(nats.port, "sqs", "", 2));
    let luge = site.start(&[]);
    client
        .publish("orders.new", ["hello", "leave", "fail"])
        .unwrap();
    let trigger = "triggers[0]";
    let dead = || nats.client().unwrap().stream_messages("DEAD").unwrap();
    eventually("hello handled, leave and fail dead-lettered", || {
        events(&luge, trigger, "handled") >= 1.0 && dead() == 2
    });
    assert_eq!(events(&luge, trigger, "handled"), 1.0);
    assert_eq!(events(&luge, trigger, "failed"), 4.0, "two runs each");
    assert!(
        luge.stderr_shows("(subject,system,SentTimestamp): hello"),
        "{}",
        luge.stderr()
    );
    assert!(luge.stderr_shows("the handler left the message on the queue"));
    let mut letters: Vec<Vec<u8>> = (1..=2)
        .map(|n| {
            nats.client()
                .unwrap()
                .stream_message("DEAD", n)
                .unwrap()
                .payload
        })
        .collect();
    letters.sort();
    assert_eq!(letters, [b"fail".to_vec(), b"leave".to_vec()]);
}

#[test]
fn a_component_on_a_trigger_its_export_does_not_take_is_refused_at_start() {
    wasmtime_only!();
    let dir = tempfile::tempdir().unwrap();
    let manifest = events_manifest(dir.path(), |text| {
        text.replace("component = \"tick\"", "component = \"subscriber\"")
    });
    let Err(error) = Luge::try_start("serve", &["--spin", path_str(&manifest)]) else {
        panic!("started");
    };
    assert!(
        error.contains(
            "exports spin:redis/inbound-redis@3.0.0#handle-message, which takes no cron events"
        ),
        "{error}"
    );
    // And an event handler on an HTTP route.
    let manifest = events_manifest(dir.path(), |text| {
        text.replace(
            "route = \"/...\"\ncomponent = \"app\"",
            "route = \"/...\"\ncomponent = \"subscriber\"",
        )
    });
    let Err(error) = Luge::try_start("serve", &["--spin", path_str(&manifest)]) else {
        panic!("started");
    };
    assert!(error.contains("is an event handler"), "{error}");
}

#[test]
fn luge_toml_triggers_wake_core_modules_and_handlers() {
    let redis = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let broker = MosquittoServer::start().expect("mosquitto (./scripts/setup.sh)");
    let handler = engine() == "wasmtime";
    let mut modules = vec!["c-count", "kv"];
    let mut toml = format!(
        r#"
[[routes]]
path = "/count"
module = "c-count.wasm"

[[routes]]
path = "/kv"
module = "kv.wasm"

[[triggers]]
function = "/count"
cron = "* * * * * *"

[[triggers]]
function = "kv"
redis = {{ address = "redis://127.0.0.1:{port}", channel = "ops" }}
max_in_flight = 2
relative_deadline_us = 2000000

[[triggers]]
function = "kv"
mqtt = {{ address = "mqtt://127.0.0.1:{mqtt}", topic = "ops/#", qos = 1 }}
"#,
        port = redis.port,
        mqtt = broker.port,
    );
    if handler {
        modules.push("http3");
        toml.push_str(&format!(
            r#"
[[routes]]
path = "/echo"
module = "http3.wasm"

[[triggers]]
function = "/echo"
redis = {{ address = "redis://127.0.0.1:{port}", channel = "web" }}
"#,
            port = redis.port
        ));
    }
    let site = Site::new(&modules, &toml);
    let state = tempfile::tempdir().unwrap();
    let luge = site.start(&["--state-dir", path_str(state.path())]);

    // The message is the module's stdin: its state operations run.
    let set = br#"{"ops":[{"op":"set","key":"from-redis","value":"v1"}]}"#;
    publish_when_subscribed(&redis, "ops", set);
    eventually("the kv function ran the message", || {
        let (status, answer) = luge.post(
            "/kv",
            &serde_json::json!({"ops": [{"op": "get", "key": "from-redis"}]}),
        );
        status == 200 && answer["results"][0] == "v1"
    });
    // The same from MQTT (QoS 1, a wildcard filter).
    let set = r#"{"ops":[{"op":"set","key":"from-mqtt","value":"v2"}]}"#;
    eventually("the kv function ran the MQTT message", || {
        broker.publish("ops/a", set, 1).unwrap();
        let (status, answer) = luge.post(
            "/kv",
            &serde_json::json!({"ops": [{"op": "get", "key": "from-mqtt"}]}),
        );
        status == 200 && answer["results"][0] == "v2"
    });
    assert!(events(&luge, "triggers[2]", "handled") >= 1.0);

    // A message that makes it trap: a failed event.
    redis.publish("ops", br#"{"ops":[{"op":"trap"}]}"#).unwrap();
    eventually("the failure counted", || {
        events(&luge, "triggers[1]", "failed") >= 1.0
    });

    // Each tick added one to the counter the route reads.
    eventually("two ticks", || {
        events(&luge, "triggers[0]", "handled") >= 2.0
    });
    let (status, answer) = luge.post("/count", &serde_json::json!({}));
    assert_eq!(status, 200);
    assert!(answer["hits"].as_i64().unwrap() >= 3, "{answer}");

    // An HTTP handler gets a POST with the message as body; its 2xx is
    // success.
    if handler {
        publish_when_subscribed(&redis, "web", b"to the handler");
        eventually("the handler answered", || {
            events(&luge, "triggers[3]", "handled") >= 1.0
        });
        assert_eq!(events(&luge, "triggers[3]", "failed"), 0.0);
    }
}

/// 100,000 messages on one channel beside an HTTP route: every message is
/// accounted for (handled, or dropped past the trigger's room), and the
/// route answers at least 99 % of its requests meanwhile.
#[test]
fn a_flood_on_one_channel_leaves_http_routes_answered() {
    let redis = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let site = Site::new(
        &["c-count", "c-hello"],
        &format!(
            r#"
[[routes]]
path = "/hello"
module = "c-hello.wasm"

[[functions]]
name = "counter"
module = "c-count.wasm"

[[triggers]]
function = "counter"
redis = {{ address = "redis://127.0.0.1:{port}", channel = "flood" }}
max_in_flight = 16
"#,
            port = redis.port
        ),
    );
    let state = tempfile::tempdir().unwrap();
    let luge = site.start(&["--state-dir", path_str(state.path())]);
    eventually("subscribed", || {
        redis.publish("flood", b"x").unwrap_or(0) > 0
    });
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (sent, ok) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            let (mut sent, mut ok) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, _) = luge.request("GET", "/hello", b"");
                sent += 1;
                ok += u32::from(status == 200);
            }
            (sent, ok)
        });
        assert_eq!(redis.publish_many("flood", b"x", 100_000).unwrap(), 100_000);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        client.join().unwrap()
    });
    assert!(
        sent > 0 && f64::from(ok) >= 0.99 * f64::from(sent),
        "{ok} of {sent}"
    );
    eventually("every message accounted for", || {
        let done = ended(&luge, "triggers[0]");
        done == events(&luge, "triggers[0]", "received") && done >= 100_001.0
    });
    assert!(events(&luge, "triggers[0]", "handled") >= 1.0);
}

/// Uploads carry triggers under the same grants as their own connections:
/// a Redis trigger's server must be granted; the trigger follows the
/// upload (replaced: the new one runs; deleted: it stops).
#[test]
fn uploads_carry_triggers_under_their_grants() {
    use crate::standalone::{Host, TOKEN};
    use base64::Engine as _;
    let redis = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let host = Host::new();
    let state = tempfile::tempdir().unwrap();
    let args = ["--state-dir", path_str(state.path())];
    let luge = host.start(&args);
    let auth = format!("Bearer {TOKEN}");
    let upload = |luge: &Luge, metadata: serde_json::Value| {
        let body = serde_json::json!({
            "code": base64::engine::general_purpose::STANDARD.encode(wasm("c-count")),
            "metadata": metadata,
        });
        luge.send(
            "PUT",
            "/v1/functions/counter",
            &[("authorization", &auth)],
            body.to_string().as_bytes(),
        )
    };
    let address = format!("redis://127.0.0.1:{}", redis.port);
    let trigger = serde_json::json!([{"redis": {"address": address, "channel": "up"}}]);

    // Not granted: refused, naming the server.
    let refused = upload(&luge, serde_json::json!({"triggers": trigger}));
    refused.expect(400);
    assert!(
        String::from_utf8_lossy(&refused.body).contains("is not granted"),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );

    // A Kafka trigger is the operator's alone, granted or not.
    let kafka = upload(
        &luge,
        serde_json::json!({
            "allowed_outbound_hosts": ["kafka://127.0.0.1:9092"],
            "triggers": [{"kafka": {"address": "kafka://127.0.0.1:9092", "topic": "up"}}],
        }),
    );
    kafka.expect(400);
    assert!(
        String::from_utf8_lossy(&kafka.body).contains("a Kafka trigger is the operator's"),
        "{}",
        String::from_utf8_lossy(&kafka.body)
    );

    // Granted: its messages run it.
    let granted = serde_json::json!({
        "allowed_outbound_hosts": [address],
        "triggers": trigger,
    });
    assert_eq!(upload(&luge, granted.clone()).status, 201);
    let name = "counter.triggers[0]";
    eventually("subscribed", || redis.publish("up", b"x").unwrap_or(0) > 0);
    eventually("handled", || events(&luge, name, "handled") >= 1.0);

    // Restored with the store after a restart, triggers and all.
    drop(luge);
    let luge = host.start(&args);
    eventually("subscribed again", || {
        redis.publish("up", b"x").unwrap_or(0) > 0
    });
    eventually("handled again", || events(&luge, name, "handled") >= 1.0);

    // Replaced by a version with a cron trigger: the Redis one stops.
    let cron = serde_json::json!({"triggers": [{"cron": "* * * * * *"}]});
    assert_eq!(upload(&luge, cron).status, 200);
    eventually("unsubscribed", || {
        redis.publish("up", b"x").unwrap_or(1) == 0
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = events(&luge, name, "handled");
    eventually("two ticks", || {
        events(&luge, name, "handled") >= before + 2.0
    });

    // Deleted: nothing runs it any more.
    let deleted = luge.send(
        "DELETE",
        "/v1/functions/counter",
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(deleted.status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    let handled = events(&luge, name, "handled");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(events(&luge, name, "handled"), handled);
}
