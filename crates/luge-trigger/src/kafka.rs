//! Kafka topics read by a consumer group: a durable queue, at least once,
//! in order per key.
//!
//! N Luge processes with the same trigger join one consumer group and
//! share the topic's partitions. A message's offset is committed only
//! once its function succeeded, or once it was dead-lettered: one whose
//! function failed (an error result, a trap, a limit, admission refused)
//! runs again after a backoff from [`FIRST_RETRY`] doubling to
//! [`MAX_RETRY`], up to `max_attempts` runs in all, then is written to the
//! dead-letter topic (`TOPIC.dead` unless named) with its key and payload
//! and the headers `luge-reason`, `luge-attempts`, `luge-topic`,
//! `luge-partition` and `luge-offset`.
//!
//! Messages of one partition run in parallel, up to [`PREFETCH`] taken at
//! once per trigger (and the trigger's `max_in_flight` running), except
//! that a message with a key waits for the outcome of the key's message
//! before it (its last retry or its dead letter included): a key's order
//! is kept under retries. A partition's committed offset is the lowest
//! offset still unfinished, so a commit never passes a message that has
//! not ended.
//!
//! A process that dies leaves the group when its session times out
//! (`session_timeout_ms`, [`SESSION_TIMEOUT`] by default): its partitions
//! go to the others, which read them from the last committed offset, so
//! what it held is delivered again. A process that loses partitions in a
//! rebalance commits what it finished on them first.
//!
//! Reading is bounded: at most [`PREFETCH`] messages taken and not ended
//! per trigger (the partitions are paused while there is no room, which
//! keeps the group membership alive), librdkafka's own queue at most
//! [`QUEUED_KBYTES`] KiB, one fetch at most [`FETCH_BYTES`], and each
//! message at most `max_message_bytes` ([`MAX_MESSAGE_BYTES`] by default):
//! a larger one is dead-lettered without its payload, with the reason.
//!
//! Every broker the client dials is checked: the one the trigger names
//! was resolved and checked by the host, and for a tenant's trigger (an
//! upload's) every other broker the cluster's metadata advertises must be
//! granted by the function's `allowed_outbound_hosts` (scheme `kafka`) and
//! its address permitted, as the function's own connections are
//! ([`luge_outbound::permits_peer`]), so a hostile broker cannot make
//! Luge dial another address. librdkafka asks before each connection
//! through the hook of the vendored rdkafka (vendor/README.md).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use luge_core::capabilities::AllowedHosts;
use luge_core::event::{Event, EventKind};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};

use crate::{Endpoint, EventSource, Handled, Kind, Sink, Source, SourceError, Triggered};

pub use crate::streams::{FIRST_RETRY, MAX_MESSAGE_BYTES, MAX_RETRY, PREFETCH};

/// A broker's port when the address names none (Kafka's).
pub const PORT: u16 = 9092;

/// The consumer group when the trigger names none.
pub const DEFAULT_GROUP: &str = "luge";

/// How long a process may go silent before the group gives its
/// partitions to the others, when the trigger says nothing: shorter than
/// Kafka's 45 s default, so that a dead process's messages move within
/// seconds, and longer than the broker's least (6 s by default).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest and longest `session_timeout_ms` a trigger may set (a
/// broker refuses one outside its own `group.min.session.timeout.ms` and
/// `group.max.session.timeout.ms`, 6 s and 30 min by default).
pub const SESSION_TIMEOUTS: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(30 * 60);

/// How often finished messages' offsets are committed.
pub const COMMIT_EVERY: Duration = Duration::from_millis(200);

/// The most one fetch from a broker may bring back (librdkafka's
/// `fetch.max.bytes`; a response may be that and its framing): what a
/// hostile broker can make the client hold per connection.
pub const FETCH_BYTES: usize = 8 << 20;

/// What librdkafka keeps fetched ahead of the trigger, at most, in KiB
/// (`queued.max.messages.kbytes`; its default is 64 MiB).
pub const QUEUED_KBYTES: usize = 8 << 10;

/// How long a dead letter may wait for the broker's acknowledgement
/// before it is sent again.
const DEAD_LETTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends of one dead letter, at most, before the message is left
/// unfinished (its offset not committed: it is delivered again after a
/// restart or a rebalance).
const DEAD_LETTER_SENDS: u32 = 10;

/// The longest topic name Kafka takes.
const MAX_TOPIC_BYTES: usize = 249;

/// The longest group name Luge takes (config, not data).
const MAX_GROUP_BYTES: usize = 255;

/// A Kafka bootstrap broker, checked once where it is configured:
/// `kafka://host[:port]` (no credentials: Luge speaks plaintext Kafka
/// without SASL for now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    host: String,
    port: u16,
}

impl Address {
    /// `text`, if it is a `kafka://` address.
    pub fn parse(text: &str) -> Result<Self, SourceError> {
        let refused = || SourceError::KafkaAddress(crate::redis::redacted(text));
        let url = url::Url::parse(text).map_err(|_| refused())?;
        if url.scheme() != "kafka"
            || !url.username().is_empty()
            || url.password().is_some()
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
        Ok(Self {
            host,
            port: url.port().unwrap_or(PORT),
        })
    }

    /// The broker as a grant names it.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            scheme: "kafka",
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// The same address with its host replaced by `ip`.
    pub fn at(&self, ip: IpAddr) -> Self {
        Self {
            host: ip.to_string(),
            ..self.clone()
        }
    }

    /// `host:port`, as librdkafka's `bootstrap.servers` takes it.
    fn bootstrap(&self) -> String {
        match self.host.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => format!("[{ip}]:{}", self.port),
            Err(_) => format!("{}:{}", self.host, self.port),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}", self.bootstrap())
    }
}

/// What a tenant's trigger may dial: the bootstrap broker's checked
/// address, and any broker its function's grants permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    bootstrap: SocketAddr,
    grants: AllowedHosts,
}

impl Guard {
    /// Whether the client may connect to `broker` (`host:port`, as the
    /// cluster named it) at `addr`.
    fn permits(&self, broker: &str, addr: SocketAddr) -> bool {
        if addr == self.bootstrap {
            return true;
        }
        let Some((host, port)) = broker.rsplit_once(':') else {
            return false;
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        port.parse::<u16>().is_ok_and(|port| {
            port == addr.port()
                && luge_outbound::permits_peer(&self.grants, "kafka", host, port, addr.ip())
        })
    }
}

/// One trigger's settings: a topic read as one member of a consumer
/// group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    /// The bootstrap broker.
    pub address: Address,
    /// The topic.
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// Runs of one message, at most, before it is dead-lettered.
    pub max_attempts: u32,
    /// The topic a message goes to after its last failed run.
    pub dead_letter: String,
    /// How long a silent process keeps its partitions.
    pub session_timeout: Duration,
    /// The largest message run; a larger one is dead-lettered.
    pub max_message_bytes: usize,
    /// For a tenant's trigger, what its client may dial; `None` for the
    /// operator's (luge.toml, a Spin app), whose cluster is trusted.
    pub guard: Option<Guard>,
}

/// luge.toml's `kafka = { address, topic, ... }`, and a Spin manifest's
/// `[[trigger.kafka]]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    address: String,
    topic: String,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    dead_letter: Option<String>,
    #[serde(default)]
    session_timeout_ms: Option<u64>,
    #[serde(default)]
    max_message_bytes: Option<usize>,
}

/// `text`, if it is a topic name Kafka takes: 1 to 249 of `a-z A-Z 0-9 . _ -`.
fn topic_name(what: &str, text: &str) -> Result<String, SourceError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if text.is_empty()
        || text.len() > MAX_TOPIC_BYTES
        || text == "."
        || text == ".."
        || !text.chars().all(legal)
    {
        return Err(SourceError::Settings(format!(
            "a {what} is a Kafka topic name: 1 to {MAX_TOPIC_BYTES} of a-z, A-Z, 0-9, '.', '_', '-'"
        )));
    }
    Ok(text.to_owned())
}

impl Topic {
    /// The settings of `table`, checked.
    fn new(table: Table) -> Result<Self, SourceError> {
        let max_attempts = crate::streams::max_attempts(table.max_attempts)?;
        let session_timeout = table
            .session_timeout_ms
            .map_or(SESSION_TIMEOUT, Duration::from_millis);
        if !SESSION_TIMEOUTS.contains(&session_timeout) {
            return Err(SourceError::Settings(
                "session_timeout_ms is 1 s to 30 minutes".to_owned(),
            ));
        }
        let max_message_bytes = table.max_message_bytes.unwrap_or(MAX_MESSAGE_BYTES);
        if !(1..=MAX_MESSAGE_BYTES).contains(&max_message_bytes) {
            return Err(SourceError::Settings(format!(
                "max_message_bytes is 1 to {MAX_MESSAGE_BYTES}"
            )));
        }
        let topic = topic_name("topic", &table.topic)?;
        let dead_letter = topic_name(
            "dead_letter topic",
            &table.dead_letter.unwrap_or_else(|| format!("{topic}.dead")),
        )?;
        if dead_letter == topic {
            return Err(SourceError::Settings(
                "dead_letter is another topic than the one read".to_owned(),
            ));
        }
        let group = table.group.unwrap_or_else(|| DEFAULT_GROUP.to_owned());
        if group.is_empty() || group.len() > MAX_GROUP_BYTES {
            return Err(SourceError::Settings(format!(
                "a group is a name of 1 to {MAX_GROUP_BYTES} bytes"
            )));
        }
        Ok(Self {
            address: Address::parse(&table.address)?,
            topic,
            group,
            max_attempts,
            dead_letter,
            session_timeout,
            max_message_bytes,
            guard: None,
        })
    }

    /// The settings every client of the trigger shares.
    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.address.bootstrap())
            .set("client.id", "luge")
            // Reconnecting as every source does (crate::backoff).
            .set("reconnect.backoff.ms", "100")
            .set("reconnect.backoff.max.ms", "5000")
            .set("socket.connection.setup.timeout.ms", "10000")
            .set("log.connection.close", "false")
            // librdkafka leaves Nagle's algorithm on: a small request
            // behind an unacknowledged one would wait for the broker's
            // delayed ACK.
            .set("socket.nagle.disable", "true")
            .set(
                "receive.message.max.bytes",
                (FETCH_BYTES + (64 << 10)).to_string(),
            )
            .set_log_level(RDKafkaLogLevel::Warning);
        config
    }

    /// The consumer's settings: offsets committed by Luge alone, a new
    /// group reading the topic from its start, fetches bounded.
    fn consumer_config(&self) -> ClientConfig {
        let mut config = self.client_config();
        let session = self.session_timeout.as_millis();
        config
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("session.timeout.ms", session.to_string())
            .set("heartbeat.interval.ms", (session / 3).max(100).to_string())
            .set("fetch.max.bytes", FETCH_BYTES.to_string())
            .set("fetch.message.max.bytes", MAX_MESSAGE_BYTES.to_string())
            .set("queued.max.messages.kbytes", QUEUED_KBYTES.to_string())
            .set("queued.min.messages", "1000");
        config
    }

    /// The dead-letter producer's settings.
    fn producer_config(&self) -> ClientConfig {
        let mut config = self.client_config();
        config
            .set(
                "message.timeout.ms",
                DEAD_LETTER_TIMEOUT.as_millis().to_string(),
            )
            .set(
                "message.max.bytes",
                (MAX_MESSAGE_BYTES + (64 << 10)).to_string(),
            );
        config
    }
}

impl crate::Settings for Topic {
    fn kind(&self) -> &'static dyn Kind {
        &Kafka
    }

    fn endpoint(&self) -> Option<Endpoint> {
        Some(self.address.endpoint())
    }

    fn at(&self, ip: IpAddr, _owner: &str, grants: &AllowedHosts) -> Source {
        let address = self.address.at(ip);
        Source::new(Self {
            guard: Some(Guard {
                bootstrap: SocketAddr::new(ip, address.port),
                grants: grants.clone(),
            }),
            address,
            ..self.clone()
        })
    }
}

/// Kafka topics read by a consumer group (the name of KEDA's scaler for
/// them).
pub struct Kafka;

impl Kind for Kafka {
    // A broker's message: what a `wasmcloud:messaging` handler takes.
    crate::kind::identity!("kafka", Table, events: "messaging");

    fn refused_to_tenants(&self) -> Option<&'static str> {
        // librdkafka starts a thread for each broker the cluster's
        // metadata names, however many: a tenant's cluster could name
        // thousands. The connect hook keeps it from dialing them, not from
        // starting them.
        Some(
            "a Kafka trigger is the operator's (luge.toml or a Spin app): a Kafka client starts a thread for every broker its cluster names, which a tenant's cluster could make thousands",
        )
    }

    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError> {
        Ok(Source::new(Topic::new(crate::table(settings)?)?))
    }

    fn spin_templated(&self) -> &'static [&'static str] {
        &["address", "topic"]
    }

    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
        crate::one_each(triggers, KafkaSource::new)
    }
}

/// Where each partition's messages stand: which are taken and not ended,
/// and what was committed.
#[derive(Default)]
struct Book {
    partitions: HashMap<i32, Track>,
}

/// One partition's messages in this process.
struct Track {
    /// Offsets taken and not yet ended (succeeded or dead-lettered).
    unfinished: BTreeSet<i64>,
    /// The offset after the last one taken.
    next: i64,
    /// The offset last committed (or being committed); `None` before the
    /// first.
    committed: Option<i64>,
}

impl Track {
    /// The offset to commit: the lowest unfinished, else the next.
    fn position(&self) -> i64 {
        self.unfinished.first().copied().unwrap_or(self.next)
    }
}

impl Book {
    fn taken(&mut self, partition: i32, offset: i64) {
        let track = self.partitions.entry(partition).or_insert(Track {
            unfinished: BTreeSet::new(),
            next: offset,
            committed: None,
        });
        track.unfinished.insert(offset);
        track.next = track.next.max(offset.saturating_add(1));
    }

    fn ended(&mut self, partition: i32, offset: i64) {
        if let Some(track) = self.partitions.get_mut(&partition) {
            track.unfinished.remove(&offset);
        }
    }

    /// The positions that moved since they were last committed, marked
    /// committed.
    fn moved(&mut self) -> Vec<(i32, i64)> {
        let mut moved = Vec::new();
        for (partition, track) in &mut self.partitions {
            let position = track.position();
            if track.committed != Some(position) {
                track.committed = Some(position);
                moved.push((*partition, position));
            }
        }
        moved
    }

    /// A commit failed: every position is committed again at the next
    /// tick.
    fn commit_failed(&mut self) {
        for track in self.partitions.values_mut() {
            track.committed = None;
        }
    }

    /// `partitions` were taken away: their positions, to commit now, and
    /// they are forgotten (what is still running on them ends unseen, and
    /// is delivered again to their next owner).
    fn revoked(&mut self, partitions: impl Iterator<Item = i32>) -> Vec<(i32, i64)> {
        partitions
            .filter_map(|p| Some((p, self.partitions.remove(&p)?.position())))
            .collect()
    }
}

/// What librdkafka's clients ask of Luge: whether to dial a broker, and
/// where their logs go.
struct Dialer {
    guard: Option<Guard>,
}

impl ClientContext for Dialer {
    const CHECK_CONNECT: bool = true;

    fn permit_connect(&self, broker: &str, addr: SocketAddr) -> bool {
        let permitted = self.guard.as_ref().is_none_or(|g| g.permits(broker, addr));
        if !permitted {
            tracing::warn!(%broker, %addr, "a Kafka broker not granted (allowed_outbound_hosts) was not dialed");
        }
        permitted
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", %facility, "{message}")
            }
            _ => tracing::debug!(target: "librdkafka", %facility, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "librdkafka", %error, "{reason}");
    }
}

/// The consumer's context: the dialer, and the book its rebalances and
/// commits keep.
struct Context {
    dialer: Dialer,
    topic: String,
    book: Arc<Mutex<Book>>,
    /// Whether the source paused its partitions for want of room: a
    /// partition assigned meanwhile is paused as it arrives.
    paused: AtomicBool,
}

impl ClientContext for Context {
    const CHECK_CONNECT: bool = true;

    fn permit_connect(&self, broker: &str, addr: SocketAddr) -> bool {
        self.dialer.permit_connect(broker, addr)
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.dialer.log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.dialer.error(error, reason);
    }
}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(revoked) = rebalance else {
            return;
        };
        let positions = self
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .revoked(revoked.elements().iter().map(|e| e.partition()));
        if positions.is_empty() {
            return;
        }
        tracing::info!(topic = %self.topic, partitions = positions.len(), "partitions taken away; committing what ended on them");
        if let Err(error) = consumer.commit(&self.list(&positions), CommitMode::Sync) {
            tracing::warn!(topic = %self.topic, %error, "commit before a rebalance failed");
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance
            && self.paused.load(Ordering::Acquire)
            && let Err(error) = consumer.pause(assigned)
        {
            tracing::warn!(topic = %self.topic, %error, "pausing new partitions failed");
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        if let Err(error) = result {
            tracing::debug!(topic = %self.topic, %error, "commit failed; committing again");
            self.book
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .commit_failed();
        }
    }
}

impl Context {
    /// `positions` of the topic's partitions as a partition list.
    fn list(&self, positions: &[(i32, i64)]) -> TopicPartitionList {
        let mut list = TopicPartitionList::with_capacity(positions.len());
        for (partition, offset) in positions {
            // Offsets Luge took from the broker: always valid.
            let _ = list.add_partition_offset(&self.topic, *partition, Offset::Offset(*offset));
        }
        list
    }
}

/// A key's last message taken: its sequence number, and the end of its
/// handling.
type Chain = (u64, tokio::sync::oneshot::Receiver<()>);

/// What the handling tasks of one source share with its reader.
struct Shared {
    topic: Topic,
    sink: Arc<dyn Sink>,
    book: Arc<Mutex<Book>>,
    /// Each key's last message taken: its sequence number and the end of
    /// its handling, which the key's next message waits for.
    chains: Mutex<HashMap<Vec<u8>, Chain>>,
    /// Room for one more taken message ([`PREFETCH`] in all).
    room: Arc<tokio::sync::Semaphore>,
    /// Messages taken so far: the sequence number of the next.
    taken: std::sync::atomic::AtomicU64,
    /// Told when a message ends (room for another).
    freed: tokio::sync::Notify,
    producer: OffThread<FutureProducer<Dialer>>,
}

/// A librdkafka client, dropped on a thread of its own: a consumer's
/// close leaves its group (up to the session timeout while the broker is
/// away) and a producer's flushes, and neither may hold up the runtime's
/// worker that drops a stopped source.
struct OffThread<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> std::ops::Deref for OffThread<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Taken only by `drop`.
        self.0.as_ref().expect("not dropped")
    }
}

impl<T: Send + 'static> Drop for OffThread<T> {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            // Should no thread start, the client is dropped here instead.
            let _ = std::thread::Builder::new()
                .name("luge-kafka-close".to_owned())
                .spawn(move || drop(client));
        }
    }
}

/// One trigger's consumer: a member of its topic's group, handing each
/// message to its trigger.
pub struct KafkaSource {
    topic: Topic,
    sink: Arc<dyn Sink>,
}

impl KafkaSource {
    /// The consumer of `topic`, its messages going to `sink`.
    pub fn new(topic: Topic, sink: Arc<dyn Sink>) -> Self {
        Self { topic, sink }
    }

    /// The consumer and the shared state of its handling, subscribed.
    fn start(&self) -> KafkaResult<(OffThread<StreamConsumer<Context>>, Arc<Shared>)> {
        let book = Arc::new(Mutex::new(Book::default()));
        let context = Context {
            dialer: Dialer {
                guard: self.topic.guard.clone(),
            },
            topic: self.topic.topic.clone(),
            book: Arc::clone(&book),
            paused: AtomicBool::new(false),
        };
        let consumer: StreamConsumer<Context> =
            self.topic.consumer_config().create_with_context(context)?;
        let producer: FutureProducer<Dialer> =
            self.topic.producer_config().create_with_context(Dialer {
                guard: self.topic.guard.clone(),
            })?;
        consumer.subscribe(&[&self.topic.topic])?;
        let shared = Arc::new(Shared {
            topic: self.topic.clone(),
            sink: Arc::clone(&self.sink),
            book,
            chains: Mutex::new(HashMap::new()),
            room: Arc::new(tokio::sync::Semaphore::new(PREFETCH)),
            taken: std::sync::atomic::AtomicU64::new(0),
            freed: tokio::sync::Notify::new(),
            producer: OffThread(Some(producer)),
        });
        Ok((OffThread(Some(consumer)), shared))
    }

    /// Reads and hands on messages for as long as the consumer lives
    /// (librdkafka reconnects to the brokers by itself); ends only if the
    /// consumer could not be made.
    async fn serve(&self) -> KafkaError {
        let (consumer, shared) = match self.start() {
            Ok(started) => started,
            Err(error) => return error,
        };
        let topic = &self.topic;
        tracing::info!(address = %topic.address, topic = %topic.topic, group = %topic.group, "reading");
        let mut commit = tokio::time::interval(COMMIT_EVERY);
        commit.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Messages that arrived with no room (a partition assigned while
        // paused, before its pause took hold): taken first when room frees.
        let mut held: VecDeque<OwnedMessage> = VecDeque::new();
        // Since when the trigger has had no room, if it has none.
        let mut full_since: Option<Instant> = None;
        let context = consumer.context();
        loop {
            while !held.is_empty() {
                let Ok(place) = Arc::clone(&shared.room).try_acquire_owned() else {
                    break;
                };
                if let Some(message) = held.pop_front() {
                    take(&shared, message, place);
                }
            }
            let place = if held.is_empty() {
                Arc::clone(&shared.room).try_acquire_owned().ok()
            } else {
                None
            };
            let Some(place) = place else {
                // No room. Messages wait in librdkafka's bounded queue
                // meanwhile; past PAUSE_AFTER the partitions are paused,
                // so that the consumer is polled again (its group's
                // rebalances served) without taking more.
                let since = *full_since.get_or_insert_with(Instant::now);
                let paused = context.paused.load(Ordering::Acquire);
                if !paused && since.elapsed() >= PAUSE_AFTER {
                    context.paused.store(true, Ordering::Release);
                    pause(&consumer, true);
                }
                tokio::select! {
                    _ = shared.freed.notified() => {}
                    _ = commit.tick() => commit_ended(&consumer, &shared),
                    _ = tokio::time::sleep(PAUSE_AFTER), if !paused => {}
                    received = consumer.recv(), if paused => {
                        if let Some(message) = received_message(topic, received).await {
                            held.push_back(message);
                        }
                    }
                }
                continue;
            };
            full_since = None;
            if context.paused.swap(false, Ordering::AcqRel) {
                pause(&consumer, false);
            }
            tokio::select! {
                received = consumer.recv() => {
                    if let Some(message) = received_message(topic, received).await {
                        take(&shared, message, place);
                    }
                }
                _ = commit.tick() => commit_ended(&consumer, &shared),
            }
        }
    }
}

/// How long a trigger may have no room for another message before its
/// partitions are paused: long enough that a trigger kept busy does not
/// pause (a pause drops what librdkafka fetched ahead), short beside
/// `max.poll.interval.ms` (5 minutes).
const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// Pauses (or resumes) every partition `consumer` is assigned.
fn pause(consumer: &StreamConsumer<Context>, pause: bool) {
    let done = consumer.assignment().and_then(|assignment| {
        if pause {
            consumer.pause(&assignment)
        } else {
            consumer.resume(&assignment)
        }
    });
    if let Err(error) = done {
        tracing::warn!(topic = %consumer.context().topic, %error, pause, "pausing or resuming failed");
    }
}

/// The message `received`, detached; an error is logged and waited on a
/// little (the broker away: librdkafka reconnects).
async fn received_message(
    topic: &Topic,
    received: KafkaResult<rdkafka::message::BorrowedMessage<'_>>,
) -> Option<OwnedMessage> {
    match received {
        Ok(message) => Some(message.detach()),
        Err(error) => {
            tracing::warn!(topic = %topic.topic, %error, "reading");
            tokio::time::sleep(Duration::from_millis(100)).await;
            None
        }
    }
}

/// Commits the positions that moved since the last commit.
fn commit_ended(consumer: &StreamConsumer<Context>, shared: &Shared) {
    let positions = shared
        .book
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .moved();
    if positions.is_empty() {
        return;
    }
    if let Err(error) = consumer.commit(&consumer.context().list(&positions), CommitMode::Async) {
        tracing::debug!(topic = %shared.topic.topic, %error, "commit not sent; again at the next tick");
        shared
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .commit_failed();
    }
}

/// Hands `message` to its trigger in a task of its own, holding `place`
/// among the [`PREFETCH`] until it ended; a keyed message first waits for
/// its key's message before it.
fn take(shared: &Arc<Shared>, message: OwnedMessage, place: tokio::sync::OwnedSemaphorePermit) {
    shared
        .book
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .taken(message.partition(), message.offset());
    let (done, own) = tokio::sync::oneshot::channel();
    let sequence = shared.taken.fetch_add(1, Ordering::Relaxed);
    let before = message.key().and_then(|key| {
        shared
            .chains
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_vec(), (sequence, own))
            .map(|(_, before)| before)
    });
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        if let Some(before) = before {
            // Sent or dropped when the previous message ended.
            let _ = before.await;
        }
        let ended = handle(&shared, &message).await;
        if ended {
            shared
                .book
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .ended(message.partition(), message.offset());
        }
        let _ = done.send(());
        if let Some(key) = message.key() {
            let mut chains = shared.chains.lock().unwrap_or_else(PoisonError::into_inner);
            // Forgotten unless a later message of the key took its place.
            if chains.get(key).is_some_and(|(last, _)| *last == sequence) {
                chains.remove(key);
            }
        }
        drop(place);
        shared.freed.notify_one();
    });
}

/// The event of `message`.
fn event(topic: &str, message: &OwnedMessage, payload: Vec<u8>) -> Event {
    Event {
        kind: EventKind::Message {
            system: "kafka",
            subject: topic.to_owned(),
        },
        payload,
        stored: message
            .timestamp()
            .to_millis()
            .and_then(|ms| u64::try_from(ms).ok())
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
    }
}

/// Runs `message` until it succeeds or has failed `max_attempts` times,
/// then dead-letters it if it never succeeded: whether it ended (false:
/// its dead letter could not be written, and it is left to be delivered
/// again).
async fn handle(shared: &Shared, message: &OwnedMessage) -> bool {
    let topic = &shared.topic;
    let payload = message.payload().unwrap_or_default();
    if payload.len() > topic.max_message_bytes {
        let reason = format!("over {} bytes", topic.max_message_bytes);
        shared.sink.lost(&event(&topic.topic, message, Vec::new()));
        return dead_letter(shared, message, None, &reason, 1).await;
    }
    let mut wait = FIRST_RETRY;
    let mut attempts = 1;
    loop {
        let outcome = shared
            .sink
            .queue(event(&topic.topic, message, payload.to_vec()))
            .await;
        if outcome == Handled::Succeeded {
            return true;
        }
        if attempts >= topic.max_attempts {
            let reason = match outcome {
                Handled::Refused => "refused",
                _ => "failed",
            };
            tracing::warn!(topic = %topic.topic, partition = message.partition(), offset = message.offset(), attempts, "dead-lettered to {}", topic.dead_letter);
            return dead_letter(shared, message, Some(payload), reason, attempts).await;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_RETRY);
        attempts += 1;
        shared.sink.redelivered();
    }
}

/// Writes `message` (with `payload` when it was run) to the dead-letter
/// topic with `reason`, the `attempts` and where it came from, waiting
/// for the broker's acknowledgement: whether it was written.
async fn dead_letter(
    shared: &Shared,
    message: &OwnedMessage,
    payload: Option<&[u8]>,
    reason: &str,
    attempts: u32,
) -> bool {
    let topic = &shared.topic;
    let (attempts, partition, offset) = (
        attempts.to_string(),
        message.partition().to_string(),
        message.offset().to_string(),
    );
    for send in 1..=DEAD_LETTER_SENDS {
        let headers = OwnedHeaders::new_with_capacity(5)
            .insert(Header {
                key: "luge-reason",
                value: Some(reason),
            })
            .insert(Header {
                key: "luge-attempts",
                value: Some(&attempts),
            })
            .insert(Header {
                key: "luge-topic",
                value: Some(&topic.topic),
            })
            .insert(Header {
                key: "luge-partition",
                value: Some(&partition),
            })
            .insert(Header {
                key: "luge-offset",
                value: Some(&offset),
            });
        let mut record = FutureRecord::<[u8], [u8]>::to(&topic.dead_letter).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        match shared.producer.send(record, DEAD_LETTER_TIMEOUT).await {
            Ok(_) => return true,
            Err((error, _)) => {
                tracing::warn!(topic = %topic.dead_letter, %error, send, "dead letter not written");
                tokio::time::sleep(MAX_RETRY).await;
            }
        }
    }
    false
}

impl EventSource for KafkaSource {
    fn describe(&self) -> String {
        format!(
            "kafka {} {} group {}",
            self.topic.address, self.topic.topic, self.topic.group
        )
    }

    fn run(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let topic = self.topic.topic.clone();
            crate::streams::reconnecting(&topic, || self.serve()).await;
        })
    }
}

/// When `time` is, as a Kafka timestamp (for the tests).
#[cfg(test)]
fn millis(time: std::time::SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::configured;

    #[test]
    fn settings_are_checked_with_defaults_said() {
        let source = configured(
            &Kafka,
            r#"address = "kafka://127.0.0.1"
topic = "jobs""#,
        )
        .unwrap();
        let topic = source.settings::<Topic>().unwrap();
        assert_eq!(topic.group, DEFAULT_GROUP);
        assert_eq!(topic.dead_letter, "jobs.dead");
        assert_eq!(topic.max_attempts, crate::streams::DEFAULT_MAX_ATTEMPTS);
        assert_eq!(topic.session_timeout, SESSION_TIMEOUT);
        assert_eq!(topic.guard, None);
        assert_eq!(source.endpoint().unwrap().port, PORT);
        assert_eq!(source.endpoint().unwrap().scheme, "kafka");
        for bad in [
            "topic = \"jobs\"",
            "address = \"kafka://h\"\ntopic = \"\"",
            "address = \"kafka://h\"\ntopic = \"a b\"",
            "address = \"kafka://h\"\ntopic = \"..\"",
            "address = \"kafka://h\"\ntopic = \"j\"\nmax_attempts = 0",
            "address = \"kafka://h\"\ntopic = \"j\"\nsession_timeout_ms = 10",
            "address = \"kafka://h\"\ntopic = \"j\"\nmax_message_bytes = 0",
            "address = \"kafka://h\"\ntopic = \"j\"\nmax_message_bytes = 2000000",
            "address = \"kafka://h\"\ntopic = \"j\"\ndead_letter = \"j\"",
            "address = \"kafka://h\"\ntopic = \"j\"\ngroup = \"\"",
            "address = \"kafka://h\"\ntopic = \"j\"\nstream = \"x\"",
            "address = \"kafka://u:p@h\"\ntopic = \"j\"",
            "address = \"nats://h\"\ntopic = \"j\"",
        ] {
            assert!(configured(&Kafka, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tenants_client_dials_only_its_checked_bootstrap_and_granted_brokers() {
        let source = configured(
            &Kafka,
            "address = \"kafka://broker.test:9092\"\ntopic = \"jobs\"",
        )
        .unwrap();
        let grants = luge_testkit::grants(&["kafka://*.example.com:9093"]);
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        let pinned = source.at(ip, "f", &grants);
        let topic = pinned.settings::<Topic>().unwrap();
        assert_eq!(topic.address.bootstrap(), "203.0.113.7:9092");
        let guard = topic.guard.as_ref().unwrap();
        let addr = |text: &str| text.parse::<SocketAddr>().unwrap();
        // The bootstrap broker, at the address the host checked.
        assert!(guard.permits("203.0.113.7:9092", addr("203.0.113.7:9092")));
        // A granted broker at a public address.
        assert!(guard.permits("b1.example.com:9093", addr("93.184.215.2:9093")));
        // Advertised but not granted, or granted on another port.
        assert!(!guard.permits("evil.test:9092", addr("93.184.215.3:9092")));
        assert!(!guard.permits("b1.example.com:9092", addr("93.184.215.2:9092")));
        // A granted name that resolves to a private or loopback address
        // (a wildcard reaches public addresses only).
        assert!(!guard.permits("b2.example.com:9093", addr("10.0.0.5:9093")));
        assert!(!guard.permits("b2.example.com:9093", addr("127.0.0.1:9093")));
        // A name that does not say its port, or says another.
        assert!(!guard.permits("b1.example.com", addr("93.184.215.2:9093")));
        assert!(!guard.permits("b1.example.com:9093", addr("93.184.215.2:9094")));
    }

    #[test]
    fn a_spin_entry_takes_the_same_keys_with_the_apps_variables_filled_in() {
        let expand = |text: &str| Ok(text.replace("{{ broker }}", "broker.test"));
        let app = toml::Table::new();
        let entry = |text: &str| crate::SpinTrigger {
            keys: toml::from_str(text).unwrap(),
            app: &app,
            expand: &expand,
        };
        let source = Kafka
            .spin_source(entry(
                "address = \"kafka://{{ broker }}:9093\"\ntopic = \"jobs\"\ngroup = \"g\"",
            ))
            .unwrap();
        let topic = source.settings::<Topic>().unwrap();
        assert_eq!(topic.address.to_string(), "kafka://broker.test:9093");
        assert_eq!(topic.group, "g");
        let stream = crate::nats::JetStream
            .spin_source(entry(
                "address = \"nats://{{ broker }}\"\nstream = \"JOBS\"",
            ))
            .unwrap();
        let queue = stream.settings::<crate::nats::Queue>().unwrap();
        assert_eq!(queue.address.endpoint().host, "broker.test");
        let refused = Kafka
            .spin_source(entry(
                "address = \"kafka://h\"\ntopic = \"j\"\nqueue_url = \"x\"",
            ))
            .unwrap_err();
        assert_eq!(refused.at, crate::SpinKey::Entry);
        assert!(refused.message.contains("queue_url"), "{}", refused.message);
    }

    #[test]
    fn a_commit_never_passes_an_unfinished_message() {
        let mut book = Book::default();
        for offset in 10..15 {
            book.taken(0, offset);
        }
        book.taken(1, 3);
        book.ended(0, 11);
        book.ended(0, 12);
        let mut moved = book.moved();
        moved.sort();
        assert_eq!(moved, [(0, 10), (1, 3)]);
        assert!(book.moved().is_empty(), "nothing moved since");
        book.ended(0, 10);
        assert_eq!(book.moved(), [(0, 13)]);
        book.ended(0, 13);
        book.ended(0, 14);
        assert_eq!(book.moved(), [(0, 15)]);
        book.commit_failed();
        let mut again = book.moved();
        again.sort();
        assert_eq!(again, [(0, 15), (1, 3)]);
        assert_eq!(book.revoked([1, 7].into_iter()), [(1, 3)]);
        assert_eq!(book.moved(), []);
    }

    #[test]
    fn an_event_carries_its_topic_and_when_it_was_stored() {
        let at = UNIX_EPOCH + Duration::from_millis(1_733_200_000_123);
        let message = OwnedMessage::new(
            Some(b"x".to_vec()),
            None,
            "jobs".to_owned(),
            rdkafka::Timestamp::CreateTime(millis(at)),
            0,
            7,
            None,
        );
        let event = event("jobs", &message, b"x".to_vec());
        assert_eq!(event.kind.system(), "kafka");
        assert_eq!(event.kind.subject(), "jobs");
        assert_eq!(event.stored, Some(at));
    }
}
