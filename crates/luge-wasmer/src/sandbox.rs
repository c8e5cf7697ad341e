//! One invocation on Wasmer: a fresh store and WASIX environment, the
//! entry point under the watchdog, teardown.
//!
//! Directory grants are preopened from their [`grants`] mounts. Nothing
//! else is visible: no host root, no inherited environment, stdio in
//! memory.

use std::sync::Arc;
use std::time::Instant;

use luge_core::{DirMode, Invocation, LoadedModule, Outcome, SandboxError, Termination};
use wasmer::{InstantiationError, Store};
use wasmer_vm::TrapCode;
use wasmer_wasix::{WasiEnv, WasiEnvBuilder, WasiError, WasiRuntimeError, WasiThreadError};

use crate::Shared;

use crate::grants;
use crate::limits::LimitScope;
use crate::module::WasmerModule;
use crate::stdio::{Input, Output};

/// Runs `invocation` in a fresh instance of `module`.
pub(crate) fn run(module: &WasmerModule, invocation: Invocation) -> Outcome {
    let started = Instant::now();
    let limits = invocation.action.limits;
    let stdout = Output::new(limits.capture_bytes());
    let stderr = Output::new(limits.capture_bytes());
    let termination =
        execute(module, invocation, &stdout, &stderr, started).unwrap_or_else(Termination::from);
    Outcome {
        termination,
        stdout: stdout.take(),
        stderr: stderr.take(),
        elapsed: started.elapsed(),
    }
    .cap_output(limits.max_output_bytes)
}

fn execute(
    module: &WasmerModule,
    invocation: Invocation,
    stdout: &Output,
    stderr: &Output,
    started: Instant,
) -> Result<Termination, SandboxError> {
    let shared = &module.shared;
    // WASIX's files and clocks run on the engine's own I/O runtime.
    let _io = shared.io.enter();
    let action = &invocation.action;
    let limits = action.limits;

    let builder = WasiEnv::builder(action.name.clone())
        .args(invocation.argv().skip(1))
        .envs(invocation.env())
        .stdin(Box::new(Input::new(invocation.stdin)))
        .stdout(Box::new(stdout.clone()))
        .stderr(Box::new(stderr.clone()))
        .runtime(Arc::clone(&shared.wasi_runtime));
    let builder = grant_dirs(builder, shared, action)?;

    let mut store = Store::new(module.engine.clone());
    let memory_limit = LimitScope::enter(limits.memory_bytes);
    // The watchdog covers instantiation too: a start function moved by
    // `luge_core::start` runs below, but an artifact compiled before that
    // may still run one inside `instantiate`.
    let interrupter = store.interrupter();
    let watch = shared.watchdog.watch(
        started + limits.timeout,
        Box::new(move || interrupter.interrupt()),
        &invocation.cancel,
    );
    let (instance, env) = match builder.instantiate(module.module.clone(), &mut store) {
        Ok(instantiated) => instantiated,
        Err(_) if memory_limit.refused() => {
            return Ok(Termination::OutOfMemory {
                limit_bytes: limits.memory_bytes,
            });
        }
        Err(_) if watch.fired() => return Ok(Termination::TimedOut(limits.timeout)),
        // A data or element segment out of bounds traps while the module
        // is instantiated, as the spec has it: a trap, as on every engine.
        Err(WasiRuntimeError::Thread(WasiThreadError::InstanceCreateFailed(failed))) => {
            match *failed {
                InstantiationError::Start(trap) => return Ok(Termination::Trapped(trap.message())),
                other => return Err(SandboxError::Instantiate(other.into())),
            }
        }
        Err(e) => return Err(SandboxError::Instantiate(e.into())),
    };
    // Only an entry point (neither `luge:start` nor a function of another
    // type than `() -> ()`; see `WasmerModule::new`).
    if !module.exports.contains(&action.entry) {
        return Err(SandboxError::NoEntry(action.entry.clone()));
    }
    let entry = instance
        .exports
        .get_function(&action.entry)
        .map_err(|_| SandboxError::NoEntry(action.entry.clone()))?
        .clone();
    let start = instance
        .exports
        .get_function(luge_core::start::START_EXPORT)
        .ok()
        .cloned();

    let calls = invocation.calls.clone();
    let state = invocation.state.clone();
    let (returned, timed_out) = {
        let memory = instance.exports.get_memory("memory").ok().cloned();
        let returned = crate::hostapi::with_invocation(calls, state, memory, || {
            if let Some(start) = &start {
                start.call(&mut store, &[])?;
            }
            entry.call(&mut store, &[])
        });
        (returned, watch.fired())
    };
    drop(watch);
    env.on_exit(&mut store, None);

    Ok(match returned {
        Ok(_) => Termination::Exited(0),
        Err(error) => match error.downcast::<WasiError>() {
            Ok(WasiError::Exit(code)) => Termination::exit(code.raw()),
            Ok(other) => Termination::Trapped(other.to_string()),
            Err(error) => {
                let message = error.message();
                if timed_out || error.clone().to_trap() == Some(TrapCode::HostInterrupt) {
                    Termination::TimedOut(limits.timeout)
                } else if memory_limit.refused() {
                    Termination::OutOfMemory {
                        limit_bytes: limits.memory_bytes,
                    }
                } else {
                    Termination::Trapped(message)
                }
            }
        },
    })
}

/// `builder` with the directories `action` is granted preopened, on the
/// engine's I/O runtime.
fn grant_dirs(
    mut builder: WasiEnvBuilder,
    shared: &Shared,
    action: &luge_core::Action,
) -> Result<WasiEnvBuilder, SandboxError> {
    for grant in &action.capabilities.dirs {
        let at = grants::mount_point(&grant.guest);
        let writable = grant.mode == DirMode::ReadWrite;
        builder = builder
            .preopen_build(|p| {
                p.directory(&at)
                    .alias(&grant.guest)
                    .read(true)
                    .write(writable)
                    .create(writable)
            })
            .map_err(|e| SandboxError::Grant {
                guest: grant.guest.clone(),
                source: e.into(),
            })?;
    }
    if !action.capabilities.dirs.is_empty() {
        let io = shared
            .io
            .handle()
            .ok_or(SandboxError::Engine("the engine is shutting down"))?;
        builder = builder.fs(grants::mount(&action.capabilities.dirs, io)?);
    }

    Ok(builder)
}

impl LoadedModule for WasmerModule {
    fn has_export(&self, name: &str) -> bool {
        self.exports.contains(name)
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        run(self, invocation)
    }

    fn code_size(&self) -> usize {
        // The serialized artifact: native code plus Wasmer's metadata, what
        // deserializing keeps mapped.
        self.code_size
    }
}
