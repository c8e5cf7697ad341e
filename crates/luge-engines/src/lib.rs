//! The one place where an engine is built from its name.
//!
//! `luge` (the executor), `luge-precompile` and the benchmarks all ask this
//! crate for a [`WasmRuntime`]: an [`EngineKind`] (what `--engine` names)
//! and [`EngineSettings`] (the few knobs the operator sets). What each
//! engine does with them, and every default, is decided here once, so an
//! artifact the precompiler makes is one the executor loads, and a bench
//! measures the engine the executor runs.
//!
//! Each engine is compiled in by a cargo feature (`wasmtime`, the default;
//! `wasmer`; `wamr`); asking for one that is not compiled in is an error
//! that names the feature.

#![deny(missing_docs)]

use std::sync::Arc;

use clap::ValueEnum;
use luge_core::{EngineError, WasmRuntime};

/// Wasm engines, by the names `--engine` and `luge.toml` use.
#[derive(Debug, Clone, Copy, ValueEnum, serde::Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// Wasmtime (default): AoT artifacts, pooling allocator, epoch limits.
    Wasmtime,
    /// Wasmer (Cranelift): serialized native modules, runs to completion.
    Wasmer,
    /// Wasmer compiling with Singlepass: faster compiles from plain Wasm,
    /// slower code. Loads the same artifacts as `wasmer`.
    WasmerSinglepass,
    /// WAMR, the small-footprint interpreter.
    Wamr,
}

impl EngineKind {
    /// The name `--engine` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wasmtime => "wasmtime",
            Self::Wasmer => "wasmer",
            Self::WasmerSinglepass => "wasmer-singlepass",
            Self::Wamr => "wamr",
        }
    }

    /// The kind `name` stands for (`wasmtime`, `wasmer`,
    /// `wasmer-singlepass`, `wamr`; case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::from_str(name, true).ok()
    }

    /// Whether this binary has the engine compiled in.
    pub fn is_built_in(self) -> bool {
        match self {
            Self::Wasmtime => cfg!(feature = "wasmtime"),
            Self::Wasmer | Self::WasmerSinglepass => cfg!(feature = "wasmer"),
            Self::Wamr => cfg!(feature = "wamr"),
        }
    }

    /// The engines this binary has compiled in.
    pub fn built_in() -> Vec<Self> {
        Self::value_variants()
            .iter()
            .copied()
            .filter(|k| k.is_built_in())
            .collect()
    }
}

/// What the operator sets for an engine. Engines ignore what they have no
/// use for (WAMR has no pool); [`build`] refuses what one cannot honour
/// (fuel on an engine that does not meter it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// Compile for this target triple instead of the host
    /// (`luge-precompile --target`). Such an engine compiles but cannot run.
    pub target: Option<String>,
    /// Sandboxes that may exist at once (Wasmtime's pool slots, shrunk to
    /// fit the address space); `None` compiles only: no pool, no address
    /// space reserved (the precompiler).
    pub sandboxes: Option<u32>,
    /// The largest linear memory any sandbox may have (the operator's
    /// `--max-memory-mb`).
    pub max_memory_bytes: u64,
    /// Meter fuel, so that `limits.fuel` can be enforced (Wasmtime; changes
    /// the compiled code, so artifacts record it).
    pub fuel: bool,
    /// Resident memory the pool may keep warm between sandboxes (Wasmtime).
    pub resident_budget_bytes: u64,
}

pub use luge_core::limits::{DEFAULT_RESIDENT_BUDGET_BYTES, DEFAULT_SANDBOXES};

impl Default for EngineSettings {
    /// A runnable engine with the executor's defaults: [`DEFAULT_SANDBOXES`],
    /// the operator maximum memory [`luge_core::limits::MAX_MEMORY_BYTES`], no fuel
    /// (epochs bound time, far cheaper), [`DEFAULT_RESIDENT_BUDGET_BYTES`].
    fn default() -> Self {
        Self {
            target: None,
            sandboxes: Some(DEFAULT_SANDBOXES),
            max_memory_bytes: luge_core::limits::MAX_MEMORY_BYTES,
            fuel: false,
            resident_budget_bytes: DEFAULT_RESIDENT_BUDGET_BYTES,
        }
    }
}

impl EngineSettings {
    /// Settings for compiling only (no sandboxes), for `target` or the host.
    pub fn compile_only(target: Option<String>, fuel: bool) -> Self {
        Self {
            target,
            sandboxes: None,
            fuel,
            ..Self::default()
        }
    }
}

/// Why no engine was built.
#[derive(Debug, thiserror::Error)]
pub enum FactoryError {
    /// The engine is not compiled into this binary.
    #[error(
        "engine {name} is not compiled into this binary (build with cargo feature {feature:?})"
    )]
    NotBuiltIn {
        /// The engine asked for.
        name: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// Fuel metering asked of an engine without it.
    #[error("--fuel is Wasmtime's: {0} does not meter fuel")]
    NoFuel(&'static str),
    /// The engine refused its configuration.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The snapshotter could not be built.
    #[error(transparent)]
    Snapshotter(#[from] luge_registry::PreinitError),
}

/// What makes pre-initialized snapshots (Wizer) of modules that export
/// `wizer.initialize`, their initialisation bounded by `limits` (time,
/// memory): for [`luge_registry::ModuleRegistry::with_preinitializer`]. `None`
/// in a build without Wasmtime, which runs the initialisations.
pub fn preinitializer(
    limits: &luge_core::Limits,
) -> Result<Option<Arc<dyn luge_registry::Preinitializer>>, FactoryError> {
    #[cfg(feature = "wasmtime")]
    {
        let snapshotter = luge_snapshot::Snapshotter::new(limits.timeout, limits.memory_bytes)?;
        Ok(Some(Arc::new(snapshotter)))
    }
    #[cfg(not(feature = "wasmtime"))]
    {
        let _ = limits;
        Ok(None)
    }
}

/// The runtime `kind` stands for, configured by `settings`.
pub fn build(
    kind: EngineKind,
    settings: &EngineSettings,
) -> Result<Arc<dyn WasmRuntime>, FactoryError> {
    if settings.fuel && kind != EngineKind::Wasmtime {
        return Err(FactoryError::NoFuel(kind.name()));
    }
    match kind {
        #[cfg(feature = "wasmtime")]
        EngineKind::Wasmtime => {
            let defaults = luge_wasmtime::WasmtimeConfig::default();
            let config = luge_wasmtime::WasmtimeConfig {
                target: settings.target.clone(),
                pooling: settings.sandboxes.is_some(),
                max_sandboxes: settings.sandboxes.unwrap_or(DEFAULT_SANDBOXES),
                max_memory_bytes: settings.max_memory_bytes,
                fuel: settings.fuel,
                resident_budget_bytes: settings.resident_budget_bytes,
                ..defaults
            };
            Ok(Arc::new(luge_wasmtime::WasmtimeRuntime::new(&config)?))
        }
        #[cfg(feature = "wasmer")]
        EngineKind::Wasmer | EngineKind::WasmerSinglepass => {
            let config = luge_wasmer::WasmerConfig {
                target: settings.target.clone(),
                compiler: if kind == EngineKind::Wasmer {
                    luge_wasmer::WasmerCompiler::Cranelift
                } else {
                    luge_wasmer::WasmerCompiler::Singlepass
                },
            };
            Ok(Arc::new(luge_wasmer::WasmerRuntime::new(&config)?))
        }
        #[cfg(feature = "wamr")]
        EngineKind::Wamr => {
            let config = luge_wamr::WamrConfig {
                target: settings.target.clone(),
                ..Default::default()
            };
            Ok(Arc::new(luge_wamr::WamrRuntime::new(&config)?))
        }
        #[allow(unreachable_patterns)]
        other => Err(FactoryError::NotBuiltIn {
            name: other.name(),
            feature: match other {
                EngineKind::Wasmtime => "wasmtime",
                EngineKind::Wasmer | EngineKind::WasmerSinglepass => "wasmer",
                EngineKind::Wamr => "wamr",
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in EngineKind::value_variants() {
            assert_eq!(EngineKind::from_name(kind.name()), Some(*kind));
        }
        assert_eq!(
            EngineKind::from_name("WASMTIME"),
            Some(EngineKind::Wasmtime)
        );
        assert_eq!(EngineKind::from_name("v8"), None);
    }

    #[test]
    fn fuel_is_refused_where_it_is_not_metered() {
        let settings = EngineSettings::compile_only(None, true);
        let err = build(EngineKind::Wamr, &settings).err().expect("refused");
        assert!(err.to_string().contains("fuel"), "{err}");
    }
}
