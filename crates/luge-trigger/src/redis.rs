//! Redis pub/sub, as Spin's Redis trigger takes it: `PUBLISH` on a
//! channel wakes each trigger subscribed to it with the message.
//!
//! One connection per address carries every channel its triggers name,
//! each subscribed once however many triggers share it. When the
//! connection is lost (the server restarted, the network failed) the
//! source reconnects and resubscribes with exponential backoff, from
//! [`crate::backoff`]'s waits; what is published meanwhile
//! reaches no subscriber, as pub/sub defines. Pub/sub has no redelivery,
//! so an event its trigger has no room for is dropped and counted.
//!
//! The address is the operator's (a manifest or config Luge was started
//! with), or an upload's checked against its grants; its password is
//! never logged. A message is at most [`MAX_MESSAGE_BYTES`], counted as
//! bytes off the socket.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use luge_core::event::{Event, EventKind};

use crate::{
    Endpoint, EventSource, Kind, Sink, Source, SourceError, SpinError, SpinKey, SpinTrigger,
    Triggered,
};

/// How long connecting and subscribing may take before it counts as a
/// failure (a server that accepts and then stalls).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest message a subscription takes (the executor's default
/// `--max-body-mb`): the bytes read off the socket between two messages
/// are counted, and a server that sends more ends its connection (then
/// resubscribed) instead of growing the host's memory.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The longest channel name a trigger may subscribe to (Redis allows
/// 512 MiB; names are config).
pub const MAX_CHANNEL_BYTES: usize = 1024;

/// A Redis server's address, checked once where it is configured:
/// `redis://[user:password@]host[:port][/db]`, over TCP. Its password is
/// never shown: it prints redacted ([`redacted`]).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Address {
    text: String,
    host: String,
    port: u16,
}

impl Address {
    /// `text`, if it is a `redis://` address over TCP.
    pub fn parse(text: &str) -> Result<Self, SourceError> {
        let refused = || SourceError::RedisAddress(redacted(text));
        let parsed = ::redis::Client::open(text).map_err(|_| refused())?;
        let ::redis::ConnectionAddr::Tcp(host, port) = parsed.get_connection_info().addr() else {
            return Err(refused());
        };
        if !text.starts_with("redis://") {
            return Err(refused());
        }
        Ok(Self {
            text: text.to_owned(),
            host: host.clone(),
            port: *port,
        })
    }

    /// The address as written, credentials and all: for connecting only.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The server's host, as written.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server as a grant names it.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            scheme: "redis",
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// The same address with its host replaced by `ip` (its user,
    /// password, port and database kept).
    pub fn at(&self, ip: std::net::IpAddr) -> Self {
        Self {
            text: with_host(&self.text, ip),
            host: ip.to_string(),
            port: self.port,
        }
    }
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", redacted(&self.text))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", redacted(&self.text))
    }
}

/// Checks a trigger's `address` and `channel`.
pub fn check(address: &str, channel: &str) -> Result<(), SourceError> {
    Address::parse(address)?;
    check_channel(channel)
}

fn check_channel(channel: &str) -> Result<(), SourceError> {
    if channel.is_empty() || channel.len() > MAX_CHANNEL_BYTES {
        return Err(SourceError::Channel);
    }
    Ok(())
}

/// One Redis trigger's settings: a server and a channel on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The server.
    pub address: Address,
    /// The channel (a name, not a pattern).
    pub channel: String,
}

impl Subscription {
    /// `channel` of the server at `address`, both checked.
    pub fn new(address: &str, channel: &str) -> Result<Self, SourceError> {
        let address = Address::parse(address)?;
        check_channel(channel)?;
        Ok(Self {
            address,
            channel: channel.to_owned(),
        })
    }
}

crate::kind::addressed_settings!(Subscription, Redis);

/// luge.toml's `redis = { address, channel }`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    address: String,
    channel: String,
}

/// A Spin manifest's `[[trigger.redis]]` (its `component` and `id` aside):
/// the channel, and the server when not the app's.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpinEntry {
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    address: Option<String>,
}

/// Redis pub/sub: Spin's `redis` trigger.
pub struct Redis;

impl Kind for Redis {
    crate::kind::identity!("redis", Table);

    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError> {
        let table: Table = crate::table(settings)?;
        Ok(Source::new(Subscription::new(
            &table.address,
            &table.channel,
        )?))
    }

    fn spin_source(&self, trigger: SpinTrigger<'_>) -> Result<Source, SpinError> {
        let entry: SpinEntry = trigger.read()?;
        let address = spin_address(self.name(), entry.address.as_deref(), &trigger)?;
        let channel = entry
            .channel
            .as_deref()
            .ok_or_else(|| SpinError::new(SpinKey::Entry, "a Redis trigger names its channel"))?;
        let channel = trigger.expanded("channel", channel)?;
        Ok(Source::new(
            Subscription::new(&address, &channel).map_err(|e| SpinError::new(SpinKey::Entry, e))?,
        ))
    }

    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
        let mut servers: BTreeMap<Address, BTreeMap<String, Vec<Arc<dyn Sink>>>> = BTreeMap::new();
        for (subscription, sink) in crate::own::<Subscription>(triggers) {
            servers
                .entry(subscription.address)
                .or_default()
                .entry(subscription.channel)
                .or_default()
                .push(sink);
        }
        servers
            .into_iter()
            .map(|(address, channels)| {
                Box::new(RedisSource::new(address, channels)) as Box<dyn EventSource>
            })
            .collect()
    }
}

/// A Spin trigger entry's Redis server: its own `address`, else the app's
/// `[application.trigger.KIND] address`, templates expanded.
pub(crate) fn spin_address(
    kind: &str,
    own: Option<&str>,
    trigger: &SpinTrigger<'_>,
) -> Result<String, SpinError> {
    let address = match (own, trigger.app.get("address")) {
        (Some(address), _) => address,
        (None, Some(toml::Value::String(address))) => address.as_str(),
        _ => {
            return Err(SpinError::new(
                SpinKey::Trigger("address"),
                format!("no address: set [application.trigger.{kind}] address, or address here"),
            ));
        }
    };
    trigger.expanded("address", address)
}

/// `address` without its user and password (what is before the last `@`,
/// after the scheme's `://` if any).
pub fn redacted(address: &str) -> String {
    let Some(at) = address.rfind('@') else {
        return address.to_owned();
    };
    let start = address.find("://").map_or(0, |scheme| scheme + 3).min(at);
    format!("{}***{}", &address[..start], &address[at..])
}

/// `address` with its host replaced by `ip` (its user, password, port
/// and database kept).
pub fn with_host(address: &str, ip: std::net::IpAddr) -> String {
    let Some(rest) = address.strip_prefix("redis://") else {
        return address.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let port = match hostport.rfind(':') {
        Some(colon) if !hostport[colon..].contains(']') => &hostport[colon..],
        _ => "",
    };
    let host = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    };
    format!("redis://{userinfo}{host}{port}{path}")
}

/// One Redis server's subscriptions.
pub struct RedisSource {
    address: Address,
    /// Each channel and the triggers on it.
    channels: BTreeMap<String, Vec<Arc<dyn Sink>>>,
    max_message_bytes: usize,
}

impl RedisSource {
    /// The subscriptions to `channels` of the server at `address`.
    pub fn new(address: Address, channels: BTreeMap<String, Vec<Arc<dyn Sink>>>) -> Self {
        Self {
            address,
            channels,
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }

    /// The same, taking messages of at most `bytes` (default
    /// [`MAX_MESSAGE_BYTES`]).
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Connects over a socket whose reads are counted, and subscribes to
    /// every channel.
    async fn subscribe(
        &self,
    ) -> ::redis::RedisResult<(::redis::aio::PubSub, luge_outbound::Budget)> {
        let client = ::redis::Client::open(self.address.as_str())?;
        let info = client.get_connection_info();
        let ::redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err((::redis::ErrorKind::InvalidClientConfig, "not a TCP address").into());
        };
        let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
        let (stream, budget) = luge_outbound::Budgeted::new(tcp, self.max_message_bytes);
        let mut pubsub = ::redis::aio::PubSub::new(info.redis_settings(), stream).await?;
        for channel in self.channels.keys() {
            pubsub.subscribe(channel).await?;
        }
        Ok((pubsub, budget))
    }

    /// Hands `message` to the triggers on its channel.
    fn dispatch(&self, message: &::redis::Msg) {
        let channel = message.get_channel_name();
        let Some(sinks) = self.channels.get(channel) else {
            return;
        };
        for sink in sinks {
            let event = Event {
                kind: EventKind::Redis {
                    channel: channel.to_owned(),
                },
                payload: message.get_payload_bytes().to_vec(),
                stored: None,
            };
            crate::deliver(sink, event);
        }
    }
}

impl EventSource for RedisSource {
    fn describe(&self) -> String {
        let channels: Vec<&str> = self.channels.keys().map(String::as_str).collect();
        format!("redis {} {channels:?}", self.address)
    }

    fn run(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let address = self.address.to_string();
            let mut backoff = crate::backoff::Backoff::default();
            loop {
                match tokio::time::timeout(CONNECT_TIMEOUT, self.subscribe()).await {
                    Ok(Ok((mut pubsub, budget))) => {
                        tracing::info!(%address, channels = self.channels.len(), "subscribed");
                        backoff.reset();
                        // The client reads every message off the socket as
                        // it comes and this loop takes each at once (an
                        // offer, a spawn), so its queue stays short; each
                        // message taken gives the socket its bound again.
                        let mut messages = pubsub.on_message();
                        while let Some(message) = messages.next().await {
                            budget.reset(self.max_message_bytes);
                            self.dispatch(&message);
                        }
                        if budget.spent() {
                            tracing::warn!(%address, limit = self.max_message_bytes, "a message over the bound ended the subscription; resubscribing");
                        } else {
                            tracing::warn!(%address, "subscription lost; resubscribing");
                        }
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(%address, %error, retry_in = ?backoff.current(), "cannot subscribe");
                    }
                    Err(_) => {
                        tracing::warn!(%address, retry_in = ?backoff.current(), "subscribing timed out");
                    }
                }
                backoff.wait().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_redis_urls_and_their_passwords_stay_out_of_logs() {
        assert!(check("redis://127.0.0.1:6379", "jobs").is_ok());
        assert!(check("redis://:secret@127.0.0.1:6379/2", "jobs").is_ok());
        assert!(check("http://127.0.0.1", "jobs").is_err());
        assert!(check("redis+unix:///tmp/sock", "jobs").is_err());
        assert_eq!(check("redis://127.0.0.1", ""), Err(SourceError::Channel));
        assert_eq!(
            redacted("redis://:secret@127.0.0.1:6379"),
            "redis://***@127.0.0.1:6379"
        );
        let error = check("redis//:secret@x", "c").unwrap_err().to_string();
        assert!(!error.contains("secret"), "{error}");
        let ip = std::net::IpAddr::from([10, 0, 0, 7]);
        assert_eq!(
            with_host("redis://:pw@cache.example:6380/2", ip),
            "redis://:pw@10.0.0.7:6380/2"
        );
        assert_eq!(with_host("redis://cache", ip), "redis://10.0.0.7");
    }
}
