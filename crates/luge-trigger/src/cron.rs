//! Cron schedules, as spin-trigger-cron takes them: six or seven fields
//! with seconds first (`sec min hour day-of-month month day-of-week
//! [year]`), in UTC.
//!
//! A tick starts its trigger's function if the trigger has room (the
//! executor gives a cron trigger one event in flight): a run still going
//! at the next tick makes that tick skipped, counted by the sink, never
//! two runs at once. A tick the clock passed while the process was busy
//! or down is not replayed: the source waits for the next one due after
//! now.

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use luge_core::event::{Event, EventKind};

use crate::{
    Endpoint, EventSource, Kind, Settings, Sink, Source, SourceError, SpinError, SpinKey,
    SpinTrigger, Triggered,
};

/// A parsed cron expression.
#[derive(Debug, Clone)]
pub struct Schedule {
    expression: String,
    schedule: cron::Schedule,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
    }
}

impl Eq for Schedule {}

impl Schedule {
    /// Parses `expression`.
    pub fn parse(expression: &str) -> Result<Self, SourceError> {
        let schedule = cron::Schedule::from_str(expression).map_err(|e| SourceError::Cron {
            expression: expression.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            expression: expression.to_owned(),
            schedule,
        })
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The first tick strictly after `after`, if there is one.
    pub fn next_after(&self, after: &DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.after(after).next()
    }
}

impl Settings for Schedule {
    fn kind(&self) -> &'static dyn Kind {
        &Cron
    }

    fn endpoint(&self) -> Option<Endpoint> {
        None
    }

    fn at(
        &self,
        _ip: std::net::IpAddr,
        _owner: &str,
        _grants: &luge_core::capabilities::AllowedHosts,
    ) -> Source {
        Source::new(self.clone())
    }
}

/// A Spin manifest's `[[trigger.cron]]` (its `component` and `id` aside).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpinEntry {
    #[serde(default)]
    cron_expression: Option<String>,
}

/// Cron schedules: spin-trigger-cron's `cron` trigger.
pub struct Cron;

impl Kind for Cron {
    crate::kind::identity!("cron", one string);

    fn configured(&self, settings: toml::Value) -> Result<Source, SourceError> {
        let expression: String = crate::table(settings)?;
        Ok(Source::new(Schedule::parse(&expression)?))
    }

    fn spin_source(&self, trigger: SpinTrigger<'_>) -> Result<Source, SpinError> {
        let entry: SpinEntry = trigger.read()?;
        let expression = entry.cron_expression.ok_or_else(|| {
            SpinError::new(SpinKey::Entry, "a cron trigger has a cron_expression")
        })?;
        Schedule::parse(&expression)
            .map(Source::new)
            .map_err(|e| SpinError::new(SpinKey::Entry, e))
    }

    /// One: a tick due while the last one runs is skipped, never run
    /// beside it.
    fn max_in_flight(&self, asked: Option<usize>) -> Result<usize, SourceError> {
        match asked {
            None | Some(1) => Ok(1),
            Some(_) => Err(SourceError::CronInFlight),
        }
    }

    fn sources(&self, triggers: Vec<Triggered>) -> Vec<Box<dyn EventSource>> {
        crate::one_each(triggers, CronSource::new)
    }
}

/// `timestamp` (Unix seconds) as RFC 3339 (`2026-01-01T00:00:02Z`), if
/// it is a time chrono can hold.
pub fn rfc3339(timestamp: u64) -> Option<String> {
    let seconds = i64::try_from(timestamp).ok()?;
    let time = DateTime::<Utc>::from_timestamp(seconds, 0)?;
    Some(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// The clock of one cron trigger.
pub struct CronSource {
    schedule: Schedule,
    sink: Arc<dyn Sink>,
}

impl CronSource {
    /// A clock for `schedule`, its ticks going to `sink`.
    pub fn new(schedule: Schedule, sink: Arc<dyn Sink>) -> Self {
        Self { schedule, sink }
    }
}

impl EventSource for CronSource {
    fn describe(&self) -> String {
        format!("cron {:?}", self.schedule.expression)
    }

    fn run(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let mut last = Utc::now();
            loop {
                // The next tick after the last one, unless the clock is
                // already past it: missed ticks are not replayed.
                let now = Utc::now();
                let from = if last < now { now } else { last };
                let Some(tick) = self.schedule.next_after(&from) else {
                    tracing::info!(schedule = %self.schedule.expression, "the schedule has no more ticks");
                    return;
                };
                let wait = (tick - Utc::now()).to_std().unwrap_or_default();
                tokio::time::sleep(wait).await;
                last = tick;
                let event = Event {
                    kind: EventKind::Cron {
                        timestamp: u64::try_from(tick.timestamp()).unwrap_or(0),
                    },
                    payload: Vec::new(),
                    stored: None,
                };
                crate::deliver(&self.sink, event);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_the_first_field() {
        let schedule = Schedule::parse("*/2 * * * * *").unwrap();
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:01Z")
            .unwrap()
            .with_timezone(&Utc);
        let next = schedule.next_after(&start).unwrap();
        assert_eq!(next.to_rfc3339(), "2026-01-01T00:00:02+00:00");
        assert_eq!(
            schedule.next_after(&next).unwrap().to_rfc3339(),
            "2026-01-01T00:00:04+00:00"
        );
    }

    #[test]
    fn ticks_are_written_as_rfc3339() {
        assert_eq!(
            rfc3339(1_767_225_602).as_deref(),
            Some("2026-01-01T00:00:02Z")
        );
    }

    #[test]
    fn a_five_field_expression_is_refused_with_the_grammar() {
        let error = Schedule::parse("* * * * *").unwrap_err();
        assert!(error.to_string().contains("seconds first"), "{error}");
        assert!(Schedule::parse("not cron").is_err());
    }
}
