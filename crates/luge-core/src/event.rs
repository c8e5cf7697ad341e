//! Functions woken by events (a Redis message, an MQTT message, a cron
//! tick) instead of HTTP requests.
//!
//! Only the types are here: the event sources live in `luge-trigger`, the
//! executor admits and schedules each event like a request, and the engine
//! calls the export a component has for its kind of event. A function with
//! no such export (a core module, a `wasi:cli` command) gets the payload on
//! stdin instead, and the event's metadata in its environment.

/// What woke a function, with the metadata each kind carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A message published on a Redis channel (`PUBLISH`).
    Redis {
        /// The channel it was published on.
        channel: String,
    },
    /// A message on an MQTT topic.
    Mqtt {
        /// The topic it was published on.
        topic: String,
    },
    /// A message from a queue (a NATS JetStream stream): what a
    /// `wasmcloud:messaging` handler takes.
    Message {
        /// The messaging system, as OpenTelemetry's `messaging.system`
        /// names it (`nats`).
        system: &'static str,
        /// The subject it was published on.
        subject: String,
    },
    /// A tick of a cron schedule.
    Cron {
        /// When the tick was due, seconds since the Unix epoch.
        timestamp: u64,
    },
}

impl EventKind {
    /// The trigger type as Spin's manifest names it (`redis`, `mqtt`,
    /// `cron`).
    pub fn trigger(&self) -> &'static str {
        match self {
            Self::Redis { .. } => "redis",
            Self::Mqtt { .. } => "mqtt",
            Self::Message { .. } => "messaging",
            Self::Cron { .. } => "cron",
        }
    }

    /// The system it came from, as OpenTelemetry's `messaging.system`
    /// names it (`redis`, `mqtt`, `nats`; `cron` for a tick).
    pub fn system(&self) -> &'static str {
        match self {
            Self::Message { system, .. } => system,
            other => other.trigger(),
        }
    }

    /// The channel or topic, empty for a tick.
    pub fn subject(&self) -> &str {
        match self {
            Self::Redis { channel } => channel,
            Self::Mqtt { topic } => topic,
            Self::Message { subject, .. } => subject,
            Self::Cron { .. } => "",
        }
    }
}

/// One event for one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What woke the function.
    pub kind: EventKind,
    /// The message's bytes (empty for a tick).
    pub payload: Vec<u8>,
    /// When its broker stored it, as the broker says: a queue's message
    /// (a Redis stream entry's id, which a producer may choose; a
    /// JetStream message's timestamp). `None` for a message that is not
    /// kept (pub/sub, MQTT) and for a tick.
    pub stored: Option<std::time::SystemTime>,
}

/// The export a component has for events, which the engine calls with the
/// event ([`crate::LoadedModule::start_event`]): the engine that found it
/// names it (Spin's exports are `luge-wasmtime`'s to know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventExport {
    /// The trigger kind whose events it takes, as Spin's manifest names it
    /// (`redis`, `mqtt`, `cron`).
    pub trigger: &'static str,
    /// The export, as the component's world names it.
    pub name: &'static str,
}

impl EventExport {
    /// Whether the export takes events of `kind`.
    pub fn takes(self, kind: &EventKind) -> bool {
        self.trigger == kind.trigger()
    }
}

/// What a module that has no export for events says when asked to take one.
pub const NOT_AN_EVENT_HANDLER: &str = "the function exports no handler for this kind of event";

/// The environment a function that takes the event on stdin gets:
/// `LUGE_TRIGGER` (`redis`, `mqtt`, `messaging`, `cron`), `LUGE_EVENT_ID` (`id`, unique
/// per trigger), and `LUGE_EVENT_SUBJECT` (the channel or topic) or
/// `LUGE_EVENT_TIME` (a tick's Unix time).
pub fn environment(event: &Event, id: u64) -> Vec<(String, String)> {
    let mut env = vec![
        ("LUGE_TRIGGER".to_owned(), event.kind.trigger().to_owned()),
        ("LUGE_EVENT_ID".to_owned(), id.to_string()),
    ];
    match &event.kind {
        EventKind::Cron { timestamp } => {
            env.push(("LUGE_EVENT_TIME".to_owned(), timestamp.to_string()));
        }
        kind => env.push(("LUGE_EVENT_SUBJECT".to_owned(), kind.subject().to_owned())),
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_takes_only_its_own_kind_of_event() {
        let redis = EventKind::Redis {
            channel: "c".into(),
        };
        let tick = EventKind::Cron { timestamp: 7 };
        let export = |trigger| EventExport {
            trigger,
            name: "handle",
        };
        assert!(export("redis").takes(&redis));
        assert!(!export("redis").takes(&tick));
        assert!(export("cron").takes(&tick));
        assert!(!export("mqtt").takes(&redis));
    }

    #[test]
    fn the_environment_names_the_trigger_and_the_subject_or_time() {
        let event = Event {
            kind: EventKind::Mqtt {
                topic: "t/1".into(),
            },
            payload: b"x".to_vec(),
            stored: None,
        };
        let env = environment(&event, 9);
        assert!(env.contains(&("LUGE_TRIGGER".into(), "mqtt".into())));
        assert!(env.contains(&("LUGE_EVENT_ID".into(), "9".into())));
        assert!(env.contains(&("LUGE_EVENT_SUBJECT".into(), "t/1".into())));
        let tick = Event {
            kind: EventKind::Cron { timestamp: 5 },
            payload: Vec::new(),
            stored: None,
        };
        assert!(environment(&tick, 1).contains(&("LUGE_EVENT_TIME".into(), "5".into())));
    }
}
