//! Redis Streams with a consumer group: a durable queue, at least once.
//!
//! `XADD` on a stream wakes one trigger of the group (not all: the group's
//! consumers share the stream, so N Luge processes with the same trigger
//! split its messages). A message is acknowledged (`XACK`) only once its
//! function succeeded; one whose function failed (an error result, a trap,
//! a limit, admission refused) is run again after a backoff from
//! [`FIRST_RETRY`] doubling to [`MAX_RETRY`], up to `max_attempts` runs in
//! all, then added to the dead-letter stream (`STREAM:dead` unless named)
//! with its payload, the reason and the attempts, and acknowledged.
//!
//! What a process took and had not acknowledged when it died stays in the
//! group's pending list: another consumer of the group takes it over
//! (`XAUTOCLAIM`) once it has been idle `claim_idle_ms` ([`CLAIM_IDLE`] by
//! default), counting the runs Redis counted; one whose function still
//! runs is not taken, its consumer renewing the lease (`XCLAIM` to
//! itself) at half that time. A process that comes back under the same
//! consumer name reads its own pending messages first.
//!
//! Reads are bounded: at most [`PREFETCH`] messages taken and not yet
//! acknowledged per trigger (each waits for room in its trigger before it
//! runs), at most [`BATCH`] per read, each message at most
//! [`MAX_MESSAGE_BYTES`] (counted off the socket). A larger one is
//! dead-lettered by its id, unread, with the reason, and the rest go on.
//!
//! A message's payload is its `payload` field (what the function gets, as
//! Spin's `inbound-redis` handler takes a pub/sub message); an entry
//! without one is dead-lettered at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use luge_core::event::{Event, EventKind};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

// Reconnecting and connecting as the pub/sub source does.
use crate::redis::{Address, CONNECT_TIMEOUT};
use crate::{
    EventSource, Handled, Kind, Sink, Source, SourceError, SpinError, SpinKey, SpinTrigger,
    Triggered,
};

/// Runs of one message, at most, when its trigger says nothing: the
/// first and four more, as a queue's redrive policy usually allows.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// The most runs a trigger may allow one message.
pub const MAX_ATTEMPTS: u32 = 100;

/// How long a message must sit unacknowledged with a consumer before
/// another consumer of the group takes it over, when the trigger says
/// nothing: long past any function's time limit, so that only a dead
/// consumer's messages move.
pub const CLAIM_IDLE: Duration = Duration::from_secs(30);

/// The shortest `claim_idle_ms` a trigger may set.
pub const MIN_CLAIM_IDLE: Duration = Duration::from_millis(100);

/// The wait before a failed message runs again; doubled at each failure.
pub const FIRST_RETRY: Duration = Duration::from_millis(200);

/// The longest wait before a failed message runs again.
pub const MAX_RETRY: Duration = Duration::from_secs(10);

/// Messages a trigger has taken and not yet acknowledged, at most: what
/// waits in Luge's memory for room in the trigger.
pub const PREFETCH: usize = 32;

/// Messages one read takes, at most.
pub const BATCH: usize = 16;

/// The largest message a trigger takes (Kafka's default
/// `message.max.bytes`): a larger one is dead-lettered unread.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// How long a read blocks for new messages before the source looks for
/// messages to take over.
const BLOCK: Duration = Duration::from_millis(500);

/// `max_attempts` as a durable queue's trigger sets it (1 to
/// [`MAX_ATTEMPTS`]), else [`DEFAULT_MAX_ATTEMPTS`].
pub fn max_attempts(asked: Option<u32>) -> Result<u32, SourceError> {
    let max_attempts = asked.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
        return Err(SourceError::Settings(format!(
            "max_attempts is 1 to {MAX_ATTEMPTS}"
        )));
    }
    Ok(max_attempts)
}

/// Runs `serve` (one connection's life, ending with why it ended) again
/// and again, after [`crate::backoff`]'s waits, each end logged for
/// `stream`: a durable queue's source.
pub async fn reconnecting<E: std::fmt::Display, F: Future<Output = E>>(
    stream: &str,
    mut serve: impl FnMut() -> F,
) {
    let mut backoff = crate::backoff::Backoff::default();
    loop {
        let started = Instant::now();
        let error = serve().await;
        backoff.ended(started.elapsed());
        tracing::warn!(%stream, %error, retry_in = ?backoff.current(), "stream read ended; reconnecting");
        backoff.wait().await;
    }
}

/// The longest stream, group or consumer name (config, not data).
const MAX_NAME_BYTES: usize = 1024;

/// One trigger's settings: a stream on a server, read as one consumer of
/// a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The server.
    pub address: Address,
    /// The stream.
    pub stream: String,
    /// The consumer group (created at the stream's start when missing).
    pub group: String,
    /// This process's name in the group; `None`: the host's name and the
    /// process id.
    pub consumer: Option<String>,
    /// Runs of one message, at most, before it is dead-lettered.
    pub max_attempts: u32,
    /// Where a message goes after its last failed run.
    pub dead_letter: String,
    /// How long a message sits with a consumer before another takes it.
    pub claim_idle: Duration,
}

/// luge.toml's `redis-streams = { address, stream, ... }`, and a Spin
/// manifest's `[[trigger.redis-streams]]` (whose `address` may be the
/// app's).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    address: Option<String>,
    stream: String,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    consumer: Option<String>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    dead_letter: Option<String>,
    #[serde(default)]
    claim_idle_ms: Option<u64>,
}

fn name(what: &str, text: &str) -> Result<String, SourceError> {
    if text.is_empty() || text.len() > MAX_NAME_BYTES {
        return Err(SourceError::Settings(format!(
            "a {what} is a name of 1 to {MAX_NAME_BYTES} bytes"
        )));
    }
    Ok(text.to_owned())
}

impl Queue {
    /// The settings of `table`, its address `address`, checked.
    fn new(address: &str, table: Table) -> Result<Self, SourceError> {
        let max_attempts = max_attempts(table.max_attempts)?;
        let claim_idle = table
            .claim_idle_ms
            .map_or(CLAIM_IDLE, Duration::from_millis);
        if claim_idle < MIN_CLAIM_IDLE || claim_idle > Duration::from_secs(24 * 3600) {
            return Err(SourceError::Settings(
                "claim_idle_ms is 100 ms to a day".to_owned(),
            ));
        }
        let stream = name("stream", &table.stream)?;
        let dead_letter = match table.dead_letter {
            Some(dead) => name("dead_letter stream", &dead)?,
            None => format!("{stream}:dead"),
        };
        if dead_letter == stream {
            return Err(SourceError::Settings(
                "dead_letter is another stream than the one read".to_owned(),
            ));
        }
        Ok(Self {
            address: Address::parse(address)?,
            group: name("group", table.group.as_deref().unwrap_or("luge"))?,
            consumer: table.consumer.map(|c| name("consumer", &c)).transpose()?,
            stream,
            max_attempts,
            dead_letter,
            claim_idle,
        })
    }

    /// `NAME STREAM GROUP`: the head of every command on its group.
    fn on_group(&self, name: &str) -> redis::Cmd {
        let mut command = redis::cmd(name);
        command.arg(&self.stream).arg(&self.group);
        command
    }

    /// Its consumer name: the one set, else the host's name and the
    /// process id (unique among the group's live processes).
    fn consumer(&self) -> String {
        self.consumer.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "luge".to_owned());
            format!("{host}-{}", std::process::id())
        })
    }
}

crate::kind::addressed_settings!(Queue, Streams);

/// Redis Streams read by a consumer group (the name KEDA's scaler for them
/// has).
pub struct Streams;

impl Kind for Streams {
    // Its messages are Redis messages: a Spin `inbound-redis` handler
    // takes them.
    crate::kind::identity!("redis-streams", Table, events: "redis");

    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError> {
        let table: Table = crate::table(settings)?;
        let address = table
            .address
            .clone()
            .ok_or_else(|| SourceError::Settings("missing field `address`".to_owned()))?;
        Ok(Source::new(Queue::new(&address, table)?))
    }

    fn spin_source(&self, trigger: SpinTrigger<'_>) -> Result<Source, SpinError> {
        let mut table: Table = trigger.read()?;
        let address = crate::redis::spin_address(self.name(), table.address.as_deref(), &trigger)?;
        table.stream = trigger.expanded("stream", &table.stream)?;
        Ok(Source::new(
            Queue::new(&address, table).map_err(|e| SpinError::new(SpinKey::Entry, e))?,
        ))
    }

    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
        crate::one_each(triggers, StreamSource::new)
    }
}

/// One message as a read returns it: its id and its fields.
#[derive(Debug)]
struct Entry {
    id: String,
    payload: Option<Vec<u8>>,
}

/// What the handling tasks of one source share with its reader.
struct Shared {
    queue: Queue,
    consumer: String,
    sink: Arc<dyn Sink>,
    /// Messages taken and not yet acknowledged or dead-lettered, by id.
    taken: Mutex<HashSet<String>>,
    /// Room for one more taken message ([`PREFETCH`] in all).
    room: Arc<tokio::sync::Semaphore>,
}

/// One trigger's consumer: reads its stream as one consumer of its group
/// and hands each message to its trigger.
pub struct StreamSource {
    shared: Arc<Shared>,
    max_message_bytes: usize,
}

impl StreamSource {
    /// The consumer of `queue`, its messages going to `sink`.
    pub fn new(queue: Queue, sink: Arc<dyn Sink>) -> Self {
        let consumer = queue.consumer();
        Self {
            shared: Arc::new(Shared {
                queue,
                consumer,
                sink,
                taken: Mutex::new(HashSet::new()),
                room: Arc::new(tokio::sync::Semaphore::new(PREFETCH)),
            }),
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }

    /// The same, taking messages of at most `bytes` (default
    /// [`MAX_MESSAGE_BYTES`]).
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// A connection to the server, its reads counted against a budget
    /// of `bytes`.
    async fn connect(
        &self,
        bytes: usize,
    ) -> redis::RedisResult<(MultiplexedConnection, luge_outbound::Budget)> {
        let client = redis::Client::open(self.shared.queue.address.as_str())?;
        let info = client.get_connection_info();
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err((redis::ErrorKind::InvalidClientConfig, "not a TCP address").into());
        };
        let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
        let (stream, budget) = luge_outbound::Budgeted::new(tcp, bytes);
        // A read blocks up to BLOCK on the server: the client waits that
        // and more (its default gives up after 500 ms).
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(BLOCK + CONNECT_TIMEOUT));
        let (connection, driver) =
            MultiplexedConnection::new_with_config(info.redis_settings(), stream, config).await?;
        tokio::spawn(driver);
        Ok((connection, budget))
    }

    /// What one read may take off the socket: a batch of the largest
    /// messages and their framing.
    fn read_budget(&self) -> usize {
        self.max_message_bytes
            .saturating_mul(BATCH)
            .saturating_add(64 << 10)
    }

    /// Reads and hands on messages until the connection fails: its error.
    async fn serve(&self) -> redis::RedisError {
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let (reader, budget) = self.connect(self.read_budget()).await?;
            // Acknowledgements and dead letters, apart from the blocking
            // reads; what it reads back is a few bytes a command.
            let (writer, _) = self.connect(usize::MAX).await?;
            redis::RedisResult::Ok((reader, budget, writer))
        })
        .await;
        let (mut reader, budget, mut writer) = match connected {
            Ok(Ok(connected)) => connected,
            Ok(Err(e)) => return e,
            Err(_) => return (redis::ErrorKind::Io, "connecting timed out").into(),
        };
        let queue = &self.shared.queue;
        if let Err(e) = create_group(&mut writer, queue).await {
            return e;
        }
        tracing::info!(address = %queue.address, stream = %queue.stream, group = %queue.group, consumer = %self.shared.consumer, "reading");
        // What this consumer was given before and never acknowledged (a
        // restart under the same name, a connection lost mid-read): one at
        // a time, so that an oversized one is found by its id.
        if let Err(e) = self.own_pending(&mut reader, &budget, &mut writer).await {
            return e;
        }
        // Leases are renewed, and stopped consumers' messages looked for,
        // at half the idle time that lets another consumer take a message.
        let renew_every = (queue.claim_idle / 2).min(Duration::from_secs(5));
        let mut renewed_at = Instant::now();
        loop {
            if renewed_at.elapsed() >= renew_every {
                renewed_at = Instant::now();
                if let Err(e) = self.renew(&writer).await {
                    return e;
                }
                if let Err(e) = self.claim(&mut reader, &budget, &writer).await {
                    return e;
                }
            }
            let free = self.shared.room.available_permits().min(BATCH);
            if free == 0 {
                // Wait for room before reading more (a while, then renew).
                let _ = tokio::time::timeout(BLOCK, self.shared.room.acquire()).await;
                continue;
            }
            budget.reset(self.read_budget());
            let read = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(&queue.group)
                .arg(&self.shared.consumer)
                .arg("COUNT")
                .arg(free)
                .arg("BLOCK")
                .arg(BLOCK.as_millis() as u64)
                .arg("STREAMS")
                .arg(&queue.stream)
                .arg(">")
                .query_async::<Value>(&mut reader)
                .await;
            match read {
                Ok(reply) => {
                    for entry in entries(stream_entries(reply)) {
                        self.take(entry, 1, &writer).await;
                    }
                }
                Err(e) if budget.spent() => {
                    tracing::warn!(stream = %queue.stream, limit = self.max_message_bytes, "a message over the bound ended a read; finding it");
                    return e;
                }
                Err(e) => return e,
            }
        }
    }

    /// Reads this consumer's own pending messages one by one (those not
    /// already being handled), dead-lettering one too large to read.
    async fn own_pending(
        &self,
        reader: &mut MultiplexedConnection,
        budget: &luge_outbound::Budget,
        writer: &mut MultiplexedConnection,
    ) -> redis::RedisResult<()> {
        let queue = &self.shared.queue;
        let mut after = "0".to_owned();
        loop {
            budget.reset(self.max_message_bytes.saturating_add(64 << 10));
            let read = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(&queue.group)
                .arg(&self.shared.consumer)
                .arg("COUNT")
                .arg(1)
                .arg("STREAMS")
                .arg(&queue.stream)
                .arg(&after)
                .query_async::<Value>(reader)
                .await;
            let reply = match read {
                Ok(reply) => reply,
                Err(_) if budget.spent() => {
                    // The connection is gone with the oversized message:
                    // its id is the next of ours still pending.
                    let (mut again, _) = self.connect(usize::MAX).await?;
                    if let Some(id) =
                        next_pending(&mut again, queue, &self.shared.consumer, &after).await?
                    {
                        let reason = format!("over {} bytes", self.max_message_bytes);
                        dead_letter(&mut again, queue, &id, None, &reason, 1).await?;
                        self.shared.sink.lost(&event(queue, &id, Vec::new()));
                    }
                    return Err(
                        (redis::ErrorKind::Io, "an oversized message ended the read").into(),
                    );
                }
                Err(e) => return Err(e),
            };
            let Some(entry) = entries(stream_entries(reply)).into_iter().next() else {
                return Ok(());
            };
            after.clone_from(&entry.id);
            if self
                .shared
                .taken
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&entry.id)
            {
                continue;
            }
            let attempts = delivered(writer, queue, &entry.id).await?;
            drop(self.shared.room.acquire().await);
            self.take(entry, attempts, writer).await;
        }
    }

    /// Renews the lease of every message this consumer is handling (its
    /// idle time back to zero, `XCLAIM ... JUSTID` to itself), so that no
    /// other consumer takes over a message whose function still runs.
    async fn renew(&self, writer: &MultiplexedConnection) -> redis::RedisResult<()> {
        let taken: Vec<String> = self
            .shared
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        if taken.is_empty() {
            return Ok(());
        }
        let mut renew = self.shared.queue.on_group("XCLAIM");
        renew
            .arg(&self.shared.consumer)
            .arg(0)
            .arg(&taken)
            .arg("JUSTID");
        renew
            .query_async::<Value>(&mut writer.clone())
            .await
            .map(drop)
    }

    /// Takes over the group's messages idle past `claim_idle` with
    /// consumers that stopped (`XAUTOCLAIM`), up to the room there is.
    async fn claim(
        &self,
        reader: &mut MultiplexedConnection,
        budget: &luge_outbound::Budget,
        writer: &MultiplexedConnection,
    ) -> redis::RedisResult<()> {
        let queue = &self.shared.queue;
        let free = self.shared.room.available_permits().min(BATCH);
        if free == 0 {
            return Ok(());
        }
        budget.reset(self.read_budget());
        let reply: Value = queue
            .on_group("XAUTOCLAIM")
            .arg(&self.shared.consumer)
            .arg(queue.claim_idle.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(free)
            .query_async(reader)
            .await?;
        // [next cursor, entries, deleted ids]
        let Value::Array(parts) = reply else {
            return Ok(());
        };
        let Some(Value::Array(claimed)) = parts.into_iter().nth(1) else {
            return Ok(());
        };
        let mut writer = writer.clone();
        for entry in entries(claimed) {
            let mine = self
                .shared
                .taken
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&entry.id);
            if mine {
                // Being handled here already (its lease just renewed).
                continue;
            }
            let attempts = delivered(&mut writer, queue, &entry.id).await?;
            tracing::info!(stream = %queue.stream, id = %entry.id, attempts, "took over a message a stopped consumer held");
            self.shared.sink.redelivered();
            self.take(entry, attempts, &writer).await;
        }
        Ok(())
    }

    /// Hands `entry` (run `attempts` times so far, this run included) to
    /// the trigger in a task of its own, which acknowledges or
    /// dead-letters it.
    async fn take(&self, entry: Entry, attempts: u32, writer: &MultiplexedConnection) {
        // The message's place among the PREFETCH, given back when its
        // task ends.
        let Ok(place) = Arc::clone(&self.shared.room).acquire_owned().await else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let mut writer = writer.clone();
        let max_message_bytes = self.max_message_bytes;
        shared
            .taken
            .lock()
            .expect("not poisoned")
            .insert(entry.id.clone());
        tokio::spawn(async move {
            let id = entry.id.clone();
            if let Err(e) = handle(&shared, &mut writer, entry, attempts, max_message_bytes).await {
                // Left pending: this consumer reads it again when it
                // reconnects, or another takes it over.
                tracing::warn!(stream = %shared.queue.stream, %id, error = %e, "message left pending");
            }
            shared
                .taken
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            drop(place);
        });
    }
}

/// The event of the message `id` on `queue`'s stream.
fn event(queue: &Queue, id: &str, payload: Vec<u8>) -> Event {
    Event {
        kind: EventKind::Redis {
            channel: queue.stream.clone(),
        },
        payload,
        stored: stored(id),
    }
}

/// When the entry `id` (`MILLISECONDS-SEQUENCE`) was stored, as its id
/// says; `None` for an id that is not one.
fn stored(id: &str) -> Option<std::time::SystemTime> {
    let (millis, _) = id.split_once('-')?;
    std::time::UNIX_EPOCH.checked_add(Duration::from_millis(millis.parse().ok()?))
}

/// Runs `entry` until it succeeds or has failed `max_attempts` times,
/// then acknowledges it (dead-lettered first when it never succeeded).
async fn handle(
    shared: &Shared,
    writer: &mut MultiplexedConnection,
    entry: Entry,
    mut attempts: u32,
    max_message_bytes: usize,
) -> redis::RedisResult<()> {
    let queue = &shared.queue;
    let Some(payload) = entry.payload else {
        let reason = "no payload field";
        dead_letter(writer, queue, &entry.id, None, reason, attempts).await?;
        shared.sink.lost(&event(queue, &entry.id, Vec::new()));
        return Ok(());
    };
    if payload.len() > max_message_bytes {
        let reason = format!("over {max_message_bytes} bytes");
        dead_letter(writer, queue, &entry.id, None, &reason, attempts).await?;
        shared.sink.lost(&event(queue, &entry.id, Vec::new()));
        return Ok(());
    }
    let mut wait = FIRST_RETRY;
    loop {
        let outcome = shared
            .sink
            .queue(event(queue, &entry.id, payload.clone()))
            .await;
        if outcome == Handled::Succeeded {
            return ack(writer, queue, &entry.id).await;
        }
        if attempts >= queue.max_attempts {
            let reason = match outcome {
                Handled::Refused => "refused",
                _ => "failed",
            };
            tracing::warn!(stream = %queue.stream, id = %entry.id, attempts, "dead-lettered to {}", queue.dead_letter);
            return dead_letter(writer, queue, &entry.id, Some(&payload), reason, attempts).await;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_RETRY);
        attempts = attempts.saturating_add(1);
        // Still this consumer's: the wait does not count as idle, so no
        // other consumer takes it over meanwhile.
        queue
            .on_group("XCLAIM")
            .arg(&shared.consumer)
            .arg(0)
            .arg(&entry.id)
            .arg("JUSTID")
            .query_async::<Value>(writer)
            .await?;
        shared.sink.redelivered();
    }
}

/// Creates `queue`'s group at the stream's start (and the stream) unless
/// it exists: a new group reads everything already in the stream.
async fn create_group(writer: &mut MultiplexedConnection, queue: &Queue) -> redis::RedisResult<()> {
    let created = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&queue.stream)
        .arg(&queue.group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async::<Value>(writer)
        .await;
    match created {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => other.map(drop),
    }
}

async fn ack(
    writer: &mut MultiplexedConnection,
    queue: &Queue,
    id: &str,
) -> redis::RedisResult<()> {
    let mut ack = queue.on_group("XACK");
    ack.arg(id).query_async::<Value>(writer).await.map(drop)
}

/// Adds message `id` (with `payload` when it was read) to the dead-letter
/// stream with `reason` and the `attempts`, then acknowledges it: both in
/// one transaction, so it is never in both places nor in neither.
async fn dead_letter(
    writer: &mut MultiplexedConnection,
    queue: &Queue,
    id: &str,
    payload: Option<&[u8]>,
    reason: &str,
    attempts: u32,
) -> redis::RedisResult<()> {
    let mut add = redis::cmd("XADD");
    add.arg(&queue.dead_letter)
        .arg("*")
        .arg("id")
        .arg(id)
        .arg("reason")
        .arg(reason)
        .arg("attempts")
        .arg(attempts);
    if let Some(payload) = payload {
        add.arg("payload").arg(payload);
    }
    let mut ack = queue.on_group("XACK");
    ack.arg(id);
    redis::pipe()
        .atomic()
        .add_command(add)
        .add_command(ack)
        .query_async::<Value>(writer)
        .await
        .map(drop)
}

/// How many times the group delivered message `id` (1 if Redis does not
/// say).
async fn delivered(
    writer: &mut MultiplexedConnection,
    queue: &Queue,
    id: &str,
) -> redis::RedisResult<u32> {
    let reply: Value = queue
        .on_group("XPENDING")
        .arg(id)
        .arg(id)
        .arg(1)
        .query_async(writer)
        .await?;
    // [[id, consumer, idle ms, times delivered]]
    let count = match reply {
        Value::Array(rows) => match rows.into_iter().next() {
            Some(Value::Array(row)) => match row.get(3) {
                Some(Value::Int(n)) => u32::try_from(*n).unwrap_or(u32::MAX),
                _ => 1,
            },
            _ => 1,
        },
        _ => 1,
    };
    Ok(count.max(1))
}

/// The first message pending with `consumer` after `after`.
async fn next_pending(
    connection: &mut MultiplexedConnection,
    queue: &Queue,
    consumer: &str,
    after: &str,
) -> redis::RedisResult<Option<String>> {
    let start = if after == "0" {
        "-".to_owned()
    } else {
        format!("({after}")
    };
    let reply: Value = queue
        .on_group("XPENDING")
        .arg(start)
        .arg("+")
        .arg(1)
        .arg(consumer)
        .query_async(connection)
        .await?;
    Ok(match reply {
        Value::Array(rows) => rows.into_iter().next().and_then(|row| match row {
            Value::Array(row) => row.into_iter().next().and_then(text),
            _ => None,
        }),
        _ => None,
    })
}

/// The entries of an `XREADGROUP` reply for its one stream.
fn stream_entries(reply: Value) -> Vec<Value> {
    // RESP2: [[stream, [entries]]]; RESP3: {stream: [entries]}.
    match reply {
        Value::Array(streams) => streams
            .into_iter()
            .next()
            .and_then(|stream| match stream {
                Value::Array(mut pair) if pair.len() == 2 => match pair.pop() {
                    Some(Value::Array(entries)) => Some(entries),
                    _ => None,
                },
                _ => None,
            })
            .unwrap_or_default(),
        Value::Map(streams) => streams
            .into_iter()
            .next()
            .and_then(|(_, entries)| match entries {
                Value::Array(entries) => Some(entries),
                _ => None,
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Each `[id, [field, value, ...]]` of `values` as an [`Entry`] (an entry
/// deleted since it was delivered has no fields, hence no payload).
fn entries(values: Vec<Value>) -> Vec<Entry> {
    values
        .into_iter()
        .filter_map(|value| {
            let Value::Array(mut parts) = value else {
                return None;
            };
            let fields = (parts.len() == 2).then(|| parts.pop()).flatten();
            let id = text(parts.into_iter().next()?)?;
            let mut payload = None;
            if let Some(Value::Array(fields)) = fields {
                let mut fields = fields.into_iter();
                while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                    if text(name).as_deref() == Some("payload") {
                        payload = bytes(value);
                    }
                }
            }
            Some(Entry { id, payload })
        })
        .collect()
}

fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        _ => None,
    }
}

fn text(value: Value) -> Option<String> {
    bytes(value).and_then(|b| String::from_utf8(b).ok())
}

impl EventSource for StreamSource {
    fn describe(&self) -> String {
        let queue = &self.shared.queue;
        format!(
            "redis-streams {} {} group {}",
            queue.address, queue.stream, queue.group
        )
    }

    fn run(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let stream = self.shared.queue.stream.clone();
            reconnecting(&stream, || self.serve()).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::configured;

    #[test]
    fn settings_are_checked_with_defaults_said() {
        let source = configured(
            &Streams,
            r#"address = "redis://127.0.0.1:6379"
stream = "jobs""#,
        )
        .unwrap();
        let queue = source.settings::<Queue>().unwrap();
        assert_eq!(queue.group, "luge");
        assert_eq!(queue.dead_letter, "jobs:dead");
        assert_eq!(queue.max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(queue.claim_idle, CLAIM_IDLE);
        assert_eq!(source.endpoint().unwrap().port, 6379);
        for bad in [
            "stream = \"jobs\"",
            "address = \"redis://h\"\nstream = \"\"",
            "address = \"redis://h\"\nstream = \"j\"\nmax_attempts = 0",
            "address = \"redis://h\"\nstream = \"j\"\nmax_attempts = 101",
            "address = \"redis://h\"\nstream = \"j\"\nclaim_idle_ms = 5",
            "address = \"redis://h\"\nstream = \"j\"\ndead_letter = \"j\"",
            "address = \"redis://h\"\nstream = \"j\"\nchannel = \"x\"",
            "address = \"http://h\"\nstream = \"j\"",
        ] {
            assert!(configured(&Streams, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn replies_are_read_as_entries() {
        let entry = |id: &str, fields: Vec<&str>| {
            Value::Array(vec![
                Value::BulkString(id.into()),
                Value::Array(
                    fields
                        .into_iter()
                        .map(|f| Value::BulkString(f.into()))
                        .collect(),
                ),
            ])
        };
        let reply = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"jobs".to_vec()),
            Value::Array(vec![
                entry("1-0", vec!["payload", "a", "x", "y"]),
                entry("2-0", vec!["other", "b"]),
            ]),
        ])]);
        let read = entries(stream_entries(reply));
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].id, "1-0");
        assert_eq!(read[0].payload.as_deref(), Some(&b"a"[..]));
        assert_eq!(read[1].payload, None);
        assert!(entries(stream_entries(Value::Nil)).is_empty());
    }

    #[test]
    fn an_entry_id_says_when_it_was_stored() {
        let at = stored("1733200000123-7").unwrap();
        assert_eq!(
            at.duration_since(std::time::UNIX_EPOCH).unwrap(),
            Duration::from_millis(1_733_200_000_123)
        );
        assert_eq!(stored("nonsense"), None);
        assert_eq!(stored("18446744073709551616-0"), None);
    }
}
