//! Event sources: what wakes a function besides an HTTP request, as
//! Spin's trigger types name them (`redis`, `cron`).
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
//! Adding a broker (MQTT, NATS, Kafka) is one module: its [`Source`]
//! variant, an [`EventSource`] that connects, subscribes and offers each
//! message to its sinks, and its grouping in [`sources`]; the executor
//! and the engines need nothing new unless its events carry a new kind
//! of metadata ([`luge_core::event::EventKind`]).

#![deny(missing_docs)]

pub mod cron;
pub mod mqtt;
pub mod redis;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use luge_core::event::Event;

/// Where a trigger's events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Messages published on a channel of a Redis server.
    Redis {
        /// The server, `redis://[user:password@]host[:port][/db]`.
        address: String,
        /// The channel (a name, not a pattern).
        channel: String,
    },
    /// Ticks of a cron schedule (boxed: a parsed schedule is large).
    Cron(Box<cron::Schedule>),
    /// Messages on an MQTT topic filter.
    Mqtt(Box<mqtt::Subscription>),
}

impl Source {
    /// The trigger type, as Spin's manifest names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Redis { .. } => "redis",
            Self::Cron(_) => "cron",
            Self::Mqtt(_) => "mqtt",
        }
    }
}

impl Source {
    /// The server a broker's source connects to, as a grant names it
    /// (`redis` or `mqtt`, host, port); `None` for a schedule.
    pub fn endpoint(&self) -> Option<(&'static str, String, u16)> {
        match self {
            Self::Redis { address, .. } => {
                let info = ::redis::Client::open(address.as_str()).ok()?;
                match info.get_connection_info().addr() {
                    ::redis::ConnectionAddr::Tcp(host, port) => {
                        Some(("redis", host.clone(), *port))
                    }
                    _ => None,
                }
            }
            Self::Mqtt(subscription) => Some((
                "mqtt",
                subscription.broker.host().to_owned(),
                subscription.broker.port(),
            )),
            Self::Cron(_) => None,
        }
    }

    /// The same source connecting to `ip` instead of its host's name (an
    /// address the caller checked), its MQTT session owned by `owner`.
    pub fn at(&self, ip: std::net::IpAddr, owner: &str) -> Self {
        match self {
            Self::Redis { address, channel } => Self::Redis {
                address: redis::with_host(address, ip),
                channel: channel.clone(),
            },
            Self::Mqtt(subscription) => Self::Mqtt(Box::new(mqtt::Subscription {
                broker: subscription.broker.clone().at(ip).owned_by(owner),
                filter: subscription.filter.clone(),
            })),
            Self::Cron(schedule) => Self::Cron(schedule.clone()),
        }
    }
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
    /// Not an MQTT topic filter.
    #[error("{0:?} is not an MQTT topic filter")]
    Topic(String),
    /// Not an MQTT QoS.
    #[error("QoS {0:?} is not 0, 1 or 2")]
    Qos(String),
    /// An empty channel name, or one too long.
    #[error("a channel is a name of 1 to {max} bytes", max = redis::MAX_CHANNEL_BYTES)]
    Channel,
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

/// The sources for `triggers`, each a [`Source`] and the sink its events
/// go to: one Redis connection per address (one subscription per channel,
/// shared by every trigger on it), one clock per cron trigger.
pub fn sources(triggers: Vec<(Source, Arc<dyn Sink>)>) -> Vec<Box<dyn EventSource>> {
    let mut out: Vec<Box<dyn EventSource>> = Vec::new();
    let mut redis: BTreeMap<String, BTreeMap<String, Vec<Arc<dyn Sink>>>> = BTreeMap::new();
    let mut brokers: BTreeMap<mqtt::Broker, Vec<mqtt::Subscribed>> = BTreeMap::new();
    for (source, sink) in triggers {
        match source {
            Source::Redis { address, channel } => redis
                .entry(address)
                .or_default()
                .entry(channel)
                .or_default()
                .push(sink),
            Source::Cron(schedule) => out.push(Box::new(cron::CronSource::new(*schedule, sink))),
            Source::Mqtt(subscription) => {
                let mqtt::Subscription { broker, filter } = *subscription;
                brokers.entry(broker).or_default().push((filter, sink));
            }
        }
    }
    for (address, channels) in redis {
        out.push(Box::new(redis::RedisSource::new(address, channels)));
    }
    for (broker, subscriptions) in brokers {
        out.push(Box::new(mqtt::MqttSource::new(broker, subscriptions)));
    }
    out
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
