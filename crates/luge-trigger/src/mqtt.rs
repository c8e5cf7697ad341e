//! MQTT, as spin-trigger-mqtt takes it: a broker's `address` (with
//! `username`, `password` and `keep_alive_interval`), and per trigger a
//! `topic` (a filter: `+` and `#` wildcards) and a `qos`.
//!
//! One MQTT 5 connection per broker and credentials carries every filter
//! its triggers name, each subscribed once (at the highest QoS any trigger
//! on it asks). The session is persistent (no clean start, and kept
//! [`SESSION_EXPIRY`] after a disconnect) under a client id stable across
//! restarts ([`Broker::client_id`]), so the broker keeps what was sent and
//! not acknowledged while Luge was down, and sends it again when Luge is
//! back:
//!
//! - QoS 0: each trigger on the topic is offered the message; one with no
//!   room loses it (dropped, counted).
//! - QoS 1 (and 2): the message waits for room in each trigger (the
//!   broker bounds how many unacknowledged messages it sends at once, and
//!   this source at most [`MAX_UNACKED`]), and is acknowledged only when
//!   every trigger on it succeeded. One that failed is not acknowledged:
//!   the source resumes its session (reconnects) after
//!   [`REDELIVERY_DELAY`] so that the broker sends it again, up to
//!   [`MAX_ATTEMPTS`] failures; then it is acknowledged and logged, so a
//!   message that always fails cannot hold the connection forever.
//!
//! A lost connection is resumed with exponential backoff (the broker's
//! restart, a network failure), reset only once a connection has stayed up
//! [`crate::backoff::HEALTHY_AFTER`]; what the broker kept for the session arrives then.
//!
//! Every packet is bounded by [`MAX_PACKET_BYTES`], and the broker is told
//! so when Luge connects (MQTT 5's maximum packet size, why the trigger
//! speaks MQTT 5): a larger message is not sent to Luge at all, the broker
//! dropping it as MQTT 5 has it, so one oversized message can never stall
//! the session by being sent again at every reconnect. One that arrives
//! all the same (a broker that ignores the property) is acknowledged,
//! dropped, counted as lost and logged.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use luge_core::event::{Event, EventKind};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish};
use rumqttc::v5::{AsyncClient, Event as MqttEvent, MqttOptions};

use crate::{
    Endpoint, EventSource, Handled, Kind, Settings, Sink, Source, SourceError, SpinError, SpinKey,
    SpinTrigger, Triggered,
};

/// The largest packet accepted from a broker (and sent to it), told to the
/// broker when Luge connects: a message past it is not sent to Luge.
pub const MAX_PACKET_BYTES: u32 = 1 << 20;

/// How long the broker keeps the session after the connection ends (MQTT
/// 5's session expiry; 3.1.1's persistent session kept it forever): a
/// day, for restarts and outages, after which a config no longer served
/// stops costing the broker.
pub const SESSION_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// QoS 1 messages taken and not yet acknowledged, at most, per
/// connection; past it a message is left to the broker to send again.
pub const MAX_UNACKED: usize = 1024;

/// Failures of one message before it is acknowledged all the same.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long after a failed QoS 1 message the session is resumed for the
/// broker to send it again.
pub const REDELIVERY_DELAY: Duration = Duration::from_secs(1);

/// The keep-alive when the config sets none (spin-trigger-mqtt's
/// template uses 30 s).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// The most messages whose failures are remembered (for
/// [`MAX_ATTEMPTS`]); past it the count starts again.
const REMEMBERED_FAILURES: usize = 4096;

/// A broker and how Luge connects to it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Broker {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    keep_alive: Duration,
    client_id: Option<String>,
    /// Whose session this is (an uploaded function's name), mixed into
    /// the derived client id.
    owner: Option<String>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("keep_alive", &self.keep_alive)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// `mqtt://[user[:password]@]host[:port]` (port 1883 by default),
    /// with `username` and `password` given apart (they win over the
    /// address's), a keep-alive (whole seconds, at least 5) and a client
    /// id (`None`: [`Broker::client_id`] derives one).
    pub fn parse(
        address: &str,
        username: Option<&str>,
        password: Option<&str>,
        keep_alive: Option<Duration>,
        client_id: Option<&str>,
    ) -> Result<Self, SourceError> {
        let bad = || SourceError::MqttAddress(crate::redis::redacted(address));
        let rest = address.strip_prefix("mqtt://").ok_or_else(bad)?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (userinfo, authority) = match rest.rsplit_once('@') {
            Some((userinfo, authority)) => (Some(userinfo), authority),
            None => (None, rest),
        };
        let (user, pass) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
            Some((user, pass)) => (Some(user), (!pass.is_empty()).then_some(pass)),
            None => (None, None),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                (host, port.parse::<u16>().map_err(|_| bad())?)
            }
            _ => (authority, 1883),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.contains(['/', '?', '#', ' ']) || port == 0 {
            return Err(bad());
        }
        let keep_alive = keep_alive
            .unwrap_or(DEFAULT_KEEP_ALIVE)
            .max(Duration::from_secs(5));
        if client_id.is_some_and(|id| id.is_empty() || id.len() > 128) {
            return Err(bad());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
            username: username.or(user).map(str::to_owned),
            password: password.or(pass).map(str::to_owned),
            keep_alive,
            client_id: client_id.map(str::to_owned),
            owner: None,
        })
    }

    /// The broker's host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The broker's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The same broker at `ip` (an address the caller checked).
    pub fn at(mut self, ip: std::net::IpAddr) -> Self {
        self.host = ip.to_string();
        self
    }

    /// The same broker, its derived client id also telling `owner`'s
    /// session apart from others on the same filters.
    pub fn owned_by(mut self, owner: &str) -> Self {
        self.owner = Some(owner.to_owned());
        self
    }

    /// The client id: the one configured, else `luge-` and a hash of the
    /// broker, the user and `filters`: the same across restarts of the
    /// same config, so the broker resumes its session.
    pub fn client_id(&self, filters: &[&Filter]) -> String {
        if let Some(id) = &self.client_id {
            return id.clone();
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.host.as_bytes());
        hasher.update(&self.port.to_le_bytes());
        hasher.update(self.username.as_deref().unwrap_or("").as_bytes());
        hasher.update(&[0]);
        hasher.update(self.owner.as_deref().unwrap_or("").as_bytes());
        let mut topics: Vec<&str> = filters.iter().map(|f| f.topic.as_str()).collect();
        topics.sort_unstable();
        for topic in topics {
            hasher.update(&[0]);
            hasher.update(topic.as_bytes());
        }
        let hash = hasher.finalize().to_hex();
        format!("luge-{}", &hash[..16])
    }
}

/// A topic filter and the QoS it is subscribed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    topic: String,
    qos: QoS,
}

impl Filter {
    /// `topic` (a filter, wildcards allowed) at `qos` (`0`, `1` or `2`).
    pub fn new(topic: &str, qos: &str) -> Result<Self, SourceError> {
        if topic.is_empty() || topic.len() > 1024 || !rumqttc::v5::mqttbytes::valid_filter(topic) {
            return Err(SourceError::Topic(topic.to_owned()));
        }
        let qos = match qos.trim() {
            "0" => QoS::AtMostOnce,
            "1" => QoS::AtLeastOnce,
            "2" => QoS::ExactlyOnce,
            other => return Err(SourceError::Qos(other.to_owned())),
        };
        Ok(Self {
            topic: topic.to_owned(),
            qos,
        })
    }

    /// The filter.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// One trigger's subscription: a broker and a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The broker.
    pub broker: Broker,
    /// The filter.
    pub filter: Filter,
}

impl Settings for Subscription {
    fn kind(&self) -> &'static dyn Kind {
        &Mqtt
    }

    fn endpoint(&self) -> Option<Endpoint> {
        Some(Endpoint {
            scheme: "mqtt",
            host: self.broker.host().to_owned(),
            port: self.broker.port(),
        })
    }

    fn at(
        &self,
        ip: std::net::IpAddr,
        owner: &str,
        _grants: &luge_core::capabilities::AllowedHosts,
    ) -> Source {
        Source::new(Self {
            broker: self.broker.clone().at(ip).owned_by(owner),
            filter: self.filter.clone(),
        })
    }
}

/// luge.toml's `mqtt = { ... }`: spin-trigger-mqtt's keys, and a client
/// id.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    address: String,
    topic: String,
    #[serde(default)]
    qos: Option<u8>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    keep_alive_interval: Option<u64>,
    #[serde(default)]
    client_id: Option<String>,
}

/// A Spin manifest's `[[trigger.mqtt]]` (its `component` and `id`
/// aside): the topic filter and its QoS (`"0"`, `"1"`, `"2"`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpinEntry {
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    qos: Option<String>,
}

/// MQTT 3.1.1 subscriptions: spin-trigger-mqtt's `mqtt` trigger.
pub struct Mqtt;

impl Kind for Mqtt {
    crate::kind::identity!("mqtt", Table);

    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError> {
        let table: Table = crate::table(settings)?;
        let broker = Broker::parse(
            &table.address,
            table.username.as_deref(),
            table.password.as_deref(),
            table.keep_alive_interval.map(Duration::from_secs),
            table.client_id.as_deref(),
        )?;
        let filter = Filter::new(&table.topic, &table.qos.unwrap_or(1).to_string())?;
        Ok(Source::new(Subscription { broker, filter }))
    }

    /// spin-trigger-mqtt's settings (`[application.trigger.mqtt]`'s
    /// `address`, `username`, `password` and `keep_alive_interval`, every
    /// value a string, templates of app variables allowed) and the
    /// trigger's topic and QoS.
    fn spin_source(&self, trigger: SpinTrigger<'_>) -> Result<Source, SpinError> {
        let entry: SpinEntry = trigger.read()?;
        let setting = |key| trigger.app_setting(key);
        let address = setting("address")?.ok_or_else(|| {
            SpinError::new(
                SpinKey::App("address"),
                "an MQTT trigger needs the broker's address",
            )
        })?;
        let keep_alive = match setting("keep_alive_interval")? {
            Some(seconds) => Some(Duration::from_secs(seconds.trim().parse().map_err(
                |_| SpinError::new(SpinKey::App("keep_alive_interval"), "whole seconds"),
            )?)),
            None => None,
        };
        let topic = entry
            .topic
            .ok_or_else(|| SpinError::new(SpinKey::Entry, "an MQTT trigger names its topic"))?;
        let topic = trigger.expanded("topic", &topic)?;
        let (username, password) = (setting("username")?, setting("password")?);
        let refused = |e: SourceError| SpinError::new(SpinKey::Entry, e);
        let broker = Broker::parse(
            &address,
            username.as_deref().filter(|u| !u.is_empty()),
            password.as_deref().filter(|p| !p.is_empty()),
            keep_alive,
            None,
        )
        .map_err(refused)?;
        let filter = Filter::new(&topic, entry.qos.as_deref().unwrap_or("1")).map_err(refused)?;
        Ok(Source::new(Subscription { broker, filter }))
    }

    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
        let mut brokers: BTreeMap<Broker, Vec<Subscribed>> = BTreeMap::new();
        for (subscription, sink) in crate::own::<Subscription>(triggers) {
            brokers
                .entry(subscription.broker)
                .or_default()
                .push((subscription.filter, sink));
        }
        brokers
            .into_iter()
            .map(|(broker, subscriptions)| {
                Box::new(MqttSource::new(broker, subscriptions)) as Box<dyn EventSource>
            })
            .collect()
    }
}

/// A filter and the trigger its messages go to.
pub type Subscribed = (Filter, Arc<dyn Sink>);

/// One broker's subscriptions.
pub struct MqttSource {
    broker: Broker,
    subscriptions: Vec<Subscribed>,
}

impl MqttSource {
    /// The subscriptions of `broker`'s triggers.
    pub fn new(broker: Broker, subscriptions: Vec<Subscribed>) -> Self {
        Self {
            broker,
            subscriptions,
        }
    }

    /// Each filter once, at the highest QoS a trigger on it asks.
    fn filters(&self) -> Vec<(String, QoS)> {
        let mut filters: Vec<(String, QoS)> = Vec::new();
        for (filter, _) in &self.subscriptions {
            match filters.iter_mut().find(|(topic, _)| *topic == filter.topic) {
                Some((_, qos)) if (*qos as u8) < (filter.qos as u8) => *qos = filter.qos,
                Some(_) => {}
                None => filters.push((filter.topic.clone(), filter.qos)),
            }
        }
        filters
    }

    fn options(&self) -> MqttOptions {
        let filters: Vec<&Filter> = self.subscriptions.iter().map(|(f, _)| f).collect();
        let mut options = MqttOptions::new(
            self.broker.client_id(&filters),
            self.broker.host.clone(),
            self.broker.port,
        );
        options
            .set_keep_alive(self.broker.keep_alive)
            .set_clean_start(false)
            .set_session_expiry_interval(Some(SESSION_EXPIRY.as_secs() as u32))
            .set_manual_acks(true)
            .set_max_packet_size(Some(MAX_PACKET_BYTES));
        if let Some(username) = &self.broker.username {
            options.set_credentials(
                username.clone(),
                self.broker.password.clone().unwrap_or_default(),
            );
        }
        options
    }
}

/// What the tasks of one source share.
struct Shared {
    /// QoS 1 messages taken and not yet acknowledged.
    unacked: AtomicUsize,
    /// Failures by message (a hash of its topic and payload).
    failures: Mutex<HashMap<[u8; 32], u32>>,
    /// Raised when a failed message should be sent again.
    resume: tokio::sync::Notify,
}

impl Shared {
    /// Counts a failure of `publish`: whether it may be tried again.
    fn may_retry(&self, publish: &Publish) -> bool {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&publish.topic);
        hasher.update(&[0]);
        hasher.update(&publish.payload);
        let key = *hasher.finalize().as_bytes();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= REMEMBERED_FAILURES {
            failures.clear();
        }
        let count = failures.entry(key).or_insert(0);
        *count += 1;
        if *count >= MAX_ATTEMPTS {
            failures.remove(&key);
            false
        } else {
            true
        }
    }
}

impl MqttSource {
    /// Hands `publish` to the triggers whose filter matches its topic.
    fn dispatch(&self, publish: Publish, client: &AsyncClient, shared: &Arc<Shared>) {
        // Topics are UTF-8 in MQTT; a broker that sends another is not
        // followed (the message is acknowledged and dropped below).
        let topic = String::from_utf8_lossy(&publish.topic).into_owned();
        let sinks: Vec<Arc<dyn Sink>> = self
            .subscriptions
            .iter()
            .filter(|(filter, _)| rumqttc::v5::mqttbytes::matches(&topic, &filter.topic))
            .map(|(_, sink)| Arc::clone(sink))
            .collect();
        let event = Event {
            kind: EventKind::Mqtt {
                topic: topic.clone(),
            },
            payload: publish.payload.to_vec(),
            stored: None,
        };
        // Past the bound though the broker was told it (one that ignores
        // it): acknowledged and dropped, never handled, counted and said.
        if publish.payload.len() > MAX_PACKET_BYTES as usize {
            tracing::warn!(%topic, bytes = publish.payload.len(), limit = MAX_PACKET_BYTES, "message over the bound: acknowledged and dropped");
            for sink in &sinks {
                sink.lost(&event);
            }
            if publish.qos != QoS::AtMostOnce {
                let _ = client.try_ack(&publish);
            }
            return;
        }
        if publish.dup {
            for sink in &sinks {
                sink.redelivered();
            }
        }
        if publish.qos == QoS::AtMostOnce {
            for sink in &sinks {
                crate::deliver(sink, event.clone());
            }
            return;
        }
        if shared.unacked.load(Ordering::Relaxed) >= MAX_UNACKED {
            // Left to the broker: sent again when the session resumes.
            for sink in &sinks {
                sink.lost(&event);
            }
            shared.resume.notify_one();
            return;
        }
        shared.unacked.fetch_add(1, Ordering::Relaxed);
        let handlings: Vec<_> = sinks.iter().map(|sink| sink.queue(event.clone())).collect();
        let (client, shared) = (client.clone(), Arc::clone(shared));
        tokio::spawn(async move {
            let mut succeeded = true;
            for handling in handlings {
                succeeded &= handling.await == Handled::Succeeded;
            }
            if succeeded || !shared.may_retry(&publish) {
                if !succeeded {
                    tracing::warn!(topic = %String::from_utf8_lossy(&publish.topic), attempts = MAX_ATTEMPTS, "message failed every attempt; acknowledged all the same");
                }
                // The connection may be gone: the broker then sends it
                // again, and it is handled again (at least once).
                let _ = client.ack(&publish).await;
            } else {
                shared.resume.notify_one();
            }
            shared.unacked.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

impl EventSource for MqttSource {
    fn describe(&self) -> String {
        let filters: Vec<String> = self.filters().into_iter().map(|(t, _)| t).collect();
        format!("mqtt {}:{} {filters:?}", self.broker.host, self.broker.port)
    }

    fn run(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let broker = format!("{}:{}", self.broker.host, self.broker.port);
            let shared = Arc::new(Shared {
                unacked: AtomicUsize::new(0),
                failures: Mutex::new(HashMap::new()),
                resume: tokio::sync::Notify::new(),
            });
            let mut backoff = crate::backoff::Backoff::default();
            // When the connection now up was made; `None` while down.
            let mut connected: Option<tokio::time::Instant> = None;
            // One connection per pass; a new one resumes the session.
            loop {
                let (client, mut eventloop) = AsyncClient::new(self.options(), 64);
                loop {
                    tokio::select! {
                        polled = eventloop.poll() => match polled {
                            Ok(MqttEvent::Incoming(Packet::ConnAck(ack))) => {
                                connected = Some(tokio::time::Instant::now());
                                tracing::info!(%broker, session_present = ack.session_present, "connected");
                                if !ack.session_present {
                                    for (topic, qos) in self.filters() {
                                        if let Err(error) = client.try_subscribe(topic.clone(), qos) {
                                            tracing::warn!(%broker, %topic, %error, "cannot subscribe");
                                        }
                                    }
                                }
                            }
                            Ok(MqttEvent::Incoming(Packet::Publish(publish))) => {
                                self.dispatch(publish, &client, &shared);
                            }
                            Ok(_) => {}
                            Err(error) => {
                                // Only a connection that stayed up starts
                                // the backoff again.
                                if let Some(at) = connected.take() {
                                    backoff.ended(at.elapsed());
                                }
                                tracing::warn!(%broker, %error, retry_in = ?backoff.current(), "connection lost");
                                backoff.wait().await;
                            }
                        },
                        () = shared.resume.notified() => {
                            tokio::time::sleep(REDELIVERY_DELAY).await;
                            tracing::info!(%broker, "resuming the session for messages not acknowledged");
                            break;
                        }
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_credentials_and_filters_parse() {
        let broker = Broker::parse("mqtt://u:p@localhost:1884", None, None, None, None).unwrap();
        assert_eq!((broker.host.as_str(), broker.port), ("localhost", 1884));
        assert_eq!(broker.username.as_deref(), Some("u"));
        assert_eq!(broker.password.as_deref(), Some("p"));
        let broker =
            Broker::parse("mqtt://127.0.0.1", Some("admin"), Some("pw"), None, None).unwrap();
        assert_eq!(broker.port, 1883);
        assert_eq!(broker.username.as_deref(), Some("admin"));
        assert!(!format!("{broker:?}").contains("pw"));
        for bad in [
            "mqtts://x",
            "http://x",
            "mqtt://",
            "mqtt://x:port",
            "mqtt://x/y",
        ] {
            assert!(Broker::parse(bad, None, None, None, None).is_err(), "{bad}");
        }
        assert!(Filter::new("sensors/+/temp", "1").is_ok());
        assert!(Filter::new("a/#", "0").is_ok());
        assert!(Filter::new("a/#/b", "0").is_err());
        assert!(Filter::new("a", "3").is_err());
    }

    #[test]
    fn the_client_id_is_stable_and_tells_configs_apart() {
        let broker = Broker::parse("mqtt://127.0.0.1:1883", None, None, None, None).unwrap();
        let (a, b) = (
            Filter::new("a", "1").unwrap(),
            Filter::new("b", "1").unwrap(),
        );
        let id = broker.client_id(&[&a, &b]);
        assert!(id.starts_with("luge-") && id.len() == 21, "{id}");
        assert_eq!(id, broker.client_id(&[&b, &a]));
        assert_ne!(id, broker.client_id(&[&a]));
        let named = Broker::parse("mqtt://h", None, None, None, Some("mine")).unwrap();
        assert_eq!(named.client_id(&[&a]), "mine");
    }
}
