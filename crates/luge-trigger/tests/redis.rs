//! The Redis source against a real `redis-server` on a free loopback port:
//! messages reach every trigger on their channel, a trigger with no room
//! loses (and counts) what it cannot take, and a restarted server is
//! resubscribed to.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luge_core::event::{Event, EventKind};
use luge_testkit::redis::RedisServer;
use luge_trigger::redis::{Address, Subscription};
use luge_trigger::{EventSource, Handled, Handling, Sink, Source};

/// Keeps what it is offered, at most `room` events in all.
struct Collect {
    got: Mutex<Vec<Event>>,
    lost: AtomicUsize,
    room: tokio::sync::Semaphore,
}

impl Collect {
    fn new(room: usize) -> Arc<Self> {
        Arc::new(Self {
            got: Mutex::new(Vec::new()),
            lost: AtomicUsize::new(0),
            room: tokio::sync::Semaphore::new(room),
        })
    }

    fn payloads(&self) -> Vec<String> {
        let got = self.got.lock().unwrap();
        got.iter()
            .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
            .collect()
    }
}

impl Sink for Collect {
    fn offer(&self, event: Event) -> Result<Handling, Event> {
        let Ok(permit) = self.room.try_acquire() else {
            return Err(event);
        };
        // Never given back: the room fills.
        permit.forget();
        self.got.lock().unwrap().push(event);
        Ok(Box::pin(async { Handled::Succeeded }))
    }

    fn queue(&self, event: Event) -> Handling {
        self.got.lock().unwrap().push(event);
        Box::pin(async { Handled::Succeeded })
    }

    fn lost(&self, _event: &Event) {
        self.lost.fetch_add(1, Ordering::SeqCst);
    }

    fn redelivered(&self) {}
}

async fn publish(url: &str, channel: &str, message: &str) -> i64 {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg(message)
        .query_async(&mut connection)
        .await
        .unwrap()
}

/// Publishes `message` until someone receives it (the subscription is up).
async fn publish_when_subscribed(url: &str, channel: &str, message: &str) {
    let started = Instant::now();
    while publish(url, channel, message).await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn eventually(what: &str, test: impl Fn() -> bool) {
    let started = Instant::now();
    while !test() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_their_channels_triggers_and_survive_a_restart() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let url = server.url();
    let (a, b, other) = (Collect::new(1000), Collect::new(1000), Collect::new(1000));
    let triggers: Vec<(Source, Arc<dyn Sink>)> = vec![
        (
            Source::new(Subscription::new(&url, "jobs").unwrap()),
            a.clone(),
        ),
        (
            Source::new(Subscription::new(&url, "jobs").unwrap()),
            b.clone(),
        ),
        (
            Source::new(Subscription::new(&url, "other").unwrap()),
            other.clone(),
        ),
    ];
    let sources = luge_trigger::sources(triggers);
    // One connection for the address.
    assert_eq!(sources.len(), 1);
    assert!(sources[0].describe().contains("jobs"));
    let running: Vec<_> = sources.into_iter().map(|s| tokio::spawn(s.run())).collect();

    publish_when_subscribed(&url, "jobs", "first").await;
    publish(&url, "other", "elsewhere").await;
    eventually("both triggers on jobs got it", || {
        a.payloads() == ["first"] && b.payloads() == ["first"]
    })
    .await;
    eventually("other got its own", || other.payloads() == ["elsewhere"]).await;
    let got = a.got.lock().unwrap()[0].kind.clone();
    assert_eq!(
        got,
        EventKind::Redis {
            channel: "jobs".into()
        }
    );

    // The server restarts on the same port: resubscribed, and what is
    // published after that arrives.
    let port = server.port;
    drop(server);
    let _server = RedisServer::on(port).unwrap();
    publish_when_subscribed(&url, "jobs", "after").await;
    eventually("resubscribed", || {
        a.payloads().last().map(String::as_str) == Some("after")
    })
    .await;
    assert_eq!(a.lost.load(Ordering::SeqCst), 0);
    for task in running {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_without_room_loses_and_counts_the_rest() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let url = server.url();
    let full = Collect::new(2);
    let mut sources = luge_trigger::sources(vec![(
        Source::new(Subscription::new(&url, "flood").unwrap()),
        full.clone() as Arc<dyn Sink>,
    )]);
    let task = tokio::spawn(sources.remove(0).run());
    publish_when_subscribed(&url, "flood", "0").await;
    for n in 1..10 {
        publish(&url, "flood", &n.to_string()).await;
    }
    eventually("all ten seen", || {
        full.payloads().len() + full.lost.load(Ordering::SeqCst) == 10
    })
    .await;
    assert_eq!(full.payloads(), ["0", "1"]);
    assert_eq!(full.lost.load(Ordering::SeqCst), 8);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_bound_ends_the_subscription_not_the_host() {
    let server = RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let url = server.url();
    let sink = Collect::new(1000);
    let channels =
        std::collections::BTreeMap::from([("big".to_owned(), vec![sink.clone() as Arc<dyn Sink>])]);
    let source = luge_trigger::redis::RedisSource::new(Address::parse(&url).unwrap(), channels)
        .with_max_message_bytes(4096);
    let task = tokio::spawn(Box::new(source).run());
    publish_when_subscribed(&url, "big", "small").await;
    // 64 KiB: the connection ends, and the source subscribes again.
    publish(&url, "big", &"x".repeat(64 << 10)).await;
    // Until the source has read the big one, the old subscription still
    // counts as a receiver and drops whatever follows it: publish again
    // until "after" arrives on the new one.
    let started = Instant::now();
    while !sink.payloads().contains(&"after".to_owned()) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the small ones arrived"
        );
        publish(&url, "big", "after").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        sink.payloads().iter().all(|p| p.len() < 4096),
        "the big one was taken"
    );
    task.abort();
}
