//! The executor's options: one type that is both the command-line flags
//! (`--max-pending 64`) and the keys of `luge.toml`'s `[server]` table
//! (`max_pending = 64`), so a key cannot exist without its flag, or be
//! forgotten when the two are merged.
//!
//! Every option is optional in both places: a flag given wins, then the
//! config's key, then the default named in the flag's help (applied where
//! the option is used, when the settings are built). Relative paths in a config are
//! relative to the config's directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;

use crate::frontend::FrontEndKind;
pub use luge_engines::EngineKind;

/// Scheduling policies (see luge-sched).
#[derive(Debug, Clone, Copy, clap::ValueEnum, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyArg {
    /// First come, first served (round robin when preempting).
    Fifo,
    /// Earliest deadline first.
    Edf,
    /// Shortest remaining slack first.
    Srsf,
}

/// Resolves a relative path of a config against its directory; nothing
/// else has a path to resolve.
trait Resolve {
    fn resolve(&mut self, _base: &Path) {}
}

impl<T: Resolve> Resolve for Option<T> {
    fn resolve(&mut self, base: &Path) {
        if let Some(value) = self {
            value.resolve(base);
        }
    }
}

impl Resolve for PathBuf {
    fn resolve(&mut self, base: &Path) {
        *self = base.join(&*self);
    }
}

impl Resolve for bool {}
impl Resolve for u32 {}
impl Resolve for u64 {}
impl Resolve for usize {}
impl Resolve for f64 {}
impl Resolve for SocketAddr {}
impl Resolve for EngineKind {}
impl Resolve for PolicyArg {}
impl Resolve for FrontEndKind {}
impl Resolve for Vec<TenantWeight> {}

/// One tenant's weight in sharing the admission places (`NAME=WEIGHT`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct TenantWeight {
    /// A function route's name, or an OpenWhisk namespace.
    pub tenant: String,
    /// Relative to the default weight, 1; at least 1.
    pub weight: u32,
}

impl TryFrom<String> for TenantWeight {
    type Error = OptionError;

    fn try_from(text: String) -> Result<Self, OptionError> {
        tenant_weight(&text)
    }
}

/// A flag's (or `[server]` key's) value refused; clap's and serde's error
/// is its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// A tenant weight without its `=`.
    #[error("{0:?} is not NAME=WEIGHT")]
    NotNameWeight(String),
    /// A weight out of its range.
    #[error("the weight of {0:?} must be a whole number from 1 to 1000")]
    Weight(String),
    /// A tenant weight with no name.
    #[error("{0:?} names no tenant")]
    NoTenant(String),
    /// A percentile out of its range.
    #[error("{0} is not a percentile between 0 and 100")]
    Percentile(String),
}

/// Parses `NAME=WEIGHT`.
fn tenant_weight(text: &str) -> Result<TenantWeight, OptionError> {
    let (tenant, weight) = text
        .split_once('=')
        .ok_or_else(|| OptionError::NotNameWeight(text.to_owned()))?;
    let weight: u32 = weight
        .parse()
        .ok()
        .filter(|w| (1..=1000).contains(w))
        .ok_or_else(|| OptionError::Weight(tenant.to_owned()))?;
    if tenant.is_empty() {
        return Err(OptionError::NoTenant(text.to_owned()));
    }
    Ok(TenantWeight {
        tenant: tenant.to_owned(),
        weight,
    })
}

/// Declares [`Options`] and what is derived from its one list of fields.
macro_rules! options {
    (
        $(#[$struct_meta:meta])*
        pub struct Options {
            $(
                $(#[$meta:meta])*
                pub $field:ident: Option<$ty:ty>,
            )*
        }
    ) => {
        $(#[$struct_meta])*
        pub struct Options {
            $(
                $(#[$meta])*
                pub $field: Option<$ty>,
            )*
        }

        impl Options {
            /// Every option's name: its `[server]` key, and with `-` for
            /// `_` its flag (the three booleans read `--no-preempt`,
            /// `--no-pin` and `--fuel`).
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Each option set here, else `fallback`'s (the command line
            /// over a config).
            pub fn or(self, fallback: Self) -> Self {
                Self {
                    $($field: self.$field.or(fallback.$field),)*
                }
            }
        }

        impl luge_host::ServerTable for Options {
            fn resolve_paths(&mut self, base: &Path) {
                $(Resolve::resolve(&mut self.$field, base);)*
            }
        }
    };
}

options! {
    /// Options of every mode: the engine, scheduling, limits, connections;
    /// and of `luge serve`, where they are also `[server]` keys.
    #[derive(Debug, Clone, Default, PartialEq, Args, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Options {
        /// Address to listen on [default: 127.0.0.1:8080].
        #[arg(long)]
        pub listen: Option<SocketAddr>,
        /// Worker threads running sandboxes, one per core by default.
        #[arg(long)]
        pub workers: Option<usize>,
        /// Order of each worker's run queue [default: edf].
        #[arg(long, value_enum)]
        pub policy: Option<PolicyArg>,
        /// Time slice after which a running sandbox yields, µs [default: 5000].
        #[arg(long)]
        pub quantum_us: Option<u64>,
        /// Run each sandbox until it finishes or waits on I/O (`preempt =
        /// false` in a config).
        #[arg(long = "no-preempt", num_args = 0, default_missing_value = "false")]
        pub preempt: Option<bool>,
        /// Execution-time-aware sharding (with --long-workers): functions
        /// whose expected execution time (the SRSF percentile of their
        /// runs) exceeds this many µs run only on the first --long-workers
        /// workers; short ones run anywhere [default: off].
        #[arg(long)]
        pub long_above_us: Option<u64>,
        /// Workers, from the first, that run long functions under sharding.
        #[arg(long)]
        pub long_workers: Option<usize>,
        /// Do not pin workers to cores (`pin = false` in a config).
        #[arg(long = "no-pin", num_args = 0, default_missing_value = "false")]
        pub pin: Option<bool>,
        /// Percentile of a function's recent execution times that SRSF
        /// expects [default: 90].
        #[arg(long, value_parser = percentile)]
        pub srsf_percentile: Option<f64>,
        /// How much more urgent, µs, a job queued behind a busy worker must
        /// be than the head of another worker's own queue for that worker
        /// to take it; an idle worker takes any (0: strict EDF across
        /// workers) [default: 1000].
        #[arg(long)]
        pub steal_margin_us: Option<u64>,
        /// Wasm engine [default: wasmtime]. Given twice, the last one
        /// counts (so a wrapper's default can be overridden).
        #[arg(long, value_enum, overrides_with = "engine")]
        pub engine: Option<EngineKind>,
        /// Root directory for `wasi.dirs` grants; without it, grants are
        /// refused.
        #[arg(long)]
        pub fs_root: Option<PathBuf>,
        /// PEM file of CA certificates that functions' outgoing HTTPS
        /// trusts besides the platform's roots (an operator's private CA).
        #[arg(long)]
        pub ca_file: Option<PathBuf>,
        /// Spin's runtime config file: client TLS, blocked networks,
        /// SQLite databases, key-value stores and variable providers
        /// (the book's "Runtime config reference"); other sections are
        /// refused by name.
        #[arg(long)]
        pub runtime_config_file: Option<PathBuf>,
        /// Where compiled modules are cached (and the generated key kept
        /// when no key is given) [default: $XDG_CACHE_HOME/luge or
        /// ~/.cache/luge].
        #[arg(long)]
        pub cache_dir: Option<PathBuf>,
        /// File holding the operator's artifact key secret (or set LUGE_KEY).
        #[arg(long)]
        pub key_file: Option<PathBuf>,
        /// Default memory limit per sandbox, MiB [default: 256, OpenWhisk's].
        #[arg(long)]
        pub memory_mb: Option<u64>,
        /// Largest memory limit an action may ask for, MiB [default: 512].
        #[arg(long)]
        pub max_memory_mb: Option<u64>,
        /// Default time limit per invocation, ms [default: 60000].
        #[arg(long)]
        pub timeout_ms: Option<u64>,
        /// Largest time limit an action may ask for, ms [default: 300000].
        #[arg(long)]
        pub max_timeout_ms: Option<u64>,
        /// Meter fuel so `limits.fuel` can be enforced (slower; `fuel =
        /// true` in a config).
        #[arg(long, num_args = 0, default_missing_value = "true")]
        pub fuel: Option<bool>,
        /// Largest request body, MiB (an init or upload carries the whole
        /// module) [default: 64].
        #[arg(long)]
        pub max_body_mb: Option<usize>,
        /// Sandboxes that may exist at once (pool slots) [default: 1000,
        /// fewer where the address space holds fewer]. On Wasmtime,
        /// components of the async ABI (WASI 0.3, Spin 4) have a pool of
        /// their own, reserved when the first is loaded.
        #[arg(long)]
        pub max_sandboxes: Option<u32>,
        /// Memory of ended sandboxes Wasmtime may keep resident while it
        /// batches their release to the OS, MiB [default: 256].
        #[arg(long)]
        pub resident_budget_mb: Option<u64>,
        /// Invocations admitted at once; more get 503 with Retry-After
        /// [default: --max-sandboxes, since each running one holds a slot;
        /// more than that is refused at start].
        #[arg(long)]
        pub max_pending: Option<usize>,
        /// Admission places one request's call tree (its calls, their
        /// calls, a chain's stages) may hold at once; past it a call
        /// answers busy [default: a quarter of --max-pending].
        #[arg(long)]
        pub max_tree_places: Option<usize>,
        /// A tenant's weight in sharing the admission places, `NAME=WEIGHT`
        /// (a function route's name, or an OpenWhisk namespace), repeated
        /// for each; others weigh 1. In a config: `tenant_weights =
        /// ["reports=3"]`.
        #[arg(long, value_parser = tenant_weight)]
        pub tenant_weights: Option<Vec<TenantWeight>>,
        /// Open client connections at once; one more is answered 503 and
        /// closed [default: the descriptor limit less 256, at most 10000].
        #[arg(long)]
        pub max_connections: Option<usize>,
        /// Time a connection may take to send a request's headers, ms; also
        /// how long a keep-alive connection may sit idle [default: 10000].
        #[arg(long)]
        pub header_timeout_ms: Option<u64>,
        /// Fuse a call (run the callee on its caller's worker, when the
        /// caller waits) if the callee calls nothing itself and its
        /// measured p90 execution time is at most this, µs. Saves the
        /// scheduler's round trip; the callees of one caller then run one
        /// after another, so keep it to short callees [default: 0, never:
        /// engines that park a waiting caller schedule every callee, in
        /// parallel].
        #[arg(long)]
        pub fuse_calls_under_us: Option<u64>,
        /// Where connections are served: `workers` (each worker serves the
        /// connections it accepts and runs their requests itself) or
        /// `threads` (tokio threads beside the workers hand each request to
        /// one) [default: workers where sandboxes yield at quanta (Wasmtime
        /// with preemption), else threads].
        #[arg(long, value_enum)]
        pub front_end: Option<FrontEndKind>,
        /// `luge serve`: directory of uploaded functions [default:
        /// $XDG_DATA_HOME/luge/functions once an operator token is set].
        #[arg(long)]
        pub store: Option<PathBuf>,
        /// `luge serve`: file holding the operator token of the management
        /// API (or set LUGE_TOKEN); without one, the management API is off.
        #[arg(long)]
        pub token_file: Option<PathBuf>,
        /// `luge serve`: containers (`/{id}/init`) hosted at once; one more
        /// is a 503 [default: 4096].
        #[arg(long)]
        pub max_containers: Option<usize>,
        /// `luge serve`: Sledge route spec (JSON): each tenant's routes on
        /// the tenant's port.
        #[arg(long)]
        pub sledge_spec: Option<PathBuf>,
        /// `luge serve`: let routes that hold grants (directories, calls,
        /// state, outgoing hosts) opt into instance reuse (`reuse = N`),
        /// which gives up per-request isolation [default: refused].
        #[arg(long, num_args = 0, default_missing_value = "true")]
        pub allow_reuse_with_grants: Option<bool>,
        /// `luge serve`: answer every request with its id in
        /// `x-request-id` (the id logs and traces carry) [default: on,
        /// but off when serving a Spin app (`--spin`): Spin adds no such
        /// header, and its apps and conformance suite see every header].
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        pub request_id_header: Option<bool>,
    }
}

impl Options {
    /// The options `luge proxy` (one action container) does not take,
    /// given anyway: an error naming them.
    pub fn refuse_serve_only(&self) -> anyhow::Result<()> {
        let given: Vec<&str> = [
            ("--store", self.store.is_some()),
            ("--token-file", self.token_file.is_some()),
            ("--max-containers", self.max_containers.is_some()),
            ("--sledge-spec", self.sledge_spec.is_some()),
            (
                "--allow-reuse-with-grants",
                self.allow_reuse_with_grants.is_some(),
            ),
            ("--request-id-header", self.request_id_header.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if given.is_empty() {
            Ok(())
        } else {
            anyhow::bail!(
                "{} only for `luge serve`: `luge proxy` is one action container",
                given.join(", ")
            )
        }
    }
}

fn percentile(text: &str) -> Result<f64, OptionError> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(OptionError::Percentile(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::{CommandFactory, Parser, ValueEnum};

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        options: Options,
    }

    fn flags(args: &[&str]) -> Options {
        let mut all = vec!["luge"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
            .map(|c| c.options)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn server(text: &str) -> Options {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The names of the fields a type's `Deserialize` reads, as serde
    /// gives them to a deserializer.
    fn serde_fields<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        struct Fields(Vec<&'static str>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl serde::de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Stop
            }
        }
        impl<'de> serde::Deserializer<'de> for &mut Fields {
            type Error = Stop;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0.extend_from_slice(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        let mut fields = Fields(Vec::new());
        let _ = T::deserialize(&mut fields);
        fields.0
    }

    #[test]
    fn every_flag_has_its_key_and_every_key_its_flag() {
        let keys: BTreeSet<&str> = Options::KEYS.iter().copied().collect();
        let command = Cli::command();
        let flags: BTreeSet<&str> = command
            .get_arguments()
            .filter(|a| a.get_long().is_some())
            .map(|a| a.get_id().as_str())
            .collect();
        let table: BTreeSet<&str> = serde_fields::<Options>().into_iter().collect();
        assert_eq!(flags, keys, "flags and options");
        assert_eq!(table, keys, "[server] keys and options");
        // Each flag is the key's name with dashes, but for the booleans
        // that read as what they turn off (or on).
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            let long = arg.get_long().unwrap_or_default();
            let expected = match id {
                "preempt" => "no-preempt".to_owned(),
                "pin" => "no-pin".to_owned(),
                other => other.replace('_', "-"),
            };
            assert_eq!(long, expected, "the flag of `{id}`");
        }
    }

    #[test]
    fn flags_and_keys_mean_the_same() {
        assert_eq!(flags(&[]), Options::default());
        let given = flags(&[
            "--no-preempt",
            "--no-pin",
            "--fuel",
            "--engine",
            "wasmer-singlepass",
            "--policy",
            "srsf",
            "--front-end",
            "threads",
            "--max-pending",
            "7",
            "--fs-root",
            "/srv",
            "--tenant-weights",
            "reports=3",
            "--tenant-weights",
            "guest=1",
        ]);
        let table = server(
            r#"
            preempt = false
            pin = false
            fuel = true
            engine = "wasmer-singlepass"
            policy = "srsf"
            front_end = "threads"
            max_pending = 7
            fs_root = "/srv"
            tenant_weights = ["reports=3", "guest=1"]
            "#,
        );
        assert_eq!(given, table);
        assert_eq!(given.preempt, Some(false));
        assert_eq!(given.fuel, Some(true));
        // Every name of every enum reads the same in both.
        for engine in EngineKind::value_variants() {
            let name = engine.to_possible_value().unwrap();
            let name = name.get_name();
            assert_eq!(flags(&["--engine", name]).engine, Some(*engine));
            assert_eq!(server(&format!("engine = {name:?}")).engine, Some(*engine));
        }
        for policy in PolicyArg::value_variants() {
            let name = policy.to_possible_value().unwrap();
            let name = name.get_name();
            assert_eq!(server(&format!("policy = {name:?}")).policy, Some(*policy));
        }
        for front_end in FrontEndKind::value_variants() {
            let name = front_end.to_possible_value().unwrap();
            let name = name.get_name();
            assert_eq!(
                server(&format!("front_end = {name:?}")).front_end,
                Some(*front_end)
            );
        }
    }

    #[test]
    fn the_command_line_wins_and_config_paths_are_its_directorys() {
        use luge_host::ServerTable;
        let mut table = server(
            "workers = 3\nquantum_us = 100\nstore = \"functions\"\nkey_file = \"/etc/key\"\n",
        );
        table.resolve_paths(Path::new("/etc/luge"));
        let merged = flags(&["--workers", "1"]).or(table);
        assert_eq!(merged.workers, Some(1));
        assert_eq!(merged.quantum_us, Some(100));
        assert_eq!(merged.store, Some(PathBuf::from("/etc/luge/functions")));
        assert_eq!(merged.key_file, Some(PathBuf::from("/etc/key")));
        assert!(toml::from_str::<Options>("threads = 4").is_err());
        assert!(toml::from_str::<Options>("engine = \"v8\"").is_err());
        // A weight is NAME=WEIGHT, 1 to 1000, in both.
        for bad in ["reports", "=3", "reports=0", "reports=1001", "reports=x"] {
            assert!(tenant_weight(bad).is_err(), "{bad}");
            assert!(toml::from_str::<Options>(&format!("tenant_weights = [{bad:?}]")).is_err());
        }
        assert!(flags(&[]).refuse_serve_only().is_ok());
        let err = flags(&["--store", "x"]).refuse_serve_only().unwrap_err();
        assert!(err.to_string().contains("--store"), "{err}");
    }
}
