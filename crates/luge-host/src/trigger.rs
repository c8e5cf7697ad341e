//! Triggers: functions woken by events instead of (or besides) HTTP
//! routes, from `luge.toml`'s `[[triggers]]` and a Spin manifest's
//! `[[trigger.redis]]` and `[[trigger.cron]]` ([`crate::spin`]).
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

/// Events of one trigger running at once when its config says nothing: a
/// few, so that one slow handler does not hold a channel up, while a
/// flood on the channel is bounded long before the admission places
/// (where every tenant's share is kept anyway).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 8;

/// The most `max_in_flight` a trigger may ask for.
pub const MAX_IN_FLIGHT: usize = 1024;

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
        if let Some((scheme, host, port)) = trigger.source.endpoint()
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

/// A trigger as written: its one source and its bounds. `luge.toml`'s
/// `[[triggers]]` entries name their function; an upload's metadata
/// carries its own as `triggers` ([`crate::FunctionSpec::triggers`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    redis: Option<RedisTable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mqtt: Option<MqttTable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    relative_deadline_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_in_flight: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedisTable {
    address: String,
    channel: String,
}

/// `mqtt = { ... }`: spin-trigger-mqtt's keys, and a client id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MqttTable {
    address: String,
    topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qos: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keep_alive_interval: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
}

impl TriggerSpec {
    /// The trigger `name` for `function` (resolved by the caller); errors
    /// as (field, message).
    pub(crate) fn checked(
        &self,
        name: String,
        function: String,
    ) -> Result<ConfiguredTrigger, (&'static str, TriggerError)> {
        let source = match (&self.cron, &self.redis, &self.mqtt) {
            (Some(expression), None, None) => cron(expression).map_err(|e| ("cron", e))?,
            (None, Some(redis), None) => {
                self::redis(&redis.address, &redis.channel).map_err(|e| ("redis", e))?
            }
            (None, None, Some(table)) => mqtt(
                &MqttSettings {
                    address: &table.address,
                    username: table.username.as_deref(),
                    password: table.password.as_deref(),
                    keep_alive: table.keep_alive_interval.map(Duration::from_secs),
                    client_id: table.client_id.as_deref(),
                },
                &table.topic,
                &table.qos.unwrap_or(1).to_string(),
            )
            .map_err(|e| ("mqtt", e))?,
            _ => return Err(("cron", TriggerError::OneSource)),
        };
        let relative_deadline = match self.relative_deadline_us {
            Some(0) => return Err(("relative_deadline_us", TriggerError::ZeroDeadline)),
            us => us.map(Duration::from_micros),
        };
        let max_in_flight =
            in_flight(&source, self.max_in_flight).map_err(|e| ("max_in_flight", e))?;
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
    #[error(
        "a trigger has one source: cron = \"...\", redis = {{ address, channel }} or mqtt = {{ address, topic }}"
    )]
    OneSource,
    /// A relative deadline of 0.
    #[error("a deadline is at least 1 µs")]
    ZeroDeadline,
    /// A schedule asked to run ticks at once.
    #[error("a cron trigger runs one tick at a time (a tick due while the last runs is skipped)")]
    CronInFlight,
    /// A bound of events in flight out of its range.
    #[error("1 to {MAX_IN_FLIGHT}")]
    InFlight,
}

/// A cron source.
pub(crate) fn cron(expression: &str) -> Result<Source, TriggerError> {
    Ok(Source::Cron(Box::new(luge_trigger::cron::Schedule::parse(
        expression,
    )?)))
}

/// A Redis source.
pub(crate) fn redis(address: &str, channel: &str) -> Result<Source, TriggerError> {
    luge_trigger::redis::check(address, channel)?;
    Ok(Source::Redis {
        address: address.to_owned(),
        channel: channel.to_owned(),
    })
}

/// How a trigger reaches its MQTT broker.
pub(crate) struct MqttSettings<'a> {
    pub(crate) address: &'a str,
    pub(crate) username: Option<&'a str>,
    pub(crate) password: Option<&'a str>,
    pub(crate) keep_alive: Option<Duration>,
    pub(crate) client_id: Option<&'a str>,
}

/// An MQTT source.
pub(crate) fn mqtt(
    settings: &MqttSettings<'_>,
    topic: &str,
    qos: &str,
) -> Result<Source, TriggerError> {
    let broker = luge_trigger::mqtt::Broker::parse(
        settings.address,
        settings.username,
        settings.password,
        settings.keep_alive,
        settings.client_id,
    )?;
    let filter = luge_trigger::mqtt::Filter::new(topic, qos)?;
    Ok(Source::Mqtt(Box::new(luge_trigger::mqtt::Subscription {
        broker,
        filter,
    })))
}

/// A trigger's bound of events in flight: 1 for a schedule, else `asked`
/// (1 to [`MAX_IN_FLIGHT`]) or [`DEFAULT_MAX_IN_FLIGHT`].
pub(crate) fn in_flight(source: &Source, asked: Option<usize>) -> Result<usize, TriggerError> {
    match (source, asked) {
        (Source::Cron(_), None | Some(1)) => Ok(1),
        (Source::Cron(_), Some(_)) => Err(TriggerError::CronInFlight),
        (_, None) => Ok(DEFAULT_MAX_IN_FLIGHT),
        (_, Some(n)) if (1..=MAX_IN_FLIGHT).contains(&n) => Ok(n),
        (_, Some(_)) => Err(TriggerError::InFlight),
    }
}
