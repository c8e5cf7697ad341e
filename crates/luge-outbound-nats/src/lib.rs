//! Outbound NATS messaging for functions (`wasmcloud:messaging/consumer@0.2.0`:
//! `publish` and `request`), and the relay every NATS client of Luge's
//! talks to its server through ([`guard`]; the NATS JetStream trigger's
//! too).
//!
//! This crate narrows `async-nats` to what a sandbox may do:
//!
//! - **Where.** wasmCloud's consumer names no server: the one a function
//!   reaches is the one `nats://host[:port]` entry of its
//!   `allowed_outbound_hosts` that names a host and a port exactly
//!   ([`AllowedHosts::named_servers`]); none, or more than one, is
//!   [`NatsError::NoServer`]. The name is resolved and checked by
//!   [`luge_outbound::permitted_addresses`] (every DNS answer, the
//!   operator's blocked networks), and the client talks to the checked
//!   address through a [`guard`] relay; the servers a NATS server
//!   advertises are ignored.
//! - **What.** A subject is NATS's: dot-separated tokens of printable
//!   characters, none empty, no wildcard (`*`, `>`) where a message is
//!   sent. Subjects starting `$` (the server's own: `$SYS`, JetStream's
//!   `$JS.API`, `$KV`, `$O`) are refused, so a function cannot delete or
//!   read a stream, a trigger's among them, through the API subjects.
//! - **How much.** A message is at most [`MAX_PAYLOAD_BYTES`] (NATS's
//!   default `max_payload`); an answer at most the function's answer
//!   bound, which the relay holds the server to.
//! - **How long.** Connecting, each publish (until the server has it) and
//!   each request (until its answer) end by the invocation's deadline; a
//!   request also by its own `timeout-ms`.
//! - **How many.** At most [`MAX_CONNECTIONS_PER_FUNCTION`] connections
//!   per function at once (each call holds one while it runs).
//!
//! Each call opens its connection and closes it when done: the consumer
//! has no handle to keep one in. No credentials are sent (a grant names a
//! host and a port only).

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;
pub mod guard;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use luge_core::capabilities::AllowedHosts;
use luge_outbound::{Caller, Slots};
use tokio::time::timeout_at;

/// NATS connections one function may hold at once, across its
/// invocations.
pub const MAX_CONNECTIONS_PER_FUNCTION: usize = 16;

/// The largest message a function sends: NATS's default `max_payload`.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The longest subject a function names.
pub const MAX_SUBJECT_BYTES: usize = 512;

/// The URL scheme of a NATS grant.
pub const SCHEME: &str = "nats";

/// Why a NATS call failed (told to the guest as one line).
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// Not exactly one `nats://host:port` granted.
    #[error(
        "{0} NATS servers are granted: the consumer reaches the one nats://host:port entry of allowed_outbound_hosts"
    )]
    NoServer(usize),
    /// A subject NATS or Luge refuses.
    #[error("{0:?} is not a subject a function may send to")]
    Subject(String),
    /// A message over [`MAX_PAYLOAD_BYTES`].
    #[error("the message is {0} bytes, over the {MAX_PAYLOAD_BYTES} a function may send")]
    TooLarge(usize),
    /// The function holds [`MAX_CONNECTIONS_PER_FUNCTION`] connections.
    #[error("the function holds {MAX_CONNECTIONS_PER_FUNCTION} NATS connections already")]
    TooManyConnections,
    /// The server is not granted, or cannot be reached.
    #[error(transparent)]
    Connect(#[from] luge_outbound::SendError),
    /// The server refused, dropped or broke the connection.
    #[error("the NATS connection failed: {0}")]
    ConnectionFailed(String),
    /// A request found no subscriber.
    #[error("no one answers on {0:?}")]
    NoResponders(String),
    /// A request's own timeout passed.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The deadline passed.
    #[error("the invocation's deadline passed")]
    Deadline,
}

/// One message, as wasmCloud's `broker-message` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Where it goes, or came from.
    pub subject: String,
    /// Its bytes.
    pub body: Vec<u8>,
    /// Where an answer goes.
    pub reply_to: Option<String>,
}

/// The connection slots of each function.
static SLOTS: LazyLock<Slots> = LazyLock::new(|| Slots::new(MAX_CONNECTIONS_PER_FUNCTION));

/// Whether `subject` is one a function may send to: NATS's grammar
/// (tokens of printable non-space characters, none empty), no wildcard,
/// not the server's own (`$`).
pub fn check_subject(subject: &str) -> Result<(), NatsError> {
    let refused = || NatsError::Subject(subject.to_owned());
    if subject.is_empty() || subject.len() > MAX_SUBJECT_BYTES || subject.starts_with('$') {
        return Err(refused());
    }
    let printable = |c: char| c.is_ascii_graphic() || !c.is_ascii() && !c.is_whitespace();
    for token in subject.split('.') {
        if token.is_empty() || token == "*" || token == ">" || !token.chars().all(printable) {
            return Err(refused());
        }
    }
    Ok(())
}

/// The one server `grants` name for NATS.
fn server(grants: &AllowedHosts) -> Result<(String, u16), NatsError> {
    let mut servers = grants.named_servers(SCHEME);
    match servers.len() {
        1 => Ok(servers.remove(0)),
        n => Err(NatsError::NoServer(n)),
    }
}

/// An open connection: the client, the relay it talks through and the
/// function's slot, all let go together.
struct Connection {
    client: async_nats::Client,
    _relay: guard::Guard,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// Connects `caller` to its granted server by its deadline.
async fn connect(caller: &Caller<'_>) -> Result<Connection, NatsError> {
    let (host, port) = server(caller.grants)?;
    let slot = SLOTS
        .try_take(caller.function)
        .ok_or(NatsError::TooManyConnections)?;
    let deadline = caller.deadline;
    let addresses =
        luge_outbound::permitted_addresses(caller.grants, SCHEME, &host, port, deadline).await?;
    let checked = *addresses
        .first()
        .ok_or(luge_outbound::SendError::Denied(host.clone()))?;
    let left = deadline.saturating_duration_since(Instant::now());
    // What the server may send: the largest answer, with room for its
    // headers.
    let bound = caller.max_answer_bytes.saturating_add(4096);
    let relay = guard::relay(checked, bound, left)
        .await
        .map_err(|e| NatsError::ConnectionFailed(e.to_string()))?;
    let options = async_nats::ConnectOptions::new()
        .ignore_discovered_servers()
        .connection_timeout(left.max(Duration::from_millis(1)))
        .max_reconnects(Some(1));
    let client = timeout_at(
        deadline.into(),
        options.connect(format!("nats://{}", relay.local)),
    )
    .await
    .map_err(|_| NatsError::Deadline)?
    .map_err(|e| NatsError::ConnectionFailed(e.to_string()))?;
    Ok(Connection {
        client,
        _relay: relay,
        _slot: slot,
    })
}

/// Checks `message`'s subjects and size.
fn check(message: &Message) -> Result<(), NatsError> {
    check_subject(&message.subject)?;
    if let Some(reply_to) = &message.reply_to {
        check_subject(reply_to)?;
    }
    if message.body.len() > MAX_PAYLOAD_BYTES {
        return Err(NatsError::TooLarge(message.body.len()));
    }
    Ok(())
}

/// Sends `message` for `caller`, done once the server has it (flushed),
/// by its deadline.
pub async fn publish(caller: Caller<'_>, message: Message) -> Result<(), NatsError> {
    check(&message)?;
    let connection = connect(&caller).await?;
    let client = &connection.client;
    let sent = async {
        let Message {
            subject,
            body,
            reply_to,
        } = message;
        match reply_to {
            Some(reply_to) => {
                client
                    .publish_with_reply(subject, reply_to, body.into())
                    .await
            }
            None => client.publish(subject, body.into()).await,
        }
        .map_err(|e| NatsError::ConnectionFailed(e.to_string()))?;
        client
            .flush()
            .await
            .map_err(|e| NatsError::ConnectionFailed(e.to_string()))
    };
    timeout_at(caller.deadline.into(), sent)
        .await
        .map_err(|_| NatsError::Deadline)?
}

/// Sends `body` to `subject` for `caller` and waits for one answer, for
/// at most `timeout` and by its deadline.
pub async fn request(
    caller: Caller<'_>,
    subject: String,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Message, NatsError> {
    check_subject(&subject)?;
    if body.len() > MAX_PAYLOAD_BYTES {
        return Err(NatsError::TooLarge(body.len()));
    }
    let connection = connect(&caller).await?;
    let until = caller.deadline.min(Instant::now() + timeout);
    let asked = connection.client.request(subject.clone(), body.into());
    let answer = match timeout_at(until.into(), asked).await {
        Ok(answer) => answer,
        Err(_) if until < caller.deadline => return Err(NatsError::TimedOut(timeout)),
        Err(_) => return Err(NatsError::Deadline),
    };
    let answer = answer.map_err(|e| match e.kind() {
        async_nats::RequestErrorKind::NoResponders => NatsError::NoResponders(subject),
        async_nats::RequestErrorKind::TimedOut => NatsError::TimedOut(timeout),
        _ => NatsError::ConnectionFailed(e.to_string()),
    })?;
    if answer
        .headers
        .as_ref()
        .is_some_and(|headers| headers.get(guard::OVERSIZED).is_some())
    {
        return Err(NatsError::ConnectionFailed(format!(
            "the answer is over the {} bytes the function may take",
            caller.max_answer_bytes
        )));
    }
    Ok(Message {
        subject: answer.subject.to_string(),
        body: answer.payload.to_vec(),
        reply_to: answer.reply.map(|r| r.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_natss_without_wildcards_or_the_servers_own() {
        for ok in ["orders", "orders.new", "a.b-c_d.é", "results.orders.42"] {
            check_subject(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for refused in [
            "",
            "$JS.API.STREAM.DELETE.JOBS",
            "$SYS.REQ.SERVER.PING",
            "$KV.bucket.key",
            "orders.*",
            "orders.>",
            ">",
            "a..b",
            ".a",
            "a.",
            "a b",
            "a\tb",
            "a\r\nPUB x 1",
        ] {
            assert!(
                matches!(check_subject(refused), Err(NatsError::Subject(_))),
                "{refused:?}"
            );
        }
        assert!(check_subject(&"a".repeat(MAX_SUBJECT_BYTES + 1)).is_err());
    }

    fn caller(grants: &AllowedHosts) -> Caller<'_> {
        Caller::new(
            "f",
            grants,
            Instant::now() + Duration::from_secs(5),
            1 << 20,
        )
    }

    fn grants(entries: &[&str]) -> AllowedHosts {
        let entries: Vec<_> = entries.iter().map(|e| (*e).into()).collect();
        AllowedHosts::parse(&entries, &Default::default()).unwrap()
    }

    /// A function holding every one of its slots (calls still running)
    /// is refused another connection before anything is dialled; another
    /// function is not.
    #[tokio::test]
    async fn a_function_holds_at_most_its_connections() {
        let grants = grants(&["nats://127.0.0.1:1"]);
        let held: Vec<_> = (0..MAX_CONNECTIONS_PER_FUNCTION)
            .map(|_| SLOTS.try_take("greedy").unwrap())
            .collect();
        let message = Message {
            subject: "orders".into(),
            body: Vec::new(),
            reply_to: None,
        };
        let greedy = Caller::new(
            "greedy",
            &grants,
            Instant::now() + Duration::from_secs(5),
            1,
        );
        let refused = publish(greedy, message.clone()).await;
        assert!(
            matches!(refused, Err(NatsError::TooManyConnections)),
            "{refused:?}"
        );
        // Another function still dials (and finds no server on port 1).
        let other = publish(caller(&grants), message.clone()).await;
        assert!(
            matches!(
                other,
                Err(NatsError::Connect(_) | NatsError::ConnectionFailed(_))
            ),
            "{other:?}"
        );
        drop(held);
        let again = publish(
            Caller::new(
                "greedy",
                &grants,
                Instant::now() + Duration::from_secs(5),
                1,
            ),
            message,
        )
        .await;
        assert!(
            !matches!(again, Err(NatsError::TooManyConnections)),
            "{again:?}"
        );
    }

    #[tokio::test]
    async fn without_one_named_server_nothing_is_sent() {
        let message = || Message {
            subject: "orders".into(),
            body: b"x".to_vec(),
            reply_to: None,
        };
        for (entries, granted) in [
            (&[][..], 0),
            (&["nats://*:4222"][..], 0),
            (&["nats://a:4222", "nats://b:4222"][..], 2),
            (&["mqtt://127.0.0.1:1883"][..], 0),
        ] {
            let grants = grants(entries);
            let sent = publish(caller(&grants), message()).await;
            assert!(
                matches!(sent, Err(NatsError::NoServer(n)) if n == granted),
                "{entries:?}: {sent:?}"
            );
        }
        // A server named but at an address the operator blocks, or not
        // listening: refused, not hung.
        let grants = grants(&["nats://127.0.0.1:1"]);
        let sent = publish(caller(&grants), message()).await;
        assert!(sent.is_err(), "{sent:?}");
        let too_large = Message {
            body: vec![0; MAX_PAYLOAD_BYTES + 1],
            ..message()
        };
        assert!(matches!(
            publish(caller(&grants), too_large).await,
            Err(NatsError::TooLarge(_))
        ));
    }
}
