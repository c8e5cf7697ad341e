//! Function chains: one route whose request runs through several
//! functions in turn, each one's stdout the next one's stdin (Sledge's
//! module chains, OpenWhisk's sequences).
//!
//! A chain is configured (`[[chains]]` in `luge.toml`) over the config's
//! own routes and resolved once at start, so a chain never changes under a
//! request and never reaches an uploaded function, whose code can be
//! replaced at any time. The chain has one end-to-end deadline: each stage
//! is scheduled with the chain's absolute deadline, so under EDF a chain
//! late in its budget runs ahead of fresher work, as Sledge's DAG
//! scheduler does.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::function::Function;

/// The most stages a chain may have. Each stage is a whole invocation with
/// its own sandbox; longer pipelines belong in one function.
pub const MAX_STAGES: usize = 16;

/// A chain as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSpec {
    /// HTTP path the chain is served on.
    pub path: String,
    /// Paths of configured routes, in the order they run.
    pub stages: Vec<String>,
    /// End-to-end deadline relative to the request's arrival, µs. Default:
    /// the sum of the stages' own relative deadlines (each one's time limit
    /// where it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_deadline_us: Option<u64>,
}

/// A chain ready to be invoked: its stages resolved to functions.
#[derive(Debug)]
pub struct Chain {
    /// The path it is served on, also its name in logs.
    pub path: String,
    /// The functions, in order; at least one.
    pub stages: Vec<Arc<Function>>,
    /// End-to-end deadline relative to arrival.
    pub relative_deadline: Duration,
}

/// A chain stage that names no function route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stage {stage:?} is not a function route")]
pub struct UnknownStage {
    /// The stage's path as the chain names it.
    pub stage: String,
}

impl Chain {
    /// Resolves `spec` with `lookup` (route path to function), or names the
    /// first stage that does not resolve.
    pub fn resolve(
        spec: &ChainSpec,
        lookup: impl Fn(&str) -> Option<Arc<Function>>,
    ) -> Result<Self, UnknownStage> {
        let stages = spec
            .stages
            .iter()
            .map(|path| {
                lookup(path).ok_or_else(|| UnknownStage {
                    stage: path.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let relative_deadline = match spec.relative_deadline_us {
            Some(us) => Duration::from_micros(us),
            None => stages
                .iter()
                .map(|f| f.action.sched.relative_deadline_or_default())
                .sum(),
        };
        Ok(Self {
            path: spec.path.clone(),
            stages,
            relative_deadline,
        })
    }

    /// `Content-Type` of a successful response: the last stage's.
    pub fn content_type(&self) -> &str {
        self.stages
            .last()
            .map_or(crate::spec::DEFAULT_CONTENT_TYPE, |f| f.content_type())
    }
}
