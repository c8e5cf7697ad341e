//! NATS JetStream with a durable pull consumer: a durable queue, at least
//! once.
//!
//! Every Luge process with the same trigger pulls from one durable
//! consumer (`consumer`, `luge` unless set) of the `stream`, so N
//! processes split its messages: JetStream hands each message to one
//! pull at a time. A message is acknowledged (`+ACK`) only once its
//! function succeeded; one whose function failed (an error result, a
//! trap, a limit, admission refused) is given back (`-NAK` with a delay
//! from [`FIRST_RETRY`] doubling to [`MAX_RETRY`]) and JetStream delivers
//! it again, to this process or another, up to `max_attempts` deliveries
//! in all; after the last it is published to the `dead_letter` subject
//! (`STREAM.dead` unless named) with the reason and the attempts in its
//! headers, then terminated (`+TERM`).
//!
//! What a process took and had not acknowledged when it died goes back
//! to the consumer once it has been unacknowledged for `ack_wait_ms`
//! ([`ACK_WAIT`] by default; JetStream's AckWait), and another process
//! pulls it, its deliveries counted. While a function runs, its message's
//! lease is renewed (`+WPI`) at half that time, so that a long run is not
//! taken for a dead one.
//!
//! Reads are bounded: at most [`PREFETCH`] messages pulled and not yet
//! acknowledged per trigger, at most [`BATCH`] per pull, each at most
//! [`MAX_MESSAGE_BYTES`]; a larger one is dead-lettered without its
//! payload, with the reason, and the rest go on. The client talks to the
//! server through a relay ([`guard`]) that bounds what the server may
//! send: a line, and a message, which past the bound reaches the client
//! without its body. The server's address is the one checked against the
//! grants: servers a NATS server advertises are ignored.
//!
//! The stream is created when missing (file storage, its subject the
//! trigger's `subject` or else the stream's name), so that a new app's
//! queue works at once; an existing stream is used as it is.

pub use luge_outbound_nats::guard;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures_util::StreamExt;
use luge_core::event::{Event, EventKind};

use crate::redis::CONNECT_TIMEOUT;
// The bounds and the retry schedule are the Redis Streams queue's: one
// behaviour for every durable queue.
use crate::streams::{FIRST_RETRY, MAX_MESSAGE_BYTES, MAX_RETRY, PREFETCH};
use crate::{Endpoint, EventSource, Handled, Kind, Sink, Source, SourceError, Triggered};

/// NATS's well-known client port.
pub const PORT: u16 = 4222;

/// How long a message may go unacknowledged before JetStream delivers it
/// again (to another process of the group), when the trigger says
/// nothing: JetStream's own default AckWait.
pub const ACK_WAIT: Duration = Duration::from_secs(30);

/// The shortest `ack_wait_ms` a trigger may set.
pub const MIN_ACK_WAIT: Duration = Duration::from_millis(200);

/// Messages one pull asks for, at most.
pub const BATCH: usize = 16;

/// What a message's headers may add to its payload before the relay
/// passes it on without its body ([`guard`]): a message with a payload a
/// little over the bound still reaches the source whole, which
/// dead-letters it by the same rule.
const HEADERS_ROOM: usize = 64 << 10;

/// How long a pull waits at the server for messages before it is asked
/// again.
const PULL_EXPIRES: Duration = Duration::from_millis(500);

/// How long past its expiry a pull may go unanswered before it is given
/// up and asked again. The server ends each pull by its expiry (a 408),
/// and a server that answers one with nothing at all (nats-server 2.9
/// was seen to, in runs that published a message every 44 ms) would
/// otherwise leave the client waiting out its own timer, 5 s more. A
/// server silent past [`CONNECT_TIMEOUT`] is a lost connection.
const PULL_GRACE: Duration = Duration::from_millis(500);

/// The longest stream, consumer or subject name (config, not data).
const MAX_NAME_BYTES: usize = 255;

/// A NATS server's address, checked once where it is configured:
/// `nats://[user:password@|token@]host[:port]`. Its credentials are never
/// shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Address {
    host: String,
    port: u16,
    credentials: Credentials,
}

/// How a client proves who it is to the server.
#[derive(Clone, PartialEq, Eq)]
enum Credentials {
    None,
    User { user: String, password: String },
    Token(String),
}

impl Address {
    /// `text`, if it is a `nats://` address.
    pub fn parse(text: &str) -> Result<Self, SourceError> {
        let refused = || SourceError::NatsAddress(crate::redis::redacted(text));
        let url = url::Url::parse(text).map_err(|_| refused())?;
        if url.scheme() != "nats"
            || !matches!(url.path(), "" | "/")
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(refused());
        }
        let host = match url.host().ok_or_else(refused)? {
            url::Host::Ipv6(ip) => ip.to_string(),
            host => host.to_string(),
        };
        let decode = |part: &str| {
            percent_encoding::percent_decode_str(part)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| refused())
        };
        let credentials = match (url.username(), url.password()) {
            ("", None) => Credentials::None,
            (token, None) => Credentials::Token(decode(token)?),
            (user, Some(password)) => Credentials::User {
                user: decode(user)?,
                password: decode(password)?,
            },
        };
        Ok(Self {
            host,
            port: url.port().unwrap_or(PORT),
            credentials,
        })
    }

    /// The server as a grant names it.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            scheme: "nats",
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// The same address with its host replaced by `ip`.
    pub fn at(&self, ip: std::net::IpAddr) -> Self {
        Self {
            host: ip.to_string(),
            ..self.clone()
        }
    }

    /// The client's options: its credentials, bounded waits, and only
    /// this server (a server's advertised peers are not granted).
    fn options(&self) -> async_nats::ConnectOptions {
        let options = match &self.credentials {
            Credentials::None => async_nats::ConnectOptions::new(),
            Credentials::User { user, password } => {
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            Credentials::Token(token) => async_nats::ConnectOptions::with_token(token.clone()),
        };
        options
            .ignore_discovered_servers()
            .connection_timeout(CONNECT_TIMEOUT)
            .request_timeout(Some(CONNECT_TIMEOUT))
            // The source reconnects itself, with backoff, from scratch.
            .max_reconnects(Some(1))
            .name("luge")
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match self.credentials {
            Credentials::None => "",
            Credentials::User { .. } => "***:***@",
            Credentials::Token(_) => "***@",
        };
        match self.host.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => write!(f, "nats://{who}[{ip}]:{}", self.port),
            Err(_) => write!(f, "nats://{who}{}:{}", self.host, self.port),
        }
    }
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// One trigger's settings: a stream on a server, read through a durable
/// consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The server.
    pub address: Address,
    /// The stream.
    pub stream: String,
    /// The consumer's filter subject, and the stream's subject when Luge
    /// creates it; `None`: every subject of the stream.
    pub subject: Option<String>,
    /// The durable consumer every process of the group pulls from.
    pub consumer: String,
    /// Deliveries of one message, at most, before it is dead-lettered.
    pub max_attempts: u32,
    /// The subject a message goes to after its last failed run.
    pub dead_letter: String,
    /// How long a message goes unacknowledged before JetStream delivers
    /// it again.
    pub ack_wait: Duration,
}

/// luge.toml's `nats-jetstream = { address, stream, ... }`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    address: String,
    stream: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    consumer: Option<String>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    dead_letter: Option<String>,
    #[serde(default)]
    ack_wait_ms: Option<u64>,
}

/// A stream's or a consumer's name as JetStream takes it: 1 to
/// [`MAX_NAME_BYTES`] bytes, printable, none of `. * > / \`.
fn name(what: &str, text: &str) -> Result<String, SourceError> {
    let bad = |c: char| c.is_whitespace() || c.is_control() || ".*>/\\".contains(c);
    if text.is_empty() || text.len() > MAX_NAME_BYTES || text.contains(bad) {
        return Err(SourceError::Settings(format!(
            "a {what} is a name of 1 to {MAX_NAME_BYTES} bytes without spaces or . * > / \\"
        )));
    }
    Ok(text.to_owned())
}

/// A subject: dot-separated tokens, none empty, no spaces; wildcards
/// (`*` a token, `>` the last) only where `wildcards`.
fn subject(what: &str, text: &str, wildcards: bool) -> Result<String, SourceError> {
    let tokens: Vec<&str> = text.split('.').collect();
    let last = tokens.len() - 1;
    let fine = !text.is_empty()
        && text.len() <= MAX_NAME_BYTES
        && tokens.iter().enumerate().all(|(i, token)| {
            !token.is_empty()
                && !token.contains(|c: char| c.is_whitespace() || c.is_control())
                && match *token {
                    "*" => wildcards,
                    ">" => wildcards && i == last,
                    token => !token.contains(['*', '>']),
                }
        });
    if !fine {
        let kind = if wildcards {
            "a subject (tokens between dots; `*` a token, `>` the last)"
        } else {
            "a subject without wildcards"
        };
        return Err(SourceError::Settings(format!(
            "{what} {text:?} is not {kind}"
        )));
    }
    Ok(text.to_owned())
}

/// Whether subject `subject` is matched by filter `filter` (NATS's
/// wildcards).
pub fn matches(filter: &str, subject: &str) -> bool {
    let mut filter = filter.split('.');
    let mut subject = subject.split('.');
    loop {
        match (filter.next(), subject.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(f), Some(s)) if f == s => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

impl Queue {
    fn new(table: Table) -> Result<Self, SourceError> {
        let max_attempts = crate::streams::max_attempts(table.max_attempts)?;
        let ack_wait = table.ack_wait_ms.map_or(ACK_WAIT, Duration::from_millis);
        if ack_wait < MIN_ACK_WAIT || ack_wait > Duration::from_secs(24 * 3600) {
            return Err(SourceError::Settings(
                "ack_wait_ms is 200 ms to a day".to_owned(),
            ));
        }
        let stream = name("stream", &table.stream)?;
        let filter = table
            .subject
            .map(|s| subject("subject", &s, true))
            .transpose()?;
        let dead_letter = subject(
            "dead_letter",
            &table
                .dead_letter
                .unwrap_or_else(|| format!("{stream}.dead")),
            false,
        )?;
        if filter.as_ref().is_some_and(|f| matches(f, &dead_letter)) {
            return Err(SourceError::Settings(
                "dead_letter is a subject the trigger does not read".to_owned(),
            ));
        }
        Ok(Self {
            address: Address::parse(&table.address)?,
            consumer: name(
                "consumer",
                table.consumer.as_deref().unwrap_or(DEFAULT_CONSUMER),
            )?,
            stream,
            subject: filter,
            max_attempts,
            dead_letter,
            ack_wait,
        })
    }

    /// The durable consumer's configuration: explicit acks, redelivery
    /// after `ack_wait`, no limit of its own on deliveries (Luge counts
    /// them and dead-letters), at most what every process may hold.
    fn consumer_config(&self) -> pull::Config {
        pull::Config {
            durable_name: Some(self.consumer.clone()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            max_deliver: -1,
            filter_subject: self.subject.clone().unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// The durable consumer's name when the trigger says nothing.
pub const DEFAULT_CONSUMER: &str = "luge";

crate::kind::addressed_settings!(Queue, JetStream);

/// NATS JetStream streams read through a durable pull consumer (the name
/// KEDA's scaler for them has).
pub struct JetStream;

impl Kind for JetStream {
    // A broker's message: what a `wasmcloud:messaging` handler takes.
    crate::kind::identity!("nats-jetstream", Table, events: "messaging");

    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError> {
        Ok(Source::new(Queue::new(crate::table(settings)?)?))
    }

    fn spin_templated(&self) -> &'static [&'static str] {
        &["address", "stream"]
    }

    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
        crate::one_each(triggers, JetStreamSource::new)
    }
}

/// Why a source stopped reading (it reconnects).
#[derive(Debug, thiserror::Error)]
enum Stopped {
    #[error("connecting: {0}")]
    Connect(#[from] async_nats::ConnectError),
    #[error("connecting timed out")]
    ConnectTimeout,
    #[error("resolving or relaying to the server: {0}")]
    Relay(std::io::Error),
    #[error("the stream: {0}")]
    Stream(String),
    #[error("the consumer: {0}")]
    Consumer(String),
    #[error("pulling: {0}")]
    Pull(String),
    #[error("a pull got no answer")]
    PullTimeout,
}

/// What the handling tasks of one source share with its reader.
struct Shared {
    queue: Queue,
    sink: Arc<dyn Sink>,
    /// Room for one more pulled message ([`PREFETCH`] in all).
    room: Arc<tokio::sync::Semaphore>,
    max_message_bytes: usize,
    /// Set when the source stops: its messages still running no longer
    /// renew their leases, so that JetStream gives them to the group's
    /// other processes after the AckWait.
    stopped: std::sync::atomic::AtomicBool,
}

/// Marks its source stopped when dropped (with the source's task).
struct Stopping(Arc<Shared>);

impl Drop for Stopping {
    fn drop(&mut self) {
        self.0
            .stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One trigger's consumer: pulls from its stream's durable consumer and
/// hands each message to its trigger.
pub struct JetStreamSource {
    shared: Arc<Shared>,
}

impl JetStreamSource {
    /// The consumer of `queue`, its messages going to `sink`.
    pub fn new(queue: Queue, sink: Arc<dyn Sink>) -> Self {
        Self::taking(queue, sink, MAX_MESSAGE_BYTES)
    }

    /// The same, taking messages of at most `bytes` (default
    /// [`MAX_MESSAGE_BYTES`]).
    pub fn with_max_message_bytes(self, bytes: usize) -> Self {
        let shared = &self.shared;
        Self::taking(shared.queue.clone(), Arc::clone(&shared.sink), bytes)
    }

    fn taking(queue: Queue, sink: Arc<dyn Sink>, max_message_bytes: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                queue,
                sink,
                room: Arc::new(tokio::sync::Semaphore::new(PREFETCH)),
                max_message_bytes,
                stopped: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Connects, finds (or makes) the stream and the consumer, and pulls
    /// until something fails: why.
    async fn serve(&self) -> Stopped {
        let queue = &self.shared.queue;
        let guard = match self.relay().await {
            Ok(guard) => guard,
            Err(e) => return Stopped::Relay(e),
        };
        let connected = tokio::time::timeout(
            CONNECT_TIMEOUT,
            queue
                .address
                .options()
                .connect(format!("nats://{}", guard.local)),
        )
        .await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return e.into(),
            Err(_) => return Stopped::ConnectTimeout,
        };
        let context = jetstream::new(client);
        let consumer = match self.consumer(&context).await {
            Ok(consumer) => consumer,
            Err(e) => return e,
        };
        tracing::info!(address = %queue.address, stream = %queue.stream, consumer = %queue.consumer, "pulling");
        // When the server last answered a pull (a message, or its end).
        let mut heard = tokio::time::Instant::now();
        loop {
            let free = self.shared.room.available_permits().min(BATCH);
            if free == 0 {
                // Wait for room before pulling more.
                let _ = tokio::time::timeout(PULL_EXPIRES, self.shared.room.acquire()).await;
                continue;
            }
            let batch = consumer
                .batch()
                .max_messages(free)
                .expires(PULL_EXPIRES)
                .messages();
            let mut batch = match batch.await {
                Ok(batch) => batch,
                Err(e) => return Stopped::Pull(e.to_string()),
            };
            // The server answers a pull by its expiry; one unanswered is
            // asked again, and a server silent for long is a lost
            // connection.
            let deadline = tokio::time::Instant::now() + PULL_EXPIRES + PULL_GRACE;
            loop {
                let next = tokio::time::timeout_at(deadline, batch.next()).await;
                match next {
                    Err(_) if heard.elapsed() > PULL_EXPIRES + CONNECT_TIMEOUT => {
                        return Stopped::PullTimeout;
                    }
                    Err(_) => {
                        tracing::debug!(stream = %queue.stream, "a pull went unanswered; pulling again");
                        break;
                    }
                    Ok(None) => {
                        heard = tokio::time::Instant::now();
                        break;
                    }
                    Ok(Some(Err(e))) => return Stopped::Pull(e.to_string()),
                    Ok(Some(Ok(message))) => {
                        heard = tokio::time::Instant::now();
                        self.take(message, &context).await;
                    }
                }
            }
        }
    }

    /// A relay to the server ([`guard`]), its name resolved (a pinned
    /// source's is an address already).
    async fn relay(&self) -> std::io::Result<guard::Guard> {
        let address = &self.shared.queue.address;
        let server = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::lookup_host((address.host.as_str(), address.port)),
        )
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??
        .next()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        let bound = self.shared.max_message_bytes.saturating_add(HEADERS_ROOM);
        guard::relay(server, bound, CONNECT_TIMEOUT).await
    }

    /// The stream's durable consumer, the stream made when missing.
    async fn consumer(
        &self,
        context: &jetstream::Context,
    ) -> Result<jetstream::consumer::Consumer<pull::Config>, Stopped> {
        let queue = &self.shared.queue;
        let subjects = vec![
            queue
                .subject
                .clone()
                .unwrap_or_else(|| queue.stream.clone()),
        ];
        let mut stream = context
            .get_or_create_stream(jetstream::stream::Config {
                name: queue.stream.clone(),
                subjects,
                ..Default::default()
            })
            .await
            .map_err(|e| Stopped::Stream(e.to_string()))?;
        // A dead letter published where the stream reads would come back.
        let info = stream
            .info()
            .await
            .map_err(|e| Stopped::Stream(e.to_string()))?;
        if let Some(filter) = info
            .config
            .subjects
            .iter()
            .find(|filter| matches(filter, &queue.dead_letter))
        {
            return Err(Stopped::Stream(format!(
                "its subject {filter:?} takes the dead_letter subject {:?}: name another",
                queue.dead_letter
            )));
        }
        stream
            .get_or_create_consumer(&queue.consumer, queue.consumer_config())
            .await
            .map_err(|e| Stopped::Consumer(e.to_string()))
    }

    /// Hands `message` to the trigger in a task of its own, which
    /// acknowledges, gives back or dead-letters it.
    async fn take(&self, message: jetstream::Message, context: &jetstream::Context) {
        // The message's place among the PREFETCH, given back when its
        // task ends.
        let Ok(place) = Arc::clone(&self.shared.room).acquire_owned().await else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let context = context.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(&shared, &context, &message).await {
                // Left unacknowledged: JetStream delivers it again after
                // ack_wait.
                tracing::warn!(stream = %shared.queue.stream, subject = %message.subject, error = %e, "message left unacknowledged");
            }
            drop(place);
        });
    }
}

/// The wait before a message that failed `attempts` runs is delivered
/// again.
fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// Runs `message` once, then acknowledges it, gives it back for another
/// run, or (after its last) dead-letters it.
async fn handle(
    shared: &Shared,
    context: &jetstream::Context,
    message: &jetstream::Message,
) -> Result<(), async_nats::Error> {
    let queue = &shared.queue;
    let attempts = message
        .info()
        .map(|info| u32::try_from(info.delivered).unwrap_or(u32::MAX))?
        .max(1);
    if attempts > 1 {
        shared.sink.redelivered();
    }
    let stored = message.info().ok().and_then(|info| {
        let nanos = u64::try_from(info.published.unix_timestamp_nanos()).ok()?;
        std::time::UNIX_EPOCH.checked_add(Duration::from_nanos(nanos))
    });
    let event = |payload: Vec<u8>| Event {
        kind: EventKind::Message {
            system: "nats",
            subject: message.subject.to_string(),
        },
        payload,
        stored,
    };
    let cut = message
        .headers
        .as_ref()
        .is_some_and(|headers| headers.get(guard::OVERSIZED).is_some());
    if cut || message.payload.len() > shared.max_message_bytes {
        let reason = format!("over {} bytes", shared.max_message_bytes);
        dead_letter(queue, context, message, false, &reason, attempts).await?;
        shared.sink.lost(&event(Vec::new()));
        return Ok(());
    }
    // The lease renewed while the function runs (and the source).
    let renew_every = (queue.ack_wait / 2).max(Duration::from_millis(50));
    let run = shared.sink.queue(event(message.payload.to_vec()));
    tokio::pin!(run);
    let mut renewal =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break outcome,
            _ = renewal.tick() => {
                if !shared.stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    message.ack_with(AckKind::Progress).await?;
                }
            }
        }
    };
    if outcome == Handled::Succeeded {
        return message.ack().await;
    }
    if attempts >= queue.max_attempts {
        let reason = match outcome {
            Handled::Refused => "refused",
            _ => "failed",
        };
        tracing::warn!(stream = %queue.stream, subject = %message.subject, attempts, "dead-lettered to {}", queue.dead_letter);
        return dead_letter(queue, context, message, true, reason, attempts).await;
    }
    message
        .ack_with(AckKind::Nak(Some(backoff(attempts))))
        .await
}

/// Publishes `message` (its payload when `with_payload`) to the
/// dead-letter subject with `reason` and the `attempts` in its headers,
/// then terminates it. A stream that stores the subject acknowledges the
/// publication first (deduplicated by the message's stream sequence if it
/// is ever sent twice); with no such stream it is published as a plain
/// NATS message, and said once.
async fn dead_letter(
    queue: &Queue,
    context: &jetstream::Context,
    message: &jetstream::Message,
    with_payload: bool,
    reason: &str,
    attempts: u32,
) -> Result<(), async_nats::Error> {
    let sequence = message.info()?.stream_sequence;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Luge-Reason", reason);
    headers.insert("Luge-Attempts", attempts.to_string().as_str());
    headers.insert("Luge-Stream", queue.stream.as_str());
    headers.insert("Luge-Sequence", sequence.to_string().as_str());
    headers.insert("Luge-Subject", message.subject.as_str());
    headers.insert(
        "Nats-Msg-Id",
        format!("luge-dead-{}-{sequence}", queue.stream).as_str(),
    );
    let payload = if with_payload {
        message.payload.clone()
    } else {
        bytes::Bytes::new()
    };
    let published = context
        .publish_with_headers(queue.dead_letter.clone(), headers.clone(), payload.clone())
        .await?
        .await;
    match published {
        Ok(_) => {}
        Err(e) if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound => {
            tracing::warn!(subject = %queue.dead_letter, "no stream stores the dead-letter subject: the dead letter is published, not kept");
            context
                .client()
                .publish_with_headers(queue.dead_letter.clone(), headers, payload)
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    message.ack_with(AckKind::Term).await
}

impl EventSource for JetStreamSource {
    fn describe(&self) -> String {
        let queue = &self.shared.queue;
        format!(
            "nats-jetstream {} {} consumer {}",
            queue.address, queue.stream, queue.consumer
        )
    }

    fn run(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let _stopping = Stopping(Arc::clone(&self.shared));
            let stream = self.shared.queue.stream.clone();
            crate::streams::reconnecting(&stream, || self.serve()).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::configured;
    use crate::streams::DEFAULT_MAX_ATTEMPTS;
    use crate::{SpinKey, SpinTrigger};
    use luge_core::capabilities::variables::TemplateError;

    #[test]
    fn settings_are_checked_with_defaults_said() {
        let source = configured(
            &JetStream,
            r#"address = "nats://127.0.0.1"
stream = "JOBS""#,
        )
        .unwrap();
        let queue = source.settings::<Queue>().unwrap();
        assert_eq!(queue.consumer, "luge");
        assert_eq!(queue.dead_letter, "JOBS.dead");
        assert_eq!(queue.max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(queue.ack_wait, ACK_WAIT);
        assert_eq!(queue.subject, None);
        let endpoint = source.endpoint().unwrap();
        assert_eq!((endpoint.scheme, endpoint.port), ("nats", 4222));
        for bad in [
            "stream = \"j\"",
            "address = \"nats://h\"\nstream = \"\"",
            "address = \"nats://h\"\nstream = \"a.b\"",
            "address = \"nats://h\"\nstream = \"a b\"",
            "address = \"nats://h\"\nstream = \"j\"\nmax_attempts = 0",
            "address = \"nats://h\"\nstream = \"j\"\nmax_attempts = 101",
            "address = \"nats://h\"\nstream = \"j\"\nack_wait_ms = 5",
            "address = \"nats://h\"\nstream = \"j\"\nsubject = \"a..b\"",
            "address = \"nats://h\"\nstream = \"j\"\nsubject = \"a.>.b\"",
            "address = \"nats://h\"\nstream = \"j\"\ndead_letter = \"d.*\"",
            "address = \"nats://h\"\nstream = \"j\"\nsubject = \"j.>\"\ndead_letter = \"j.dead\"",
            "address = \"nats://h\"\nstream = \"j\"\nconsumer = \"a.b\"",
            "address = \"nats://h\"\nstream = \"j\"\nchannel = \"x\"",
            "address = \"http://h\"\nstream = \"j\"",
            "address = \"nats://h/path\"\nstream = \"j\"",
        ] {
            assert!(configured(&JetStream, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_spin_manifest_writes_the_same_keys_with_variables() {
        let trigger: toml::Table = toml::from_str(
            r#"address = "nats://{{ host }}:4223"
stream = "{{ stream }}"
max_attempts = 2"#,
        )
        .unwrap();
        let expand = |text: &str| -> Result<String, TemplateError> {
            Ok(text
                .replace("{{ host }}", "broker")
                .replace("{{ stream }}", "ORDERS"))
        };
        let app = toml::Table::new();
        let entry = |keys| SpinTrigger {
            keys,
            app: &app,
            expand: &expand,
        };
        let source = JetStream.spin_source(entry(trigger)).unwrap();
        let queue = source.settings::<Queue>().unwrap();
        assert_eq!((queue.stream.as_str(), queue.max_attempts), ("ORDERS", 2));
        assert_eq!(source.endpoint().unwrap().host, "broker");
        // An unknown key names the entry.
        let bad: toml::Table =
            toml::from_str("address = \"nats://h\"\nstream = \"S\"\nqueue = 1").unwrap();
        let refused = JetStream.spin_source(entry(bad)).unwrap_err();
        assert_eq!(refused.at, SpinKey::Entry);
        assert!(refused.message.contains("queue"), "{}", refused.message);
    }

    #[test]
    fn credentials_never_show() {
        for (text, shown) in [
            ("nats://alice:s3cret@h:4223", "nats://***:***@h:4223"),
            ("nats://t0ken@h", "nats://***@h:4222"),
            ("nats://[::1]:5", "nats://[::1]:5"),
        ] {
            let address = Address::parse(text).unwrap();
            assert_eq!(address.to_string(), shown);
            assert_eq!(format!("{address:?}"), shown);
        }
        let Err(refused) = Address::parse("nats://alice:s3cret@h:x") else {
            panic!("parsed")
        };
        assert!(!refused.to_string().contains("s3cret"), "{refused}");
        // Pinned to an address, the credentials kept for the server.
        let at = Address::parse("nats://alice:s3cret@h")
            .unwrap()
            .at("127.0.0.1".parse().unwrap());
        assert_eq!((at.host.as_str(), at.port), ("127.0.0.1", 4222));
        assert!(at.credentials != Credentials::None);
    }

    #[test]
    fn wildcards_match_as_nats_defines() {
        assert!(matches("a.>", "a.b.c"));
        assert!(!matches("a.>", "a"));
        assert!(matches("a.*.c", "a.b.c"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(matches("a", "a"));
        assert!(!matches("a", "b"));
    }

    #[test]
    fn retries_back_off_to_a_bound() {
        assert_eq!(backoff(1), FIRST_RETRY);
        assert_eq!(backoff(2), FIRST_RETRY * 2);
        assert_eq!(backoff(u32::MAX), MAX_RETRY);
    }
}
