//! The Redis Streams source against a real `redis-server` on a free
//! loopback port: every message handled and acknowledged once it
//! succeeded, failures retried, a poison message dead-lettered after its
//! attempts with the others unaffected, two consumers of a group sharing
//! the stream, a stopped consumer's messages taken over, and an oversized
//! message dead-lettered unread.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod queue;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use luge_core::event::EventKind;
use luge_testkit::redis::RedisServer;
use luge_trigger::streams::{Queue, StreamSource, Streams};
use luge_trigger::{EventSource, Handled};
use queue::{
    Record, a_stopped_then_two_live, handled_then_acknowledged, numbered, taken_over, until,
};

fn queue(server: &RedisServer, stream: &str, extra: &str) -> Queue {
    queue::settings(&Streams, &server.url(), stream, extra)
}

async fn connection(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// `XADD stream * payload P` for each of `payloads`.
async fn add(server: &RedisServer, stream: &str, payloads: &[String]) {
    let mut c = connection(server).await;
    let mut pipe = redis::pipe();
    for payload in payloads {
        pipe.cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg("payload")
            .arg(payload.as_bytes())
            .ignore();
    }
    pipe.query_async::<()>(&mut c).await.unwrap();
}

/// How many of the group's messages are unacknowledged.
async fn pending(server: &RedisServer, stream: &str, group: &str) -> i64 {
    let mut c = connection(server).await;
    let reply: redis::Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(&mut c)
        .await
        .unwrap();
    match reply {
        redis::Value::Array(parts) => match parts.first() {
            Some(redis::Value::Int(n)) => *n,
            _ => -1,
        },
        _ => -1,
    }
}

/// The dead-letter stream's entries, each its fields.
async fn dead(server: &RedisServer, stream: &str) -> Vec<BTreeMap<String, String>> {
    let mut c = connection(server).await;
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(_, fields)| fields.into_iter().collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_is_acknowledged_after_it_succeeded_failures_retried() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    // Messages added before the source starts are read: a new group
    // starts at the stream's beginning.
    add(&server, "jobs", &numbered("m", 100)).await;
    // Every third message fails its first run, and succeeds the next.
    let record = Record::every_third_fails_once();
    let source = StreamSource::new(queue(&server, "jobs", ""), record.clone());
    let task = tokio::spawn(Box::new(source).run());
    add(&server, "jobs", &numbered("n", 100)).await;
    handled_then_acknowledged(&record, 200, Duration::from_secs(30), async || {
        pending(&server, "jobs", "luge").await == 0
    })
    .await;
    record.retried_every_third();
    assert!(
        record
            .kinds
            .lock()
            .unwrap()
            .iter()
            .all(|kind| matches!(kind, EventKind::Redis { channel } if channel == "jobs"))
    );
    assert!(dead(&server, "jobs:dead").await.is_empty());
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_dead_lettered_after_its_attempts_and_the_rest_go_on() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let record = Record::poisoned();
    let queue = queue(&server, "orders", "max_attempts = 3\ngroup = \"billing\"");
    let task = tokio::spawn(Box::new(StreamSource::new(queue, record.clone())).run());
    let mut payloads = numbered("ok", 10);
    payloads.insert(5, "poison".to_owned());
    add(&server, "orders", &payloads).await;
    until("dead-lettered", Duration::from_secs(20), async || {
        dead(&server, "orders:dead").await.len() == 1
    })
    .await;
    let letter = &dead(&server, "orders:dead").await[0];
    assert_eq!(letter["payload"], "poison");
    assert_eq!(letter["reason"], "failed");
    assert_eq!(letter["attempts"], "3");
    assert!(letter["id"].contains('-'), "{letter:?}");
    assert_eq!(record.succeeded().len(), 10);
    assert_eq!(record.calls.lock().unwrap()["poison"], 3);
    until("nothing pending", Duration::from_secs(5), async || {
        pending(&server, "orders", "billing").await == 0
    })
    .await;
    // An entry without a payload field: dead-lettered at once.
    let mut c = connection(&server).await;
    redis::cmd("XADD")
        .arg("orders")
        .arg("*")
        .arg("body")
        .arg("x")
        .query_async::<String>(&mut c)
        .await
        .unwrap();
    until(
        "no payload dead-lettered",
        Duration::from_secs(10),
        async || dead(&server, "orders:dead").await.len() == 2,
    )
    .await;
    assert_eq!(
        dead(&server, "orders:dead").await[1]["reason"],
        "no payload field"
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_of_a_group_share_the_stream_and_take_over_a_stopped_ones_messages() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    // Leases renewed at half the idle time: a second, so that a renewal
    // late on a loaded machine does not hand a running message over.
    let settings = |name: &str| format!("consumer = \"{name}\"\nclaim_idle_ms = 1000");
    // A consumer that takes messages and stops before finishing any.
    let (live, tasks) = a_stopped_then_two_live(
        |record, name| {
            let source = StreamSource::new(queue(&server, "work", &settings(name)), record.clone());
            tokio::spawn(Box::new(source).run())
        },
        async |early| add(&server, "work", &early).await,
        Duration::from_secs(10),
    )
    .await;
    add(&server, "work", &numbered("late", 300)).await;
    // a's ten, delivered again once it was idle past claim_idle.
    taken_over(
        &live,
        tasks,
        (310, Some(10), Duration::from_secs(30)),
        async || pending(&server, "work", "luge").await == 0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_dead_lettered_unread() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let record = Record::new(|_, _| Handled::Succeeded);
    let source =
        StreamSource::new(queue(&server, "big", ""), record.clone()).with_max_message_bytes(1024);
    let task = tokio::spawn(Box::new(source).run());
    // One over the bound but within a read's budget, one far past it
    // (the read that meets it is cut off), small ones around them.
    let mut payloads = numbered("small", 6);
    payloads.insert(2, "x".repeat(4096));
    payloads.insert(5, "y".repeat(1 << 20));
    add(&server, "big", &payloads).await;
    until("dead-lettered", Duration::from_secs(20), async || {
        dead(&server, "big:dead").await.len() == 2
    })
    .await;
    for letter in dead(&server, "big:dead").await {
        assert_eq!(letter["reason"], "over 1024 bytes");
        assert!(!letter.contains_key("payload"));
    }
    handled_then_acknowledged(&record, 6, Duration::from_secs(20), async || {
        pending(&server, "big", "luge").await == 0
    })
    .await;
    assert_eq!(record.lost.load(Ordering::SeqCst), 2);
    task.abort();
}
