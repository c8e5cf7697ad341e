//! Differential execution across Luge's engines.
//!
//! Generated modules that follow the function ABI run on every engine
//! compiled in (Wasmtime, Wasmer with Cranelift and with Singlepass, WAMR),
//! each through the path the executor takes (a [`ModuleRegistry`] load,
//! then [`LoadedModule::run`]); their stdout and how each run ended must
//! agree. Two generators feed it: [`program`], structured programs aimed at
//! what engines implement differently (trapping arithmetic, memory edges,
//! growth past limits, bulk memory, indirect calls, deep recursion, time
//! limits), and [`smith`], random modules from `wasm-smith`.
//!
//! A disagreement is a bug to fix, or an engine difference listed in
//! [`DIFFERENCES`] with its reason; [`judge`] tells which.

#![deny(missing_docs)]

pub mod program;
pub mod smith;

use std::sync::Arc;
use std::time::Duration;

use luge_core::{Action, Invocation, LoadedModule, Termination};
use luge_engines::{EngineKind, EngineSettings};
use luge_registry::{ArtifactKey, ModuleCode, ModuleRegistry};
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// The time limit of a program that never stops.
pub const SPIN_TIMEOUT: Duration = Duration::from_millis(200);
/// The time limit of every other case: far past what any needs on the
/// slowest engine, so that only a case that never stops meets it.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Why the engines could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// An engine could not be built.
    #[error("engine {engine}: {source}")]
    Engine {
        /// Its name.
        engine: &'static str,
        /// Why.
        #[source]
        source: luge_engines::FactoryError,
    },
    /// The artifact key could not be made.
    #[error("artifact key: {0}")]
    Key(#[from] luge_registry::ArtifactError),
}

/// The engines compared, each behind its own registry.
pub struct Engines {
    engines: Vec<(EngineKind, ModuleRegistry)>,
}

impl Engines {
    /// Builds `kinds` with the executor's defaults (a small pool: cases run
    /// one at a time per worker).
    pub fn new(kinds: &[EngineKind]) -> Result<Self, DiffError> {
        let settings = EngineSettings {
            sandboxes: Some(64),
            ..EngineSettings::default()
        };
        let key = ArtifactKey::from_secret(b"luge-diff: artifacts never leave the process")?;
        let engines = kinds
            .iter()
            .map(|&kind| {
                let runtime =
                    luge_engines::build(kind, &settings).map_err(|source| DiffError::Engine {
                        engine: kind.name(),
                        source,
                    })?;
                Ok((kind, ModuleRegistry::new(runtime, key.clone(), None)))
            })
            .collect::<Result<_, DiffError>>()?;
        Ok(Self { engines })
    }

    /// The engines, in the order runs are reported.
    pub fn kinds(&self) -> Vec<EngineKind> {
        self.engines.iter().map(|(k, _)| *k).collect()
    }
}

/// Which generator made a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// [`program`].
    Structured,
    /// [`smith`].
    Smith,
}

/// One module, its input and its time limit.
#[derive(Debug, Clone)]
pub struct Case {
    /// Which generator.
    pub source: Source,
    /// The case's number under its seed (`luge-diff --seed S --only N`
    /// makes it again).
    pub index: u64,
    /// The module.
    pub wasm: Vec<u8>,
    /// Its stdin.
    pub stdin: Vec<u8>,
    /// Its time limit.
    pub timeout: Duration,
}

/// Case `index` of `seed`: one in four from wasm-smith, the rest
/// structured. `None` where wasm-smith could make nothing of its input.
pub fn case(seed: u64, index: u64) -> Option<Case> {
    let mut rng = SmallRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    if index % 4 == 3 {
        return Some(Case {
            source: Source::Smith,
            index,
            wasm: smith::generate(&mut rng)?,
            stdin: Vec::new(),
            timeout: TIMEOUT,
        });
    }
    let p = program::generate(&mut rng);
    Some(Case {
        source: Source::Structured,
        index,
        wasm: p.wasm,
        stdin: p.stdin,
        timeout: if p.spins { SPIN_TIMEOUT } else { TIMEOUT },
    })
}

/// How a run ended, in terms every engine can be held to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// The engine would not take the module.
    Refused,
    /// The sandbox could not start.
    Failed,
    /// Returned, or `proc_exit` with this status.
    Exited(i32),
    /// Trapped.
    Trap(TrapKind),
    /// Stopped at its time limit.
    TimedOut,
    /// A growth past the memory limit was refused and the run failed.
    OutOfMemory,
    /// Wrote more than its output cap.
    OutputTooLarge,
    /// Ran out of fuel (not metered here).
    OutOfFuel,
}

/// The trap, from the engine's message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrapKind {
    /// `unreachable`.
    Unreachable,
    /// A memory access, or a bulk memory range, out of bounds.
    MemoryOutOfBounds,
    /// A table index out of bounds (`call_indirect`, `table.*`).
    TableOutOfBounds,
    /// `call_indirect` through a null slot.
    NullElement,
    /// `call_indirect` to a function of another type.
    IndirectCallType,
    /// Integer division or remainder by zero.
    DivideByZero,
    /// `i64.div_s(MIN, -1)` and the like.
    IntegerOverflow,
    /// A float that does not fit the integer it is truncated to.
    BadConversion,
    /// The call stack ran out.
    StackOverflow,
    /// A null reference used (`ref.as_non_null`, `call_ref`).
    NullReference,
    /// A message none of the above matches (kept in the run's detail).
    Other,
}

impl TrapKind {
    /// The kind an engine's trap message names.
    pub fn from_message(message: &str) -> Self {
        let m = message.lines().next().unwrap_or("").to_ascii_lowercase();
        // The first row the message matches, in this order (a table's
        // "out of bounds" before memory's, "null" after "uninitialized
        // element"): a row matches when it holds every phrase of one of
        // the row's alternatives.
        let rows: [(&[&[&str]], Self); 10] = [
            (&[&["unreachable"]], Self::Unreachable),
            (
                &[&["divide by zero"], &["division by zero"]],
                Self::DivideByZero,
            ),
            (&[&["integer overflow"]], Self::IntegerOverflow),
            (&[&["invalid conversion"]], Self::BadConversion),
            (
                &[&["stack overflow"], &["stack exhausted"]],
                Self::StackOverflow,
            ),
            (&[&["type mismatch"]], Self::IndirectCallType),
            (&[&["uninitialized element"]], Self::NullElement),
            (
                &[&["undefined element"], &["table", "out of bounds"]],
                Self::TableOutOfBounds,
            ),
            (&[&["null"]], Self::NullReference),
            (
                &[&["out of bounds memory"], &["memory access out of bounds"]],
                Self::MemoryOutOfBounds,
            ),
        ];
        rows.into_iter()
            .find(|(alternatives, _)| {
                alternatives
                    .iter()
                    .any(|phrases| phrases.iter().all(|p| m.contains(p)))
            })
            .map_or(Self::Other, |(_, kind)| kind)
    }
}

/// One engine's run of a case.
#[derive(Debug, Clone)]
pub struct Run {
    /// The engine.
    pub engine: EngineKind,
    /// How it ended.
    pub class: Class,
    /// What it wrote to stdout.
    pub stdout: Vec<u8>,
    /// The engine's own words: a trap or refusal message.
    pub detail: String,
}

/// Runs `case` on every engine, one after the other.
pub fn run_case(engines: &Engines, case: &Case) -> Vec<Run> {
    engines
        .engines
        .iter()
        .map(|(kind, registry)| run_on(*kind, registry, case))
        .collect()
}

fn run_on(engine: EngineKind, registry: &ModuleRegistry, case: &Case) -> Run {
    let module: Arc<dyn LoadedModule> = match registry.load(&ModuleCode::Wasm(case.wasm.clone())) {
        Ok(module) => module,
        Err(e) => {
            return Run {
                engine,
                class: Class::Refused,
                stdout: Vec::new(),
                detail: short(&luge_core::error_line(&e)),
            };
        }
    };
    let mut action = Action::command("diff");
    action.limits.timeout = case.timeout;
    action.limits.memory_bytes = program::MEMORY_LIMIT;
    let outcome = module.run(Invocation::new(Arc::new(action), case.stdin.clone()));
    let (class, detail) = match outcome.termination {
        Termination::Exited(code) => (Class::Exited(code), String::new()),
        Termination::Trapped(message) => (
            Class::Trap(TrapKind::from_message(&message)),
            short(message.lines().next().unwrap_or("")),
        ),
        Termination::TimedOut(_) => (Class::TimedOut, String::new()),
        Termination::OutOfMemory { .. } => (Class::OutOfMemory, String::new()),
        Termination::OutOfFuel => (Class::OutOfFuel, String::new()),
        Termination::OutputTooLarge { .. } => (Class::OutputTooLarge, String::new()),
        Termination::Failed(message) => (Class::Failed, short(&message)),
    };
    Run {
        engine,
        class,
        stdout: outcome.stdout,
        detail,
    }
}

/// At most 400 characters of an engine's words, on one line.
fn short(text: &str) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(400) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line,
    }
}

/// A known way the engines differ: which runs it covers, and why it is
/// left as it is.
#[derive(Debug)]
pub struct Difference {
    /// A short name, as reports print it.
    pub name: &'static str,
    /// Why the engines differ, and why that is acceptable.
    pub reason: &'static str,
    /// Whether a set of runs that disagree is this difference.
    pub covers: fn(&[Run]) -> bool,
}

/// The engine differences Luge documents (docs/ENGINES.md tells users).
pub static DIFFERENCES: &[Difference] = &[Difference {
    name: "stack depth",
    reason: "how deep a guest may recurse depends on the engine: its stack \
             (Wasmtime's 512 KiB Wasm stack, Wasmer's 1 MiB, WAMR's 256 KiB \
             operand stack) and its compiler's frame sizes (Cranelift's frames \
             are smaller than single-pass ones); a recursion that exhausts one \
             engine's stack can end another way on another. Every engine stops \
             it with a trap, never by crashing the executor.",
    covers: stack_depth,
}];

/// Some engines ran out of stack, and the others agree among themselves.
fn stack_depth(runs: &[Run]) -> bool {
    let overflow = |r: &&Run| r.class == Class::Trap(TrapKind::StackOverflow);
    let mut rest = runs.iter().filter(|r| !overflow(r));
    let agree = match rest.next() {
        Some(first) => rest.all(|r| r.class == first.class && r.stdout == first.stdout),
        None => true,
    };
    runs.iter().any(|r| overflow(&r)) && agree
}

/// What a case's runs come to.
#[derive(Debug)]
pub enum Verdict {
    /// Every engine gave the same class and the same stdout.
    Agree,
    /// They differ as a documented difference allows.
    Known(&'static Difference),
    /// They differ otherwise: a bug in an engine or in Luge.
    Disagree,
}

/// Compares `runs` of one case.
pub fn judge(runs: &[Run]) -> Verdict {
    let Some(first) = runs.first() else {
        return Verdict::Agree;
    };
    let same = |r: &Run| {
        r.class == first.class
            && r.stdout == first.stdout
            && r.class != Class::Trap(TrapKind::Other)
    };
    if runs.iter().all(same) {
        return Verdict::Agree;
    }
    match DIFFERENCES.iter().find(|d| (d.covers)(runs)) {
        Some(d) => Verdict::Known(d),
        None => Verdict::Disagree,
    }
}
