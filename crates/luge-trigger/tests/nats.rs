//! The NATS JetStream source against a real `nats-server -js` on a free
//! loopback port: every message acknowledged once it succeeded, failures
//! delivered again, a poison message dead-lettered after its attempts
//! with the others unaffected, two processes' sources sharing the
//! durable consumer, a stopped one's messages delivered to the others
//! after the AckWait, an oversized message dead-lettered without its
//! payload, and the server's `kill -9` and restart survived with nothing
//! lost.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod queue;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use luge_core::event::EventKind;
use luge_testkit::nats::{NatsClient, NatsServer};
use luge_trigger::nats::{JetStream, JetStreamSource, Queue};
use luge_trigger::{EventSource, Handled, Kind};
use queue::{
    Record, a_stopped_then_two_live, handled_then_acknowledged, numbered, taken_over, until,
};

fn queue(server: &NatsServer, stream: &str, extra: &str) -> Queue {
    queue::settings(&JetStream, &server.url(), stream, extra)
}

fn client(server: &NatsServer) -> NatsClient {
    server.client().unwrap()
}

/// The consumer's messages delivered and unacknowledged, and not yet
/// delivered: (0, 0) once everything was handled.
fn pending(server: &NatsServer, stream: &str, consumer: &str) -> (u64, u64) {
    client(server)
        .consumer_pending(stream, consumer)
        .unwrap_or((u64::MAX, u64::MAX))
}

/// The value of header `name` in a headers block.
fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
}

fn spawn(source: JetStreamSource) -> tokio::task::JoinHandle<()> {
    tokio::spawn(Box::new(source).run())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_is_acknowledged_after_it_succeeded_failures_retried() {
    let server = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    // The stream made first, messages in it before the source starts: a
    // new durable consumer delivers them all.
    client(&server).create_stream("JOBS", &["jobs.>"]).unwrap();
    let stored = client(&server)
        .publish("jobs.early", numbered("m", 100))
        .unwrap();
    assert_eq!(stored, 100);
    // Every third message fails its first run, and succeeds the next.
    let record = Record::every_third_fails_once();
    let task = spawn(JetStreamSource::new(
        queue(&server, "JOBS", ""),
        record.clone(),
    ));
    client(&server)
        .publish("jobs.late", numbered("n", 100))
        .unwrap();
    handled_then_acknowledged(&record, 200, Duration::from_secs(30), async || {
        pending(&server, "JOBS", "luge") == (0, 0)
    })
    .await;
    record.retried_every_third();
    let kinds = record.kinds.lock().unwrap().clone();
    assert!(kinds.iter().all(|kind| matches!(
        kind,
        EventKind::Message { system: "nats", subject } if subject.starts_with("jobs.")
    )));
    assert!(kinds.contains(&EventKind::Message {
        system: "nats",
        subject: "jobs.late".into()
    }));
    assert_eq!(client(&server).stream_messages("JOBS").unwrap(), 200);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_dead_lettered_after_its_attempts_and_the_rest_go_on() {
    let server = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    // The dead letters' own stream.
    client(&server).create_stream("DEAD", &["dead.>"]).unwrap();
    let record = Record::poisoned();
    let settings = "subject = \"orders\"\nconsumer = \"billing\"\nmax_attempts = 3\n\
                    dead_letter = \"dead.orders\"";
    let task = spawn(JetStreamSource::new(
        queue(&server, "ORDERS", settings),
        record.clone(),
    ));
    // The source makes the stream (subject `orders`) when it is missing.
    until("the stream made", Duration::from_secs(10), async || {
        client(&server).stream_messages("ORDERS").is_ok()
            && client(&server)
                .consumer_pending("ORDERS", "billing")
                .is_ok()
    })
    .await;
    let mut payloads = numbered("ok", 10);
    payloads.insert(5, "poison".to_owned());
    assert_eq!(client(&server).publish("orders", &payloads).unwrap(), 11);
    until("dead-lettered", Duration::from_secs(20), async || {
        client(&server).stream_messages("DEAD").unwrap() == 1
    })
    .await;
    let letter = client(&server).stream_message("DEAD", 1).unwrap();
    assert_eq!(letter.subject, "dead.orders");
    assert_eq!(letter.payload, b"poison");
    assert_eq!(header(&letter.headers, "Luge-Reason"), Some("failed"));
    assert_eq!(header(&letter.headers, "Luge-Attempts"), Some("3"));
    assert_eq!(header(&letter.headers, "Luge-Stream"), Some("ORDERS"));
    assert_eq!(header(&letter.headers, "Luge-Subject"), Some("orders"));
    assert_eq!(record.succeeded().len(), 10);
    assert_eq!(record.calls.lock().unwrap()["poison"], 3);
    until("nothing pending", Duration::from_secs(5), async || {
        pending(&server, "ORDERS", "billing") == (0, 0)
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_share_the_consumer_and_a_stopped_ones_messages_go_to_the_others() {
    let server = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    // Leases renewed at half the AckWait: a second, so that a renewal late
    // on a loaded machine does not hand a running message over.
    let settings = "ack_wait_ms = 1000";
    let (live, tasks) = a_stopped_then_two_live(
        |record, _| {
            spawn(JetStreamSource::new(
                queue(&server, "WORK", settings),
                record.clone(),
            ))
        },
        async |early| {
            until("the stream made", Duration::from_secs(10), async || {
                client(&server).consumer_pending("WORK", "luge").is_ok()
            })
            .await;
            client(&server).publish("WORK", early).unwrap();
        },
        Duration::from_secs(10),
    )
    .await;
    client(&server)
        .publish("WORK", numbered("late", 300))
        .unwrap();
    // a's ten, delivered again once its AckWait ran out.
    taken_over(
        &live,
        tasks,
        (310, Some(10), Duration::from_secs(30)),
        async || pending(&server, "WORK", "luge") == (0, 0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_dead_lettered_without_its_payload() {
    let server = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    client(&server)
        .create_stream("DEAD", &["BIG.dead"])
        .unwrap();
    let record = Record::new(|_, _| Handled::Succeeded);
    let source = JetStreamSource::new(queue(&server, "BIG", ""), record.clone())
        .with_max_message_bytes(1024);
    let task = spawn(source);
    until("the stream made", Duration::from_secs(10), async || {
        client(&server).consumer_pending("BIG", "luge").is_ok()
    })
    .await;
    let mut payloads = numbered("small", 6);
    payloads.insert(2, "x".repeat(4096));
    payloads.insert(5, "y".repeat(512 << 10));
    assert_eq!(client(&server).publish("BIG", &payloads).unwrap(), 8);
    until("dead-lettered", Duration::from_secs(20), async || {
        client(&server).stream_messages("DEAD").unwrap() == 2
    })
    .await;
    for sequence in [1, 2] {
        let letter = client(&server).stream_message("DEAD", sequence).unwrap();
        assert_eq!(
            header(&letter.headers, "Luge-Reason"),
            Some("over 1024 bytes")
        );
        assert!(letter.payload.is_empty());
    }
    handled_then_acknowledged(&record, 6, Duration::from_secs(20), async || {
        pending(&server, "BIG", "luge") == (0, 0)
    })
    .await;
    assert_eq!(record.lost.load(Ordering::SeqCst), 2);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_kill_9_and_restart_lose_nothing() {
    let mut server = NatsServer::with_password("luge", "s3cret").expect("nats-server");
    let record = Record::new(|_, _| Handled::Succeeded);
    // What was in flight when the server died, its acknowledgements
    // lost, is delivered again after a second.
    let queue = queue(&server, "JOBS", "ack_wait_ms = 1000");
    let task = spawn(JetStreamSource::new(queue, record.clone()));
    until("the stream made", Duration::from_secs(10), async || {
        client(&server).consumer_pending("JOBS", "luge").is_ok()
    })
    .await;
    client(&server)
        .publish("JOBS", numbered("a", 2000))
        .unwrap();
    until("some handled", Duration::from_secs(20), async || {
        !record.succeeded().is_empty()
    })
    .await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart().unwrap();
    client(&server)
        .publish("JOBS", numbered("b", 2000))
        .unwrap();
    until("all handled", Duration::from_secs(60), async || {
        record.succeeded().iter().collect::<BTreeSet<_>>().len() == 4000
    })
    .await;
    until("all acknowledged", Duration::from_secs(30), async || {
        pending(&server, "JOBS", "luge") == (0, 0)
    })
    .await;
    task.abort();
}

/// A hostile server: it advertises another server in its `INFO`
/// (`connect_urls`), answers the handshake, then ends each connection,
/// so that the client reconnects. The source only ever comes back to the
/// server it was given (the grant names that one): never to the one
/// advertised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_a_server_advertises_are_never_dialled() {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::AtomicUsize;
    let advertised = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = advertised.local_addr().unwrap();
    advertised.set_nonblocking(true).unwrap();
    let hostile = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hostile.local_addr().unwrap().port();
    let handshakes = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&handshakes);
    std::thread::spawn(move || {
        for connection in hostile.incoming() {
            let Ok(mut connection) = connection else {
                return;
            };
            let info = format!(
                "INFO {{\"server_id\":\"x\",\"version\":\"2.9.10\",\"proto\":1,\"headers\":true,\
                 \"max_payload\":1048576,\"jetstream\":true,\"connect_urls\":[\"{other}\"]}}\r\n"
            );
            let _ = connection.write_all(info.as_bytes());
            let mut reader = BufReader::new(connection.try_clone().unwrap());
            let mut line = String::new();
            // CONNECT, then PING: answered, then the connection ends.
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.starts_with("PING") {
                    let _ = connection.write_all(b"PONG\r\n");
                    counted.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                line.clear();
            }
        }
    });
    let source = JetStream
        .configured(
            toml::from_str(&format!(
                "address = \"nats://127.0.0.1:{port}\"\nstream = \"JOBS\""
            ))
            .unwrap(),
        )
        .unwrap();
    let queue = source.settings::<Queue>().unwrap().clone();
    let task = spawn(JetStreamSource::new(
        queue,
        Record::new(|_, _| Handled::Succeeded),
    ));
    until(
        "the source came back",
        Duration::from_secs(20),
        async || handshakes.load(Ordering::SeqCst) >= 3,
    )
    .await;
    assert!(
        advertised.accept().is_err(),
        "the advertised server was dialled"
    );
    task.abort();
}

/// A relay to `server` that drops the client's pull requests (`PUB
/// $JS.API.CONSUMER.MSG.NEXT...` and its payload) while `drop_pulls` is
/// set, passing everything else: a server that leaves a pull unanswered.
async fn dropping_pulls(
    server: &NatsServer,
    drop_pulls: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = server.port;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let drop_pulls = drop_pulls.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                // Whole lines only; a dropped PUB's payload line goes too.
                let (mut buffer, mut chunk, mut skip_next) = (Vec::new(), [0u8; 4096], false);
                while let Ok(n) = client_read.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    let mut out = Vec::new();
                    while let Some(end) = buffer.windows(2).position(|w| w == b"\r\n") {
                        let line: Vec<u8> = buffer.drain(..end + 2).collect();
                        if skip_next {
                            skip_next = false;
                        } else if line.starts_with(b"PUB $JS.API.CONSUMER.MSG.NEXT.")
                            && drop_pulls.load(Ordering::SeqCst)
                        {
                            skip_next = true;
                        } else {
                            out.extend_from_slice(&line);
                        }
                    }
                    if server_write.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A server that leaves pulls unanswered (nats-server 2.9 does, now and
/// then) holds a message only until the pull is asked again, a little past
/// its expiry: the client's own timer (5 s past it) is not waited for,
/// and the connection is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_pull_is_asked_again_soon() {
    let server = NatsServer::start().expect("nats-server (./scripts/setup.sh)");
    client(&server).create_stream("WORK", &["WORK"]).unwrap();
    let drop_pulls = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = dropping_pulls(&server, drop_pulls.clone()).await;
    let record = Record::new(|_, _| Handled::Succeeded);
    let settings = queue::settings(&JetStream, &format!("nats://127.0.0.1:{port}"), "WORK", "");
    let task = spawn(JetStreamSource::new(settings, record.clone()));
    client(&server).publish("WORK", ["first"]).unwrap();
    until("the first handled", Duration::from_secs(10), async || {
        record.succeeded().len() == 1
    })
    .await;
    // The pulls now sent are lost for a while: the one pending expires
    // at the server, and the next ones go unanswered.
    drop_pulls.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop_pulls.store(false, Ordering::SeqCst);
    let published = std::time::Instant::now();
    client(&server).publish("WORK", ["second"]).unwrap();
    until("the second handled", Duration::from_secs(10), async || {
        record.succeeded().len() == 2
    })
    .await;
    // At most one unanswered pull's expiry and grace (1 s) and the next
    // pull, far under the client's own 5.5 s.
    let waited = published.elapsed();
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    task.abort();
}
