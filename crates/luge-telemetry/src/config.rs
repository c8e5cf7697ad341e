//! Telemetry settings: luge.toml's `[telemetry]` table, under the
//! standard OpenTelemetry environment variables (which win: an operator
//! or the OpenTelemetry Operator injects them into a pod without editing
//! its files).

use std::time::Duration;

use serde::Deserialize;

/// luge.toml's `[telemetry]` table. Every key is optional; see
/// [`Settings::resolve`] for what each defaults to.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryTable {
    /// On or off; on by default once an endpoint is known.
    pub enabled: Option<bool>,
    /// The collector's OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: Option<String>,
    /// `grpc`, `http/protobuf` or `http/json` (`OTEL_EXPORTER_OTLP_PROTOCOL`).
    pub protocol: Option<String>,
    /// `service.name` (`OTEL_SERVICE_NAME`).
    pub service_name: Option<String>,
    /// The sampler (`OTEL_TRACES_SAMPLER`).
    pub sampler: Option<String>,
    /// Its argument, the ratio (`OTEL_TRACES_SAMPLER_ARG`).
    pub sampler_arg: Option<f64>,
    /// Whether functions' output lines are exported as log records.
    pub logs: Option<bool>,
    /// Whether metrics are exported.
    pub metrics: Option<bool>,
    /// Function log records one function may emit per second.
    pub max_log_records_per_second: Option<u32>,
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over gRPC (port 4317 by convention).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318 by convention).
    HttpProtobuf,
    /// OTLP over HTTP with JSON bodies (the specification's `http/json`),
    /// which a collector of a few lines can read.
    HttpJson,
}

/// How traces are sampled, as `OTEL_TRACES_SAMPLER` names them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// This fraction of traces, by trace id.
    Ratio(f64),
    /// A sampled parent's decision, else the inner sampler's.
    ParentBased(Root),
}

/// The root decision of [`Sampler::ParentBased`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    /// Every root trace.
    AlwaysOn,
    /// No root trace.
    AlwaysOff,
    /// This fraction of root traces.
    Ratio(f64),
}

/// A setting that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is not one the setting takes.
    #[error("telemetry: {name} = {value:?} is not valid: {expected}")]
    Invalid {
        /// The setting (an environment variable or a `[telemetry]` key).
        name: &'static str,
        /// Its value.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
}

/// Resolved telemetry settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Endpoint from `[telemetry]`, used only when no `OTEL_EXPORTER_OTLP_*`
    /// endpoint variable is set (the exporter reads those itself).
    pub endpoint: Option<String>,
    /// The transport.
    pub protocol: Protocol,
    /// `service.name`.
    pub service_name: String,
    /// The sampler.
    pub sampler: Sampler,
    /// Whether spans are exported (`OTEL_TRACES_EXPORTER` is not `none`).
    pub traces: bool,
    /// Whether function logs are exported.
    pub logs: bool,
    /// Whether metrics are exported.
    pub metrics: bool,
    /// Spans or log records held for export at most (`OTEL_BSP_MAX_QUEUE_SIZE`,
    /// default 2048 as the specification's); past it they are dropped and
    /// counted.
    pub max_queue: usize,
    /// Records per export at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512).
    pub max_batch: usize,
    /// How long a record waits for a fuller batch (`OTEL_BSP_SCHEDULE_DELAY`,
    /// 5000 ms).
    pub schedule_delay: Duration,
    /// One export's time at most (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s); a
    /// collector slower than that loses the batch (counted as failed).
    pub export_timeout: Duration,
    /// How often metrics are exported (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s).
    pub metric_interval: Duration,
    /// Function log records per function per second (default 100: a
    /// function printing in a loop cannot flood the collector or the
    /// queue others' records share).
    pub max_log_records_per_second: u32,
}

/// The OTLP endpoint variables the exporters read themselves.
const ENDPOINT_VARS: [&str; 4] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];

impl Settings {
    /// The settings from `table` and the environment (`env` reads a
    /// variable); `None` when telemetry is off: `OTEL_SDK_DISABLED=true`,
    /// `enabled = false`, or neither an endpoint nor `enabled = true`.
    pub fn resolve(
        table: Option<&TelemetryTable>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, ConfigError> {
        let default = TelemetryTable::default();
        let table = table.unwrap_or(&default);
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let env_endpoint = ENDPOINT_VARS.iter().any(|var| env(var).is_some());
        let on = match table.enabled {
            Some(enabled) => enabled,
            None => env_endpoint || table.endpoint.is_some(),
        };
        if !on {
            return Ok(None);
        }
        let protocol = match env("OTEL_EXPORTER_OTLP_PROTOCOL").or(table.protocol.clone()) {
            None => Protocol::Grpc,
            Some(p) => match p.trim() {
                "grpc" => Protocol::Grpc,
                "http/protobuf" => Protocol::HttpProtobuf,
                "http/json" => Protocol::HttpJson,
                _ => {
                    return Err(ConfigError::Invalid {
                        name: "OTEL_EXPORTER_OTLP_PROTOCOL",
                        value: p,
                        expected: "grpc, http/protobuf or http/json",
                    });
                }
            },
        };
        let arg = match env("OTEL_TRACES_SAMPLER_ARG") {
            Some(v) => Some(v.trim().parse::<f64>().map_err(|_| ConfigError::Invalid {
                name: "OTEL_TRACES_SAMPLER_ARG",
                value: v,
                expected: "a ratio from 0 to 1",
            })?),
            None => table.sampler_arg,
        };
        let ratio = match arg {
            // The specification's default argument.
            None => 1.0,
            Some(r) if (0.0..=1.0).contains(&r) => r,
            Some(r) => {
                return Err(ConfigError::Invalid {
                    name: "OTEL_TRACES_SAMPLER_ARG",
                    value: r.to_string(),
                    expected: "a ratio from 0 to 1",
                });
            }
        };
        let sampler_name = env("OTEL_TRACES_SAMPLER").or(table.sampler.clone());
        let sampler = match sampler_name.as_deref().map(str::trim) {
            // The specification's default.
            None | Some("parentbased_always_on") => Sampler::ParentBased(Root::AlwaysOn),
            Some("always_on") => Sampler::AlwaysOn,
            Some("always_off") => Sampler::AlwaysOff,
            Some("traceidratio") => Sampler::Ratio(ratio),
            Some("parentbased_always_off") => Sampler::ParentBased(Root::AlwaysOff),
            Some("parentbased_traceidratio") => Sampler::ParentBased(Root::Ratio(ratio)),
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: "OTEL_TRACES_SAMPLER",
                    value: other.to_owned(),
                    expected: "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
                });
            }
        };
        let exporter = |var: &'static str| -> Result<bool, ConfigError> {
            match env(var).as_deref().map(str::trim) {
                None | Some("otlp") => Ok(true),
                Some("none") => Ok(false),
                Some(other) => Err(ConfigError::Invalid {
                    name: var,
                    value: other.to_owned(),
                    expected: "otlp or none",
                }),
            }
        };
        let number =
            |var: &'static str, default: u64| -> Result<u64, ConfigError> {
                match env(var) {
                    None => Ok(default),
                    Some(v) => v.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or(
                        ConfigError::Invalid {
                            name: var,
                            value: v,
                            expected: "a positive whole number",
                        },
                    ),
                }
            };
        let max_queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)? as usize;
        Ok(Some(Settings {
            endpoint: table.endpoint.clone().filter(|_| !env_endpoint),
            protocol,
            service_name: env("OTEL_SERVICE_NAME")
                .or(table.service_name.clone())
                .unwrap_or_else(|| "luge".to_owned()),
            sampler,
            traces: exporter("OTEL_TRACES_EXPORTER")?,
            logs: exporter("OTEL_LOGS_EXPORTER")? && table.logs != Some(false),
            metrics: exporter("OTEL_METRICS_EXPORTER")? && table.metrics != Some(false),
            max_queue,
            max_batch: (number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)? as usize).min(max_queue),
            schedule_delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)?),
            export_timeout: Duration::from_millis(number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?),
            metric_interval: Duration::from_millis(number("OTEL_METRIC_EXPORT_INTERVAL", 60_000)?),
            max_log_records_per_second: table.max_log_records_per_second.unwrap_or(100),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn off_unless_an_endpoint_or_enabled() {
        assert!(Settings::resolve(None, env(&[])).unwrap().is_none());
        let on = Settings::resolve(
            None,
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")]),
        )
        .unwrap()
        .unwrap();
        // The exporter reads the variable itself.
        assert_eq!(on.endpoint, None);
        assert_eq!(on.sampler, Sampler::ParentBased(Root::AlwaysOn));
        let table = TelemetryTable {
            endpoint: Some("http://127.0.0.1:9".into()),
            ..TelemetryTable::default()
        };
        assert!(Settings::resolve(Some(&table), env(&[])).unwrap().is_some());
        assert!(
            Settings::resolve(Some(&table), env(&[("OTEL_SDK_DISABLED", "true")]))
                .unwrap()
                .is_none()
        );
        let off = TelemetryTable {
            enabled: Some(false),
            ..table
        };
        assert!(Settings::resolve(Some(&off), env(&[])).unwrap().is_none());
    }

    #[test]
    fn the_environment_wins_and_bad_values_are_named() {
        let table = TelemetryTable {
            enabled: Some(true),
            sampler: Some("always_on".into()),
            service_name: Some("from-file".into()),
            ..TelemetryTable::default()
        };
        let s = Settings::resolve(
            Some(&table),
            env(&[
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.sampler, Sampler::ParentBased(Root::Ratio(0.01)));
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name, "from-file");
        for (var, value) in [
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/xml"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ] {
            let e = Settings::resolve(Some(&table), env(&[(var, value)])).unwrap_err();
            assert!(e.to_string().contains(var), "{e}");
        }
    }
}
