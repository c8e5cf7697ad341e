//! Outbound MQTT for functions (`spin:mqtt@3.0.0`): the host side of the
//! outbound MQTT slice, whose grants are `mqtt://` entries of
//! `allowed_outbound_hosts`
//! ([`luge_core::capabilities::outbound`]).
//!
//! This crate narrows `rumqttc` (MQTT 3.1.1) to what a sandbox may do:
//!
//! - **Where.** The address is `mqtt://host[:port][?client_id=ID]`; the
//!   host and port must be granted for `mqtt`, and the name is resolved
//!   and checked by [`luge_outbound::permitted_addresses`] (every DNS
//!   answer, the operator's blocked networks); the client connects to the
//!   checked address, never to the name. `mqtts://` is `invalid-address`
//!   (no MQTT over TLS yet).
//! - **Whose session.** A client id a function gives may not start with
//!   `luge-`, the prefix of Luge's own sessions (its MQTT triggers'), so
//!   a function cannot take a trigger's session over; without one, a
//!   fresh id is made. The session is clean: nothing outlives the
//!   connection.
//! - **How much.** A message is at most [`MAX_PACKET_BYTES`] either way.
//! - **How long.** Connecting and each publish (until the broker
//!   acknowledged it, for QoS 1 and 2) end by the invocation's deadline.
//! - **How many.** At most [`MAX_CONNECTIONS_PER_FUNCTION`] connections
//!   per function at once; one more is `too-many-connections`.
//! - **Secrets.** The password is never logged or repeated in errors.

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use luge_outbound::{Caller, Slots};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, QoS};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::timeout_at;

/// MQTT connections one function may hold open at once, across its
/// invocations.
pub const MAX_CONNECTIONS_PER_FUNCTION: usize = 16;

/// The largest packet sent or accepted.
pub const MAX_PACKET_BYTES: usize = 1 << 20;

/// The client id prefix of Luge's own sessions, refused to functions.
pub const RESERVED_PREFIX: &str = "luge-";

/// Why an MQTT call failed, as `spin:mqtt`'s `error` tells them apart.
#[derive(Debug, thiserror::Error)]
pub enum MqttError {
    /// Not an `mqtt://` address Luge can connect to, or a reserved client
    /// id.
    #[error(
        "not an mqtt://host[:port][?client_id=ID] address (client ids starting luge- are Luge's)"
    )]
    InvalidAddress,
    /// The function holds [`MAX_CONNECTIONS_PER_FUNCTION`] connections.
    #[error("the function holds {MAX_CONNECTIONS_PER_FUNCTION} MQTT connections already")]
    TooManyConnections,
    /// The address is not granted, or cannot be reached.
    #[error(transparent)]
    Connect(#[from] luge_outbound::SendError),
    /// The broker refused or dropped the connection.
    #[error("the connection failed: {0}")]
    ConnectionFailed(String),
    /// The deadline passed.
    #[error("the invocation's deadline passed")]
    Deadline,
    /// A bad topic or payload.
    #[error("{0}")]
    Other(String),
}

/// The connection slots of each function.
static SLOTS: LazyLock<Slots> = LazyLock::new(|| Slots::new(MAX_CONNECTIONS_PER_FUNCTION));

/// An open connection to a broker.
pub struct Connection {
    client: AsyncClient,
    /// Driven by each publish in turn (one at a time per connection).
    eventloop: tokio::sync::Mutex<EventLoop>,
    _slot: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

/// `mqtt://host[:port][?client_id=ID]` as its host, port and client id.
fn parse(address: &str) -> Result<(String, u16, Option<String>), MqttError> {
    let rest = address
        .strip_prefix("mqtt://")
        .ok_or(MqttError::InvalidAddress)?;
    let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains(['@', '/', '#']) || authority.is_empty() {
        return Err(MqttError::InvalidAddress);
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => (
            host,
            port.parse::<u16>().map_err(|_| MqttError::InvalidAddress)?,
        ),
        _ => (authority, 1883),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut client_id = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("client_id", id)) if !id.is_empty() && id.len() <= 128 => {
                client_id = Some(id.to_owned());
            }
            _ => return Err(MqttError::InvalidAddress),
        }
    }
    if client_id
        .as_deref()
        .is_some_and(|id| id.starts_with(RESERVED_PREFIX))
        || host.is_empty()
        || port == 0
    {
        return Err(MqttError::InvalidAddress);
    }
    Ok((host.to_owned(), port, client_id))
}

/// A client id for a connection that gave none.
fn fresh_client_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "fn-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Opens a connection for `caller` to the broker at `address`, which its
/// grants must reach, by its deadline (its answer bound does not apply:
/// a publish answers nothing).
pub async fn open(
    caller: Caller<'_>,
    address: &str,
    username: &str,
    password: &str,
    keep_alive: Duration,
) -> Result<Connection, MqttError> {
    let (function, grants, deadline, _) = caller.parts();
    let (host, port, client_id) = parse(address)?;
    let slot = SLOTS
        .try_take(function)
        .ok_or(MqttError::TooManyConnections)?;
    let addresses =
        luge_outbound::permitted_addresses(grants, "mqtt", &host, port, deadline).await?;
    let Some(checked) = addresses.first() else {
        return Err(MqttError::InvalidAddress);
    };
    let mut options = MqttOptions::new(
        client_id.unwrap_or_else(fresh_client_id),
        checked.ip().to_string(),
        checked.port(),
    );
    options
        .set_keep_alive(keep_alive.max(Duration::from_secs(5)))
        .set_clean_session(true)
        .set_max_packet_size(MAX_PACKET_BYTES, MAX_PACKET_BYTES);
    if !username.is_empty() {
        options.set_credentials(username, password);
    }
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    timeout_at(deadline.into(), async {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(MqttError::ConnectionFailed(e.to_string())),
            }
        }
    })
    .await
    .map_err(|_| MqttError::Deadline)??;
    Ok(Connection {
        client,
        eventloop: tokio::sync::Mutex::new(eventloop),
        _slot: slot,
    })
}

impl Connection {
    /// Publishes `payload` on `topic` at `qos` (0, 1 or 2), by
    /// `deadline`: once sent for QoS 0, once the broker acknowledged it
    /// for QoS 1 and 2.
    pub async fn publish(
        &self,
        topic: &str,
        payload: Vec<u8>,
        qos: u8,
        deadline: Instant,
    ) -> Result<(), MqttError> {
        let qos = match qos {
            0 => QoS::AtMostOnce,
            1 => QoS::AtLeastOnce,
            _ => QoS::ExactlyOnce,
        };
        if topic.is_empty() || topic.contains(['+', '#']) || topic.len() > 65_535 {
            return Err(MqttError::Other(format!(
                "{topic:?} is not a topic to publish on"
            )));
        }
        if payload.len() + topic.len() + 16 > MAX_PACKET_BYTES {
            return Err(MqttError::Other(format!(
                "a message is at most {MAX_PACKET_BYTES} bytes"
            )));
        }
        let mut eventloop = timeout_at(deadline.into(), self.eventloop.lock())
            .await
            .map_err(|_| MqttError::Deadline)?;
        self.client
            .try_publish(topic, qos, false, payload)
            .map_err(|e| MqttError::Other(e.to_string()))?;
        timeout_at(deadline.into(), async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Outgoing(Outgoing::Publish(_))) if qos == QoS::AtMostOnce => {
                        return Ok(());
                    }
                    Ok(Event::Incoming(Packet::PubAck(_))) if qos == QoS::AtLeastOnce => {
                        return Ok(());
                    }
                    Ok(Event::Incoming(Packet::PubComp(_))) if qos == QoS::ExactlyOnce => {
                        return Ok(());
                    }
                    Ok(_) => {}
                    Err(e) => return Err(MqttError::ConnectionFailed(e.to_string())),
                }
            }
        })
        .await
        .map_err(|_| MqttError::Deadline)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_luges_own_client_ids_are_refused() {
        assert_eq!(
            parse("mqtt://localhost:1884?client_id=abc").unwrap(),
            ("localhost".to_owned(), 1884, Some("abc".to_owned()))
        );
        assert_eq!(parse("mqtt://10.0.0.1").unwrap().1, 1883);
        for bad in [
            "mqtts://x",
            "mqtt://u:p@x",
            "mqtt://x?client_id=luge-0123",
            "mqtt://x?other=1",
            "mqtt://x:99999",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    use luge_testkit::later;

    /// A connection without credentials for `function`.
    async fn anonymous(
        function: &str,
        grants: &luge_core::capabilities::AllowedHosts,
        address: &str,
    ) -> Result<Connection, MqttError> {
        let caller = Caller::new(function, grants, later(), 0);
        open(caller, address, "", "", Duration::from_secs(30)).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_reach_a_granted_broker_and_nothing_else_does() {
        use luge_testkit::grants;
        use luge_testkit::mosquitto::MosquittoServer;

        let broker = MosquittoServer::start().unwrap();
        let address = format!("mqtt://127.0.0.1:{}", broker.port);
        let granted = grants(&[&address]);
        let mut subscriber = broker.subscribe("out/#", 2).unwrap();
        let c = anonymous("m1", &granted, &address).await.unwrap();
        // Until the subscriber has both (it may subscribe after the first
        // publishes).
        let mut sent = 0;
        while !subscriber.done() && sent < 100 {
            c.publish("out/a", b"at least once".to_vec(), 1, later())
                .await
                .unwrap();
            c.publish("out/b", b"at most once".to_vec(), 0, later())
                .await
                .unwrap();
            sent += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let messages = subscriber.messages().unwrap();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages.iter().all(|m| m.ends_with("once")), "{messages:?}");
        assert!(c.publish("out/#", Vec::new(), 0, later()).await.is_err());

        // Not granted: refused before any socket.
        let other = format!("mqtt://127.0.0.2:{}", broker.port);
        let error = anonymous("m1", &granted, &other).await.unwrap_err();
        assert!(matches!(error, MqttError::Connect(_)), "{error}");

        // Bounded per function.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_FUNCTION {
            held.push(anonymous("m2", &granted, &address).await.unwrap());
        }
        let error = anonymous("m2", &granted, &address).await.unwrap_err();
        assert!(matches!(error, MqttError::TooManyConnections), "{error}");
        // Another function is not held back by it.
        assert!(anonymous("m1", &granted, &address).await.is_ok());
        drop((held, c));
    }
}
