//! The MQTT source against a real `mosquitto` on a free loopback port: a
//! QoS 1 message is acknowledged only after its handler succeeded (one
//! that failed comes again, marked redelivered), QoS 0 is offered once,
//! filters with wildcards match, and the broker's restart is survived.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luge_core::event::{Event, EventKind};
use luge_testkit::mosquitto::MosquittoServer;
use luge_trigger::mqtt::{Broker, Filter, Subscription};
use luge_trigger::{Handled, Handling, Sink, Source};

/// Records every handling; fails each message named `fail-N` its first N
/// times.
#[derive(Default)]
struct Record {
    handled: Mutex<Vec<(String, String)>>,
    redelivered: AtomicUsize,
    lost: AtomicUsize,
}

impl Record {
    fn handle(&self, event: &Event) -> Handled {
        let EventKind::Mqtt { topic } = &event.kind else {
            panic!("{event:?}");
        };
        let text = String::from_utf8_lossy(&event.payload).into_owned();
        let mut handled = self.handled.lock().unwrap();
        let seen = handled.iter().filter(|(_, t)| *t == text).count();
        handled.push((topic.clone(), text.clone()));
        match text
            .strip_prefix("fail-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(times) if seen < times => Handled::Failed,
            _ => Handled::Succeeded,
        }
    }

    fn count(&self, text: &str) -> usize {
        let handled = self.handled.lock().unwrap();
        handled.iter().filter(|(_, t)| t == text).count()
    }
}

struct Shared(Arc<Record>);

impl Sink for Shared {
    fn offer(&self, event: Event) -> Result<Handling, Event> {
        let handled = self.0.handle(&event);
        Ok(Box::pin(async move { handled }))
    }

    fn queue(&self, event: Event) -> Handling {
        let handled = self.0.handle(&event);
        Box::pin(async move { handled })
    }

    fn lost(&self, _event: &Event) {
        self.0.lost.fetch_add(1, Ordering::SeqCst);
    }

    fn redelivered(&self) {
        self.0.redelivered.fetch_add(1, Ordering::SeqCst);
    }
}

async fn eventually(what: &str, test: impl Fn() -> bool) {
    let started = Instant::now();
    while !test() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn source(broker: &str, topic: &str, qos: &str, record: &Arc<Record>) -> (Source, Arc<dyn Sink>) {
    (
        Source::new(Subscription {
            broker: Broker::parse(broker, None, None, None, None).unwrap(),
            filter: Filter::new(topic, qos).unwrap(),
        }),
        Arc::new(Shared(Arc::clone(record))),
    )
}

/// Publishes `message` until the record shows it (the subscription is up).
async fn publish_when_subscribed(
    server: &MosquittoServer,
    topic: &str,
    message: &str,
    record: &Record,
) {
    let started = Instant::now();
    while record.count(message) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never subscribed"
        );
        server.publish(topic, message, 1).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos1_is_acknowledged_after_success_and_a_failure_comes_again() {
    let server = MosquittoServer::start().expect("mosquitto (./scripts/setup.sh)");
    let record = Arc::new(Record::default());
    let sources = luge_trigger::sources(vec![
        source(&server.url(), "sensors/+/temp", "1", &record),
        source(&server.url(), "logs/#", "0", &record),
    ]);
    assert_eq!(sources.len(), 1, "one connection per broker");
    let tasks: Vec<_> = sources.into_iter().map(|s| tokio::spawn(s.run())).collect();
    publish_when_subscribed(&server, "sensors/a/temp", "ready", &record).await;

    server.publish("sensors/b/temp", "fail-1", 1).unwrap();
    eventually("failed once, then handled again", || {
        record.count("fail-1") == 2
    })
    .await;
    assert!(record.redelivered.load(Ordering::SeqCst) >= 1);
    // A message failing every time is given up after MAX_ATTEMPTS.
    server.publish("sensors/c/temp", "fail-99", 1).unwrap();
    eventually("given up", || {
        record.count("fail-99") == luge_trigger::mqtt::MAX_ATTEMPTS as usize
    })
    .await;
    server.publish("logs/x/y", "at most once", 0).unwrap();
    eventually("QoS 0 handled", || record.count("at most once") == 1).await;
    // Not subscribed: never offered.
    server.publish("other", "nobody", 1).unwrap();

    // The broker restarts (its sessions gone with it): the source
    // reconnects and subscribes again.
    let port = server.port;
    drop(server);
    let server = MosquittoServer::on(port).unwrap();
    publish_when_subscribed(&server, "sensors/d/temp", "after the restart", &record).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        record.count("fail-99"),
        luge_trigger::mqtt::MAX_ATTEMPTS as usize
    );
    assert_eq!(record.count("nobody"), 0);
    let topics: Vec<String> = record
        .handled
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| t.clone())
        .collect();
    assert!(topics.contains(&"logs/x/y".to_owned()), "{topics:?}");
    for task in tasks {
        task.abort();
    }
}
