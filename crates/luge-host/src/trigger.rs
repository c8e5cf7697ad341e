//! Triggers: functions woken by events instead of (or besides) HTTP
//! routes, from `luge.toml`'s `[[triggers]]`, an upload's `triggers` and
//! a Spin manifest's `[[trigger.KIND]]` ([`crate::spin`]). What a kind's
//! settings hold, and how they are checked, is the kind's own
//! (`luge_trigger::Kind`); this module adds what every trigger has: the
//! function it wakes, its deadline and its bound of events in flight.
//!
//! ```toml
//! [[triggers]]
//! function = "/fib"                  # a [[routes]] entry: its path or name
//! cron = "*/10 * * * * *"            # seconds first
//!
//! [[triggers]]
//! function = "resize"
//! redis = { address = "redis://127.0.0.1:6379", channel = "images" }
//! relative_deadline_us = 500000      # each event's deadline
//! max_in_flight = 4                  # events of this trigger running at once
//!
//! [[triggers]]
//! function = "ingest"
//! mqtt = { address = "mqtt://127.0.0.1:1883", topic = "sensors/+/temp", qos = 1 }
//! ```
//!
//! A function with an export for its kind of event (a Spin component) gets
//! the event there; any other (a core module, a command) gets the
//! payload on stdin and the metadata in its environment
//! (`luge_core::event::environment`); an HTTP handler gets a POST.

use std::time::Duration;

use luge_trigger::Source;
use serde::{Deserialize, Serialize};

pub use luge_trigger::{DEFAULT_MAX_IN_FLIGHT, MAX_IN_FLIGHT};

/// The most triggers one config or manifest may have.
pub const MAX_TRIGGERS: usize = 256;

/// A trigger, checked, naming the function it wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredTrigger {
    /// Its name in logs and metrics: Spin's `id`, else where it is written
    /// (`trigger.redis[0]`, `triggers[2]`).
    pub name: String,
    /// The function's name.
    pub function: String,
    /// Where its events come from.
    pub source: Source,
    /// Each event's deadline, from when it arrived (`None`: the
    /// function's).
    pub relative_deadline: Option<Duration>,
    /// Events running at once, at most: for a cron trigger always 1 (a
    /// tick is skipped while the last one runs).
    pub max_in_flight: usize,
}

/// A function served on triggers only (a Spin component no HTTP trigger
/// names), loaded by [`crate::FunctionHost::add_triggered`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggeredFunction {
    /// The module file.
    pub module: std::path::PathBuf,
    /// Everything else about it; its `name` is set.
    pub spec: crate::FunctionSpec,
}

/// The most triggers one upload may carry.
pub const MAX_UPLOAD_TRIGGERS: usize = 16;

/// The triggers an uploaded `function` carries (its spec's `triggers`),
/// each named `NAME.triggers[I]`: checked, and a broker's server granted
/// by the function's `allowed_outbound_hosts` with its scheme.
pub fn uploaded(function: &crate::Function) -> Result<Vec<ConfiguredTrigger>, crate::SpecError> {
    let triggers = &function.spec.triggers;
    if triggers.len() > MAX_UPLOAD_TRIGGERS {
        return Err(crate::SpecError::Refused(format!(
            "triggers: at most {MAX_UPLOAD_TRIGGERS}"
        )));
    }
    let grants = &function.action.capabilities.outbound;
    let mut checked = Vec::with_capacity(triggers.len());
    for (index, spec) in triggers.iter().enumerate() {
        let name = format!("{}.triggers[{index}]", function.name);
        let trigger =
            spec.checked(name.clone(), function.name.clone())
                .map_err(|(field, message)| {
                    crate::SpecError::Refused(format!("triggers[{index}].{field}: {message}"))
                })?;
        if let Some(why) = trigger.source.kind().refused_to_tenants() {
            return Err(crate::SpecError::Refused(format!(
                "triggers[{index}]: {why}"
            )));
        }
        if let Some(luge_trigger::Endpoint { scheme, host, port }) = trigger.source.endpoint()
            && !grants.allows(scheme, &host, port)
        {
            return Err(crate::SpecError::Refused(format!(
                "triggers[{index}]: {scheme}://{host}:{port} is not granted (allowed_outbound_hosts)"
            )));
        }
        checked.push(trigger);
    }
    Ok(checked)
}

/// A `[[triggers]]` entry of `luge.toml` as the function it names and
/// the trigger; errors as (field, message). (Not serde's `flatten`,
/// which would let unknown keys through.)
pub(crate) fn table(
    mut table: toml::Table,
) -> Result<(String, TriggerSpec), (&'static str, String)> {
    let function = match table.remove("function") {
        Some(toml::Value::String(function)) => function,
        Some(_) => return Err(("function", "a function's path or name".to_owned())),
        None => return Err(("function", "every trigger names its function".to_owned())),
    };
    let spec = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ("", e.message().trim().to_owned()))?;
    Ok((function, spec))
}

/// A trigger as written: its one source (the key of its kind, as
/// [`luge_trigger::KINDS`] names them, and that kind's settings) and its
/// bounds. `luge.toml`'s `[[triggers]]` entries name their function; an
/// upload's metadata carries its own as `triggers`
/// ([`crate::FunctionSpec::triggers`]). Which kinds it names and what
/// their settings hold is each kind's to check ([`TriggerSpec::checked`]);
/// any other key is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "toml::Table", into = "toml::Table")]
pub struct TriggerSpec {
    /// Each key that names a kind, and its settings as written.
    sources: Vec<(&'static str, toml::Value)>,
    relative_deadline_us: Option<u64>,
    max_in_flight: Option<usize>,
}

// Equality is toml::Value's, structural: a float compares as floats do
// only in settings no kind takes (every kind's are strings and integers),
// which `checked` refuses.
impl Eq for TriggerSpec {}

impl TryFrom<toml::Table> for TriggerSpec {
    type Error = TriggerError;

    fn try_from(table: toml::Table) -> Result<Self, TriggerError> {
        let mut spec = Self::default();
        for (key, value) in table {
            match key.as_str() {
                "relative_deadline_us" => {
                    spec.relative_deadline_us = Some(luge_trigger::table(value)?);
                }
                "max_in_flight" => spec.max_in_flight = Some(luge_trigger::table(value)?),
                name => match luge_trigger::kind(name) {
                    Some(kind) => spec.sources.push((kind.name(), value)),
                    None => return Err(TriggerError::UnknownKey(name.to_owned())),
                },
            }
        }
        Ok(spec)
    }
}

impl From<TriggerSpec> for toml::Table {
    fn from(spec: TriggerSpec) -> Self {
        let mut table: toml::Table = spec
            .sources
            .into_iter()
            .map(|(name, settings)| (name.to_owned(), settings))
            .collect();
        if let Some(us) = spec.relative_deadline_us {
            table.insert(
                "relative_deadline_us".into(),
                toml::Value::Integer(i64::try_from(us).unwrap_or(i64::MAX)),
            );
        }
        if let Some(n) = spec.max_in_flight {
            table.insert(
                "max_in_flight".into(),
                toml::Value::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
            );
        }
        table
    }
}

impl TriggerSpec {
    /// The trigger `name` for `function` (resolved by the caller); errors
    /// as (field, message).
    pub(crate) fn checked(
        &self,
        name: String,
        function: String,
    ) -> Result<ConfiguredTrigger, (&'static str, TriggerError)> {
        let [(kind, settings)] = self.sources.as_slice() else {
            let field = self.sources.get(1).map_or("", |(kind, _)| *kind);
            return Err((field, TriggerError::OneSource));
        };
        let kind = luge_trigger::kind(kind).ok_or((*kind, TriggerError::OneSource))?;
        let source = kind
            .configured(settings.clone())
            .map_err(|e| (kind.name(), e.into()))?;
        let relative_deadline = match self.relative_deadline_us {
            Some(0) => return Err(("relative_deadline_us", TriggerError::ZeroDeadline)),
            us => us.map(Duration::from_micros),
        };
        let max_in_flight = kind
            .max_in_flight(self.max_in_flight)
            .map_err(|e| ("max_in_flight", e.into()))?;
        Ok(ConfiguredTrigger {
            name,
            function,
            source,
            relative_deadline,
            max_in_flight,
        })
    }
}

/// Why a trigger's settings are refused.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// Its source's settings (an expression, an address, a topic...).
    #[error(transparent)]
    Source(#[from] luge_trigger::SourceError),
    /// No source, or more than one.
    #[error("a trigger has one source: {}", one_of_each_kind())]
    OneSource,
    /// A relative deadline of 0.
    #[error("a deadline is at least 1 µs")]
    ZeroDeadline,
    /// A key neither a kind nor a bound (serde's words for it).
    #[error("unknown field `{0}`")]
    UnknownKey(String),
}

/// Each kind's settings, as the error that asks for one of them says.
fn one_of_each_kind() -> String {
    let shapes: Vec<String> = luge_trigger::KINDS
        .iter()
        .map(|kind| kind.shape())
        .collect();
    match shapes.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upload's `triggers` come as JSON from a tenant and are kept in
    /// the function store as JSON: each is read as one kind's settings and
    /// its bounds, written back the same, and anything else is refused.
    #[test]
    fn an_uploads_triggers_round_trip_and_refuse_what_no_kind_takes() {
        let written = serde_json::json!({
            "redis": { "address": "redis://127.0.0.1:6379", "channel": "jobs" },
            "relative_deadline_us": 500000,
            "max_in_flight": 4,
        });
        let spec: TriggerSpec = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), written);
        let trigger = spec.checked("t".into(), "f".into()).unwrap();
        assert_eq!(trigger.source.kind_name(), "redis");
        assert_eq!(trigger.max_in_flight, 4);
        assert_eq!(trigger.relative_deadline, Some(Duration::from_millis(500)));

        for (json, refused) in [
            (serde_json::json!({ "queue": 1 }), "unknown field `queue`"),
            (
                serde_json::json!({ "max_in_flight": "all" }),
                "invalid type",
            ),
            (serde_json::json!({ "max_in_flight": -1 }), "invalid value"),
        ] {
            let error = serde_json::from_value::<TriggerSpec>(json).unwrap_err();
            assert!(error.to_string().contains(refused), "{error}");
        }
        for (json, field, refused) in [
            (serde_json::json!({}), "", "one source"),
            (
                serde_json::json!({ "cron": "* * * * * *", "redis": { "address": "redis://x", "channel": "c" } }),
                "redis",
                "one source",
            ),
            (
                serde_json::json!({ "redis": { "address": "redis://x", "channel": "c", "extra": 1 } }),
                "redis",
                "unknown field `extra`",
            ),
            (
                serde_json::json!({ "redis": { "address": "redis://x", "channel": "c" }, "max_in_flight": 100000 }),
                "max_in_flight",
                "1 to 1024",
            ),
            (
                serde_json::json!({ "mqtt": { "address": "mqtt://x", "topic": "a/#/b" } }),
                "mqtt",
                "topic filter",
            ),
        ] {
            let spec: TriggerSpec = serde_json::from_value(json).unwrap();
            let (at, error) = spec.checked("t".into(), "f".into()).unwrap_err();
            assert_eq!(at, field, "{error}");
            assert!(error.to_string().contains(refused), "{error}");
        }
    }
}
