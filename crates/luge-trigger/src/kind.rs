//! One trait a trigger kind implements, and the source every kind's
//! settings become.
//!
//! A kind ([`Kind`]) owns everything about itself: its name (Spin's
//! trigger type and its key in luge.toml), how its settings are written
//! in luge.toml and in a Spin manifest and how they are checked, the
//! server it connects to (for the grant check), how many of its events may
//! run at once, and how its triggers share connections when they run.
//! The rest of Luge names no kind: a new one is a module of this crate and
//! its row in [`crate::KINDS`].

use std::any::Any;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use luge_core::capabilities::AllowedHosts;
use luge_core::capabilities::variables::TemplateError;

use crate::{EventSource, Sink, SourceError};

/// Events of one trigger running at once when its config says nothing: a
/// few, so that one slow handler does not hold a channel up, while a
/// flood on the channel is bounded long before the admission places
/// (where every tenant's share is kept anyway).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 8;

/// The most `max_in_flight` a trigger may ask for.
pub const MAX_IN_FLIGHT: usize = 1024;

/// A trigger as its kind runs it: its source, and the sink its events go
/// to.
pub type Triggered = (Source, Arc<dyn Sink>);

/// A kind's identity, written first in its `impl Kind`: its name
/// ([`Kind::name`]), the keys of the table its luge.toml settings are
/// read as ([`Kind::keys`], from that reader's type) or `one string` for
/// a kind whose setting is a string, and, after `events:`, the kind of
/// events it produces where they are another kind's ([`Kind::events`]).
macro_rules! identity {
    ($name:literal, one string $(, events: $events:literal)?) => {
        $crate::kind::identity!(@named $name $(, $events)?);
        fn keys(&self) -> Option<&'static [&'static str]> {
            None
        }
    };
    ($name:literal, $table:ty $(, events: $events:literal)?) => {
        $crate::kind::identity!(@named $name $(, $events)?);
        fn keys(&self) -> Option<&'static [&'static str]> {
            Some(luge_core::serde_keys::of::<$table>())
        }
    };
    (@named $name:literal $(, $events:literal)?) => {
        fn name(&self) -> &'static str {
            $name
        }
        $(
            fn events(&self) -> &'static str {
                $events
            }
        )?
    };
}
pub(crate) use identity;

/// One kind of trigger.
pub trait Kind: Sync + 'static {
    /// Its name: Spin's trigger type (`[[trigger.NAME]]`) and the key of
    /// its settings in luge.toml's `[[triggers]]`.
    fn name(&self) -> &'static str;

    /// The kind of events it produces, as a function's event export names
    /// the trigger it takes ([`luge_core::event::EventKind::trigger`]):
    /// its own name unless its messages are another kind's (a Redis
    /// stream's are Redis messages, which a Spin `inbound-redis` handler
    /// takes).
    fn events(&self) -> &'static str {
        self.name()
    }

    /// The keys of its settings' table, as its luge.toml reader reads
    /// them ([`luge_core::serde_keys::of`] of that reader's type); `None`
    /// for a kind whose setting is one string (a schedule).
    fn keys(&self) -> Option<&'static [&'static str]>;

    /// What its settings look like, for the error that names every kind
    /// and the book (`redis = { address, channel }`), made from [`Kind::keys`].
    fn shape(&self) -> String {
        match self.keys() {
            Some(keys) => format!("{} = {{ {} }}", self.name(), keys.join(", ")),
            None => format!("{} = \"...\"", self.name()),
        }
    }

    /// Its source from luge.toml's `[[triggers]]` entry (or an upload's
    /// `triggers`): the value of its key, unknown keys refused.
    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError>;

    /// Its source from a Spin manifest's `[[trigger.NAME]]` entry. By
    /// default, its luge.toml settings ([`Kind::configured`]) with the
    /// app's variables filled in where [`Kind::spin_templated`] says.
    fn spin_source(&self, trigger: SpinTrigger<'_>) -> Result<Source, SpinError> {
        let keys = trigger.templated(self.spin_templated())?;
        self.configured(toml::Value::Table(keys))
            .map_err(|e| SpinError::new(SpinKey::Entry, e))
    }

    /// The keys of its Spin entry whose strings may hold the app's
    /// variables (`{{ name }}`), for the default [`Kind::spin_source`].
    fn spin_templated(&self) -> &'static [&'static str] {
        &[]
    }

    /// Why a tenant's upload may not carry a trigger of this kind, if it
    /// may not. Most kinds may: their server is checked under the
    /// function's grants. A kind whose client a hostile server could make
    /// hold unbounded resources in Luge is the operator's alone
    /// (luge.toml, a Spin app).
    fn refused_to_tenants(&self) -> Option<&'static str> {
        None
    }

    /// How many of one trigger's events may run at once: `asked` (1 to
    /// [`MAX_IN_FLIGHT`]), else [`DEFAULT_MAX_IN_FLIGHT`].
    fn max_in_flight(&self, asked: Option<usize>) -> Result<usize, SourceError> {
        match asked {
            None => Ok(DEFAULT_MAX_IN_FLIGHT),
            Some(n) if (1..=MAX_IN_FLIGHT).contains(&n) => Ok(n),
            Some(_) => Err(SourceError::InFlight),
        }
    }

    /// The running sources of `triggers`, every one of this kind, each
    /// with the sink its events go to: connections shared where the kind
    /// shares them (one per server).
    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>>;
}

/// Fills in the `{{ name }}` templates of a Spin app's variables in a
/// manifest value ([`Kind::spin_source`]).
pub type Expand<'a> = dyn Fn(&str) -> Result<String, TemplateError> + 'a;

/// A Spin manifest's `[[trigger.NAME]]` entry, as [`Kind::spin_source`]
/// reads it.
pub struct SpinTrigger<'a> {
    /// The entry's keys but `component` and `id`.
    pub keys: toml::Table,
    /// The app's `[application.trigger.NAME]` table (empty if none).
    pub app: &'a toml::Table,
    /// Fills in the templates of the app's variables a value may hold.
    pub expand: &'a Expand<'a>,
}

impl SpinTrigger<'_> {
    /// The entry's keys as a kind's `T` (unknown keys refused), a refusal
    /// at the entry.
    pub fn read<T: serde::de::DeserializeOwned>(&self) -> Result<T, SpinError> {
        table(toml::Value::Table(self.keys.clone())).map_err(|m| SpinError::new(SpinKey::Entry, m))
    }

    /// The entry's keys with the app's variables filled in in the
    /// strings of `templated`; a refusal names the key.
    pub fn templated(&self, templated: &[&'static str]) -> Result<toml::Table, SpinError> {
        let mut keys = self.keys.clone();
        for &key in templated {
            if let Some(toml::Value::String(value)) = keys.get_mut(key) {
                *value = self.expanded(key, value)?;
            }
        }
        Ok(keys)
    }

    /// `value`, the entry's `key`, with the app's variables filled in; a
    /// refusal names the key.
    pub fn expanded(&self, key: &'static str, value: &str) -> Result<String, SpinError> {
        (self.expand)(value).map_err(|m| SpinError::new(SpinKey::Trigger(key), m))
    }

    /// The app's `[application.trigger.NAME]` string `key`, if set, with
    /// the app's variables filled in; a refusal names the key.
    pub fn app_setting(&self, key: &'static str) -> Result<Option<String>, SpinError> {
        match self.app.get(key) {
            None => Ok(None),
            Some(toml::Value::String(value)) => (self.expand)(value)
                .map(Some)
                .map_err(|m| SpinError::new(SpinKey::App(key), m)),
            Some(_) => Err(SpinError::new(SpinKey::App(key), "a string")),
        }
    }
}

/// A Spin manifest's trigger settings refused: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SpinError {
    /// Where: a key of the trigger's entry, a key of the app's
    /// `[application.trigger.NAME]`, or the entry as a whole.
    pub at: SpinKey,
    /// Why.
    pub message: String,
}

/// Where in a Spin manifest a trigger's settings were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinKey {
    /// The trigger's entry as a whole.
    Entry,
    /// A key of the trigger's entry.
    Trigger(&'static str),
    /// A key of the app's `[application.trigger.NAME]`.
    App(&'static str),
}

impl SpinError {
    /// A refusal at `at`.
    pub fn new(at: SpinKey, message: impl fmt::Display) -> Self {
        Self {
            at,
            message: message.to_string(),
        }
    }
}

/// The server a trigger's source connects to, as a grant names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The grant's scheme (`redis`, `mqtt`).
    pub scheme: &'static str,
    /// The server's host, as written.
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// Equality of a kind's settings with settings of any kind (false for
/// another kind's), for [`Source`]'s `PartialEq`; every `PartialEq`
/// settings type has it.
pub trait SameSettings {
    /// Whether `other` is the same settings.
    fn same(&self, other: &dyn Any) -> bool;
}

impl<T: PartialEq + Any> SameSettings for T {
    fn same(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<Self>() == Some(self)
    }
}

/// One kind's settings, checked: what a [`Source`] holds.
pub trait Settings: fmt::Debug + Send + Sync + Any + SameSettings {
    /// Its kind.
    fn kind(&self) -> &'static dyn Kind;

    /// The server it connects to; `None` for a schedule.
    fn endpoint(&self) -> Option<Endpoint>;

    /// The same settings connecting to `ip` instead of the host's name (an
    /// address the caller checked under `grants`, the function's), a
    /// session it keeps owned by `owner`. A kind whose client dials more
    /// servers than the one named (a Kafka cluster's brokers) checks each
    /// under `grants` too.
    fn at(&self, ip: IpAddr, owner: &str, grants: &AllowedHosts) -> Source;
}

/// The [`Settings`] of `$settings`, a kind `$kind`'s, whose server is its
/// `address` field (an address type with `endpoint()` and `at(ip)`): its
/// endpoint is the address's, and it is pinned to a checked IP by
/// replacing the address's host, the rest kept.
macro_rules! addressed_settings {
    ($settings:ty, $kind:expr) => {
        impl $crate::Settings for $settings {
            fn kind(&self) -> &'static dyn $crate::Kind {
                &$kind
            }

            fn endpoint(&self) -> Option<$crate::Endpoint> {
                Some(self.address.endpoint())
            }

            fn at(
                &self,
                ip: std::net::IpAddr,
                _owner: &str,
                _grants: &luge_core::capabilities::AllowedHosts,
            ) -> $crate::Source {
                $crate::Source::new(Self {
                    address: self.address.at(ip),
                    ..self.clone()
                })
            }
        }
    };
}
pub(crate) use addressed_settings;

/// Where a trigger's events come from: its kind's settings, checked.
#[derive(Clone)]
pub struct Source(Arc<dyn Settings>);

impl Source {
    /// The source of `settings`.
    pub fn new(settings: impl Settings) -> Self {
        Self(Arc::new(settings))
    }

    /// Its kind.
    pub fn kind(&self) -> &'static dyn Kind {
        self.0.kind()
    }

    /// Its kind's name, as Spin's manifest names the trigger type.
    pub fn kind_name(&self) -> &'static str {
        self.0.kind().name()
    }

    /// The server it connects to; `None` for a schedule.
    pub fn endpoint(&self) -> Option<Endpoint> {
        self.0.endpoint()
    }

    /// The same source at `ip` ([`Settings::at`]).
    pub fn at(&self, ip: IpAddr, owner: &str, grants: &AllowedHosts) -> Self {
        self.0.at(ip, owner, grants)
    }

    /// Its settings, if they are a `T`.
    pub fn settings<T: Settings>(&self) -> Option<&T> {
        let any: &dyn Any = &*self.0;
        any.downcast_ref()
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for Source {
    fn eq(&self, other: &Self) -> bool {
        let other: &dyn Any = &*other.0;
        self.0.same(other)
    }
}

impl Eq for Source {}

/// Each of `triggers`' settings as its kind's `T`, with its sink (a kind's
/// [`Kind::sources`] is given only its own).
pub fn own<T: Settings + Clone>(
    triggers: Vec<Triggered>,
) -> impl Iterator<Item = (T, Arc<dyn Sink>)> {
    triggers
        .into_iter()
        .filter_map(|(source, sink)| Some((source.settings::<T>()?.clone(), sink)))
}

/// One source per trigger of `triggers` that is this kind's `T`, made by
/// `source` (for a kind whose triggers share nothing).
pub fn one_each<T, S>(
    triggers: Vec<Triggered>,
    source: impl Fn(T, Arc<dyn Sink>) -> S,
) -> Vec<Box<dyn EventSource>>
where
    T: Settings + Clone,
    S: EventSource + 'static,
{
    own::<T>(triggers)
        .map(|(settings, sink)| Box::new(source(settings, sink)) as Box<dyn EventSource>)
        .collect()
}

/// A kind's settings deserialized from `value`, its refusal one line.
pub fn table<T: serde::de::DeserializeOwned>(value: toml::Value) -> Result<T, SourceError> {
    value
        .try_into()
        .map_err(|e: toml::de::Error| SourceError::Settings(e.message().trim().to_owned()))
}

/// `kind`'s source from luge.toml `text` (its settings' table), for the
/// kinds' unit tests.
#[cfg(test)]
pub(crate) fn configured(kind: &dyn Kind, text: &str) -> Result<Source, SourceError> {
    kind.configured(toml::from_str(text).expect("TOML"))
}
