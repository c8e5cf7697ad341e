//! The Kafka source against a real Kafka broker (KRaft, on free loopback
//! ports): every message handled and its offset committed once it
//! succeeded, failures retried, a poison message dead-lettered after its
//! attempts with the others unaffected, each key's order kept under
//! retries, two members of a group sharing the topic and taking over a
//! stopped one's partitions, and an oversized message dead-lettered
//! without its payload.

#![cfg(feature = "kafka")]
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod queue;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use luge_core::event::EventKind;
use luge_testkit::kafka::KafkaServer;
use luge_trigger::kafka::{Kafka, KafkaSource, Topic};
use luge_trigger::{EventSource, Handled, Kind};
use queue::{
    Record, a_stopped_then_two_live, handled_then_acknowledged, numbered, taken_over, until,
};

fn server() -> KafkaServer {
    KafkaServer::start().expect("a Kafka broker (./scripts/setup.sh)")
}

/// The settings of a trigger on `topic` with the `extra` lines of
/// luge.toml.
fn topic(server: &KafkaServer, topic: &str, extra: &str) -> Topic {
    let text = format!(
        "address = \"{}\"\ntopic = \"{topic}\"\n{extra}",
        server.address()
    );
    let source = Kafka.configured(toml::from_str(&text).unwrap()).unwrap();
    source.settings::<Topic>().unwrap().clone()
}

fn run(topic: Topic, record: &std::sync::Arc<Record>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(Box::new(KafkaSource::new(topic, record.clone())).run())
}

/// Produces each payload, keyless, on a blocking thread.
async fn produce(server: &KafkaServer, topic: &str, payloads: Vec<String>) {
    produce_keyed(
        server,
        topic,
        payloads.into_iter().map(|p| (None, p)).collect(),
    )
    .await;
}

async fn produce_keyed(server: &KafkaServer, topic: &str, messages: Vec<(Option<String>, String)>) {
    let n = messages.len();
    let sent = tokio::task::block_in_place(|| {
        server.produce(
            topic,
            messages
                .into_iter()
                .map(|(k, p)| (k.map(String::into_bytes), p.into_bytes())),
        )
    });
    assert_eq!(sent, Ok(n));
}

/// Whether `group` committed every message of `topic`.
async fn all_committed(server: &KafkaServer, topic: &str, group: &str) -> bool {
    tokio::task::block_in_place(|| server.lag(topic, group)) == Some(0)
}

fn dead(server: &KafkaServer, topic: &str) -> Vec<luge_testkit::kafka::Stored> {
    // None yet while the topic is being made.
    tokio::task::block_in_place(|| server.messages(topic)).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_is_committed_after_it_succeeded_failures_retried() {
    let server = server();
    server.create_topic("jobs", 4).unwrap();
    // Messages produced before the source starts are read: a new group
    // starts at the topic's beginning.
    produce(&server, "jobs", numbered("m", 100)).await;
    // Every third message fails its first run, and succeeds the next.
    let record = Record::every_third_fails_once();
    let task = run(topic(&server, "jobs", ""), &record);
    produce(&server, "jobs", numbered("n", 100)).await;
    handled_then_acknowledged(&record, 200, Duration::from_secs(60), async || {
        all_committed(&server, "jobs", "luge").await
    })
    .await;
    record.retried_every_third();
    assert!(record.kinds.lock().unwrap().iter().all(|kind| matches!(
        kind,
        EventKind::Message { system: "kafka", subject } if subject == "jobs"
    )));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_dead_lettered_after_its_attempts_and_the_rest_go_on() {
    let server = server();
    server.create_topic("orders", 2).unwrap();
    let record = Record::poisoned();
    let task = run(
        topic(&server, "orders", "max_attempts = 3\ngroup = \"billing\""),
        &record,
    );
    let mut payloads = numbered("ok", 10);
    payloads.insert(5, "poison".to_owned());
    produce_keyed(
        &server,
        "orders",
        payloads
            .into_iter()
            .map(|p| (Some(format!("key-{p}")), p))
            .collect(),
    )
    .await;
    until("dead-lettered", Duration::from_secs(30), async || {
        dead(&server, "orders.dead").len() == 1
    })
    .await;
    let letter = &dead(&server, "orders.dead")[0];
    assert_eq!(letter.payload.as_deref(), Some(&b"poison"[..]));
    assert_eq!(letter.key.as_deref(), Some(&b"key-poison"[..]));
    assert_eq!(letter.header("luge-reason"), Some("failed"));
    assert_eq!(letter.header("luge-attempts"), Some("3"));
    assert_eq!(letter.header("luge-topic"), Some("orders"));
    assert!(letter.header("luge-offset").is_some(), "{letter:?}");
    handled_then_acknowledged(&record, 10, Duration::from_secs(20), async || {
        all_committed(&server, "orders", "billing").await
    })
    .await;
    assert_eq!(record.calls.lock().unwrap()["poison"], 3);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_keys_order_is_kept_under_retries() {
    let server = server();
    // One partition: every key's messages in one log, where order is
    // Kafka's to keep and Luge's to honour.
    server.create_topic("ordered", 1).unwrap();
    // Every third message of a key fails its first two runs.
    let record = Record::new(|payload, calls| {
        let n: usize = payload.split_once(':').unwrap().1.parse().unwrap();
        if n.is_multiple_of(3) && calls <= 2 {
            Handled::Failed
        } else {
            Handled::Succeeded
        }
    });
    let task = run(topic(&server, "ordered", "max_attempts = 5"), &record);
    // Interleaved: k0:0, k1:0, k2:0, k0:1, ...
    let messages = (0..30)
        .flat_map(|n| (0..3).map(move |k| (Some(format!("k{k}")), format!("k{k}:{n}"))))
        .collect();
    produce_keyed(&server, "ordered", messages).await;
    until("all handled", Duration::from_secs(60), async || {
        record.succeeded().len() >= 90
    })
    .await;
    let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for payload in record.succeeded() {
        let (key, n) = payload.split_once(':').unwrap();
        by_key
            .entry(key.to_owned())
            .or_default()
            .push(n.parse().unwrap());
    }
    for (key, order) in &by_key {
        assert_eq!(order, &(0..30).collect::<Vec<_>>(), "key {key}");
    }
    assert_eq!(by_key.len(), 3);
    assert_eq!(record.called(), 90 + 2 * 30);
    until("all committed", Duration::from_secs(10), async || {
        all_committed(&server, "ordered", "luge").await
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_a_group_share_the_topic_and_take_over_a_stopped_ones_partitions() {
    let server = server();
    server.create_topic("work", 4).unwrap();
    // Live members read a's partitions from their last commit (nothing
    // of a's was committed).
    let (live, tasks) = a_stopped_then_two_live(
        |record, _| run(topic(&server, "work", ""), record),
        async |early| produce(&server, "work", early).await,
        Duration::from_secs(30),
    )
    .await;
    // Both members, a gone: what comes next is shared without a
    // rebalance (one would deliver what the member losing a partition
    // still runs a second time, as at-least-once allows).
    until("b and c the group", Duration::from_secs(60), async || {
        tokio::task::block_in_place(|| server.stable_members("luge")) == Some(2)
    })
    .await;
    produce(&server, "work", numbered("late", 300)).await;
    // Kafka does not count deliveries: that a's ten came again is that
    // all 310 did.
    taken_over(
        &live,
        tasks,
        (310, None, Duration::from_secs(60)),
        async || all_committed(&server, "work", "luge").await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_dead_lettered_without_its_payload() {
    let server = server();
    server.create_topic("big", 1).unwrap();
    let record = Record::new(|_, _| Handled::Succeeded);
    let task = run(topic(&server, "big", "max_message_bytes = 1024"), &record);
    let mut payloads = numbered("small", 6);
    payloads.insert(2, "x".repeat(4096));
    payloads.insert(5, "y".repeat(512 << 10));
    produce(&server, "big", payloads).await;
    until("dead-lettered", Duration::from_secs(30), async || {
        dead(&server, "big.dead").len() == 2
    })
    .await;
    for letter in dead(&server, "big.dead") {
        assert_eq!(letter.header("luge-reason"), Some("over 1024 bytes"));
        assert_eq!(letter.payload, None);
    }
    handled_then_acknowledged(&record, 6, Duration::from_secs(20), async || {
        all_committed(&server, "big", "luge").await
    })
    .await;
    assert_eq!(record.lost.load(Ordering::SeqCst), 2);
    task.abort();
}
