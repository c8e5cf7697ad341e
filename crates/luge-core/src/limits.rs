//! Resource limits of one sandbox, and the operator policy that bounds them.
//!
//! An action may ask for less than the operator's default, never more than
//! the operator's maximum: asking for more is refused at init with a message
//! that names both numbers, rather than silently clamped.

use std::time::Duration;

/// Limits enforced on every invocation of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest linear memory the sandbox may grow to.
    pub memory_bytes: u64,
    /// Wall-clock time one invocation may run before it is stopped.
    pub timeout: Duration,
    /// Fuel (instructions, roughly) per invocation, where the engine meters.
    pub fuel: Option<u64>,
    /// Cap on captured stdout and on captured stderr, each. Stdout past it
    /// ends the run ([`Termination::OutputTooLarge`](crate::Termination));
    /// stderr past it is cut. [`LimitPolicy::apply`] keeps it within the
    /// memory limit, so what a sandbox holds outside its linear memory is
    /// bounded by the same number.
    pub max_output_bytes: usize,
}

impl Limits {
    /// Bytes an engine captures per stream: one past the cap, so that
    /// output over the cap can be told from output exactly at it.
    pub fn capture_bytes(&self) -> usize {
        self.max_output_bytes.saturating_add(1)
    }
}

/// OpenWhisk's default action memory (256 MiB).
pub const DEFAULT_MEMORY_BYTES: u64 = 256 << 20;
/// OpenWhisk's default action timeout (60 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// OpenWhisk's largest configurable action memory (512 MiB).
pub const MAX_MEMORY_BYTES: u64 = 512 << 20;
/// OpenWhisk's largest configurable action timeout (5 min).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Sandboxes that may exist at once (`--max-sandboxes`): one for each of
/// the 1000 containers `--max-containers` allows by default, so a full
/// executor never waits for a slot. Wasmtime's pool reserves (but does not
/// commit) a linear memory's address range per slot: 1000 slots of 4 GiB +
/// guard fit easily in x86-64's 128 TiB, and are shrunk at start where the
/// address space is smaller.
pub const DEFAULT_SANDBOXES: u32 = 1000;
/// Memory of ended sandboxes that may stay resident between sandboxes
/// (`--resident-budget-mb`): 256 MiB, a tenth of a small server's memory; a
/// sandbox's memory above budget/32 is returned to the kernel as it ends.
pub const DEFAULT_RESIDENT_BUDGET_BYTES: u64 = 256 << 20;
/// Captured output per stream. OpenWhisk keeps 10 MB of logs; the result of
/// a 1 MiB echo must also fit, so allow a comfortable margin above both.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 32 << 20;

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            timeout: DEFAULT_TIMEOUT,
            fuel: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// Limits an action asks for in its annotations (`limits.*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestedLimits {
    /// `limits.memory_mb`.
    pub memory_mb: Option<u64>,
    /// `limits.timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// `limits.fuel`.
    pub fuel: Option<u64>,
}

/// The operator's defaults and maxima.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitPolicy {
    /// Applied when an action asks for nothing.
    pub default: Limits,
    /// The most any action may ask for.
    pub max: Limits,
}

impl Default for LimitPolicy {
    fn default() -> Self {
        Self {
            default: Limits::default(),
            max: Limits {
                memory_bytes: MAX_MEMORY_BYTES,
                timeout: MAX_TIMEOUT,
                fuel: None,
                max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            },
        }
    }
}

/// A requested limit above the operator's maximum, or a nonsensical one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    /// Asked for more than allowed.
    #[error("{what} {requested} exceeds the operator maximum {max}")]
    AboveMaximum {
        /// Annotation key.
        what: &'static str,
        /// Requested value.
        requested: u64,
        /// Operator maximum.
        max: u64,
    },
    /// Zero is not a limit.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
}

impl LimitPolicy {
    /// The limits for an action asking for `requested`.
    pub fn apply(&self, requested: &RequestedLimits) -> Result<Limits, LimitError> {
        let mut limits = self.default;
        if let Some(mb) = requested.memory_mb {
            let max_mb = self.max.memory_bytes >> 20;
            check("limits.memory_mb", mb, max_mb)?;
            limits.memory_bytes = mb << 20;
        }
        // Captured output counts like memory: a 1 MiB function cannot hold
        // 32 MiB of stdout in the host.
        limits.max_output_bytes = limits
            .max_output_bytes
            .min(usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX));
        if let Some(ms) = requested.timeout_ms {
            let max_ms = self.max.timeout.as_millis() as u64;
            check("limits.timeout_ms", ms, max_ms)?;
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(fuel) = requested.fuel {
            if let Some(max) = self.max.fuel {
                check("limits.fuel", fuel, max)?;
            } else if fuel == 0 {
                return Err(LimitError::Zero("limits.fuel"));
            }
            limits.fuel = Some(fuel);
        }
        Ok(limits)
    }
}

fn check(what: &'static str, requested: u64, max: u64) -> Result<(), LimitError> {
    if requested == 0 {
        return Err(LimitError::Zero(what));
    }
    if requested > max {
        return Err(LimitError::AboveMaximum {
            what,
            requested,
            max,
        });
    }
    Ok(())
}

/// Whether a memory growth to `desired` bytes that failed was refused by
/// Luge's memory limit (`limit` bytes) rather than by the module's own
/// declared maximum (`declared`, bytes): only the first makes the trap
/// that follows [`Termination::OutOfMemory`](crate::Termination). Written
/// once because the engines disagreed (found by luge-diff): Wasmer and
/// WAMR counted a growth past a module's own maximum as Luge's refusal,
/// Wasmtime did not. A memory without a declared maximum has the 4 GiB
/// of a 32-bit memory (Wasmer and WAMR take no other kind).
pub fn refused_by_limit(desired: u64, declared: Option<u64>, limit: u64) -> bool {
    const MEMORY32_BYTES: u64 = 1 << 32;
    desired > limit && desired <= declared.unwrap_or(MEMORY32_BYTES)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_growth_the_module_allows_is_refused_by_the_limit() {
        use super::refused_by_limit;
        assert!(refused_by_limit(9, None, 8));
        assert!(refused_by_limit(9, Some(16), 8));
        assert!(
            !refused_by_limit(17, Some(16), 8),
            "the module's own maximum"
        );
        assert!(!refused_by_limit(8, None, 8));
        assert!(!refused_by_limit((1 << 32) + 1, None, 8), "past 4 GiB");
    }

    use super::*;

    #[test]
    fn defaults_apply_without_requests() {
        let policy = LimitPolicy::default();
        assert_eq!(
            policy.apply(&RequestedLimits::default()).unwrap(),
            Limits::default()
        );
    }

    #[test]
    fn requests_may_lower_and_not_exceed() {
        let policy = LimitPolicy::default();
        let lowered = policy
            .apply(&RequestedLimits {
                memory_mb: Some(64),
                timeout_ms: Some(500),
                fuel: Some(1000),
            })
            .unwrap();
        assert_eq!(lowered.memory_bytes, 64 << 20);
        assert_eq!(lowered.timeout, Duration::from_millis(500));
        assert_eq!(lowered.fuel, Some(1000));
        let err = policy
            .apply(&RequestedLimits {
                memory_mb: Some(4096),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "limits.memory_mb 4096 exceeds the operator maximum 512"
        );
        assert!(
            policy
                .apply(&RequestedLimits {
                    timeout_ms: Some(0),
                    ..Default::default()
                })
                .is_err()
        );
    }
}
