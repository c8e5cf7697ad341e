//! Event sources: what wakes a function besides an HTTP request, as
//! Spin's trigger types name them (`redis`, `mqtt`, `cron`), and
//! `redis-streams`.
//!
//! This crate narrows each broker's client to one job: produce
//! [`Event`]s for the triggers that asked for them, and hand each to its
//! trigger's [`Sink`] (the executor's side: admission under the tenant's
//! fair share, a deadline, the bound of events in flight, metrics). Every
//! source is one [`EventSource`], built by [`sources`] from the triggers'
//! [`Source`]s:
//!
//! - [`redis::RedisSource`]: one pub/sub connection per Redis address,
//!   subscribed once to each channel its triggers name, resubscribing with
//!   backoff when the connection is lost. Pub/sub has no redelivery: an
//!   event a trigger has no room for is dropped (and counted by the sink).
//! - [`cron::CronSource`]: one clock per schedule, with seconds. A tick
//!   whose previous run is still going is skipped (and counted), never run
//!   twice at once; ticks missed while Luge was down are not replayed.
//!
//! - [`mqtt::MqttSource`]: one MQTT 3.1.1 connection per broker and
//!   credentials, each topic filter subscribed once at its QoS. A QoS 1
//!   message is acknowledged only once every trigger on it handled it;
//!   one that failed is redelivered by the broker (the source resumes its
//!   session to ask for it), up to [`mqtt::MAX_ATTEMPTS`] times.
//!
//! - [`nats::JetStreamSource`]: one pull of a NATS JetStream stream's
//!   durable consumer per trigger, with the same guarantees: N processes
//!   share the consumer, a stopped one's messages are delivered again
//!   after its AckWait.
//!
//! - [`streams::StreamSource`]: one consumer of a Redis stream's consumer
//!   group per trigger: at least once, acknowledged after success, failures
//!   retried then dead-lettered, a stopped consumer's messages taken over
//!   by the group's others.
//!
//! - [`kafka::KafkaSource`] (the `kafka` feature): one member of a Kafka
//!   topic's consumer group per trigger, with the same guarantees and each
//!   key's order kept; every broker the cluster advertises is checked
//!   before it is dialed.
//!
//! Adding a broker is one module: a [`Kind`] (its name, its
//! settings as luge.toml and a Spin manifest write them, checked into a
//! [`Source`]), an [`EventSource`] that connects, subscribes and offers
//! each message to its sinks, and its row in [`KINDS`]; the hosts, the
//! executor and the engines need nothing new unless its events carry a
//! new kind of metadata ([`luge_core::event::EventKind`]).

#![deny(missing_docs)]

pub mod backoff;
pub mod cron;
#[cfg(feature = "kafka")]
pub mod kafka;
mod kind;
pub mod mqtt;
pub mod nats;
pub mod redis;
pub mod streams;

pub use kind::{
    DEFAULT_MAX_IN_FLIGHT, Endpoint, Expand, Kind, MAX_IN_FLIGHT, SameSettings, Settings, Source,
    SpinError, SpinKey, SpinTrigger, Triggered, one_each, own, table,
};

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use luge_core::event::Event;

/// Every kind of trigger Luge serves: a new kind is its module and its
/// row here.
pub static KINDS: &[&dyn Kind] = &[
    &redis::Redis,
    &streams::Streams,
    &nats::JetStream,
    #[cfg(feature = "kafka")]
    &kafka::Kafka,
    &mqtt::Mqtt,
    &cron::Cron,
];

/// The kind named `name` (Spin's trigger type), if Luge serves it.
pub fn kind(name: &str) -> Option<&'static dyn Kind> {
    KINDS.iter().copied().find(|kind| kind.name() == name)
}

/// A source that could not be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Not a cron expression with seconds.
    #[error(
        "{expression:?} is not a cron expression (six or seven fields, seconds first: \"*/5 * * * * *\"): {reason}"
    )]
    Cron {
        /// The expression.
        expression: String,
        /// What the parser said.
        reason: String,
    },
    /// Not a `redis://` address.
    #[error("{0:?} is not a redis:// address")]
    RedisAddress(String),
    /// Not an `mqtt://` address.
    #[error("{0:?} is not an mqtt://host[:port] address (Luge has no MQTT over TLS yet)")]
    MqttAddress(String),
    /// Not a `nats://` address.
    #[error(
        "{0:?} is not a nats://[user:password@]host[:port] address (Luge has no NATS over TLS yet)"
    )]
    NatsAddress(String),
    /// Not a `kafka://` address.
    #[error("{0:?} is not a kafka://host[:port] address (Luge has no Kafka over TLS or SASL yet)")]
    KafkaAddress(String),
    /// Not an MQTT topic filter.
    #[error("{0:?} is not an MQTT topic filter")]
    Topic(String),
    /// Not an MQTT QoS.
    #[error("QoS {0:?} is not 0, 1 or 2")]
    Qos(String),
    /// An empty channel name, or one too long.
    #[error("a channel is a name of 1 to {max} bytes", max = redis::MAX_CHANNEL_BYTES)]
    Channel,
    /// A bound of events in flight out of its range.
    #[error("1 to {MAX_IN_FLIGHT}")]
    InFlight,
    /// A schedule asked to run ticks at once.
    #[error("a cron trigger runs one tick at a time (a tick due while the last runs is skipped)")]
    CronInFlight,
    /// Settings a kind does not take (an unknown key, a wrong type).
    #[error("{0}")]
    Settings(String),
}

/// What became of an event a sink took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The function ran and succeeded.
    Succeeded,
    /// The function ran and failed (an error result, a trap, a limit).
    Failed,
    /// It was not run: admission refused it, or it could not start.
    Refused,
}

/// The handling of one event, to be awaited (or spawned) by its source.
pub type Handling = Pin<Box<dyn Future<Output = Handled> + Send>>;

/// A trigger, as its source sees it: where its events go.
pub trait Sink: Send + Sync + 'static {
    /// Takes `event` if the trigger has room for one more in flight, and
    /// returns its handling; gives it back when it has none.
    fn offer(&self, event: Event) -> Result<Handling, Event>;

    /// Takes `event` whatever the room: its handling first waits for the
    /// trigger to have room, then runs it. For brokers that bound what is
    /// unacknowledged themselves (MQTT QoS 1: the broker sends no more
    /// than its in-flight window until earlier messages are acknowledged).
    fn queue(&self, event: Event) -> Handling;

    /// Counts `event`, given back by [`Sink::offer`], as lost: a Redis
    /// message dropped, a tick skipped, an MQTT message left
    /// unacknowledged.
    fn lost(&self, event: &Event);

    /// Counts a message its broker sent again.
    fn redelivered(&self);
}

/// A broker connection or a clock, producing events for its triggers
/// until it is dropped.
pub trait EventSource: Send + 'static {
    /// What it listens to, for logs (no secret in it).
    fn describe(&self) -> String;

    /// Runs the source: forever, or until it has no more events (a
    /// schedule with no next tick).
    fn run(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The running sources of `triggers`, each a [`Source`] and the sink its
/// events go to, each kind's made by that kind ([`Kind::sources`]: one
/// Redis connection per address, one MQTT session per broker, one clock
/// per schedule).
pub fn sources(triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
    let mut by_kind: BTreeMap<&'static str, Vec<Triggered>> = BTreeMap::new();
    for (source, sink) in triggers {
        by_kind
            .entry(source.kind_name())
            .or_default()
            .push((source, sink));
    }
    by_kind
        .into_values()
        .flat_map(|triggers| triggers[0].0.kind().sources(triggers))
        .collect()
}

/// Offers `event` to `sink`, spawning its handling on the current runtime,
/// or counts it lost.
pub(crate) fn deliver(sink: &Arc<dyn Sink>, event: Event) {
    match sink.offer(event) {
        Ok(handling) => {
            tokio::spawn(handling);
        }
        Err(event) => sink.lost(&event),
    }
}
