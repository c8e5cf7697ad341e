//! One invocation: a fresh instance from a pre-linked module, run, torn down.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use luge_core::{DirMode, EngineError, Invocation, LoadedModule, Outcome, Termination};
use wasmtime::{InstancePre, Linker, Module, Store, Trap};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::epoch::EpochTicker;
use crate::limits::SandboxLimiter;

/// Per-sandbox host state.
pub struct SandboxState {
    /// The WASI preview 1 context.
    pub wasi: WasiP1Ctx,
    limiter: SandboxLimiter,
}

/// A deserialized module, pre-linked against WASI.
pub struct SandboxModule {
    pre: InstancePre<SandboxState>,
    exports: HashSet<String>,
    ticker: Arc<EpochTicker>,
    fuel: bool,
    code_size: usize,
}

impl SandboxModule {
    pub(crate) fn new(
        module: Module,
        linker: &Linker<SandboxState>,
        ticker: Arc<EpochTicker>,
        fuel: bool,
    ) -> Result<Self, EngineError> {
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| EngineError::Unsupported(format!("{e:#}")))?;
        let exports = module
            .exports()
            .filter(|e| e.ty().func().is_some())
            .map(|e| e.name().to_owned())
            .collect();
        let range = module.image_range();
        Ok(Self {
            pre,
            exports,
            ticker,
            fuel,
            code_size: range.end as usize - range.start as usize,
        })
    }

    fn wasi_context(
        invocation: &Invocation,
        stdout: &MemoryOutputPipe,
        stderr: &MemoryOutputPipe,
    ) -> Result<WasiP1Ctx, String> {
        let action = &invocation.action;
        let mut builder = WasiCtxBuilder::new();
        builder
            .stdin(MemoryInputPipe::new(invocation.stdin.clone()))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .arg(&action.name)
            .args(&action.capabilities.args)
            .envs(&action.env)
            .envs(&invocation.env);
        for dir in &action.capabilities.dirs {
            let perms = match dir.mode {
                DirMode::ReadOnly => FsPerms::ReadOnly,
                DirMode::ReadWrite => FsPerms::ReadWrite,
            };
            builder
                .preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(|e| format!("granted directory {}: {e:#}", dir.guest))?;
        }
        Ok(builder.build_p1())
    }
}

impl LoadedModule for SandboxModule {
    fn has_export(&self, name: &str) -> bool {
        self.exports.contains(name)
    }

    fn code_size(&self) -> usize {
        self.code_size
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        let started = Instant::now();
        let limits = invocation.action.limits;
        let stdout = MemoryOutputPipe::new(limits.max_output_bytes);
        let stderr = MemoryOutputPipe::new(limits.max_output_bytes);
        let wasi = match Self::wasi_context(&invocation, &stdout, &stderr) {
            Ok(wasi) => wasi,
            Err(message) => return Outcome::failed(message),
        };
        let mut store = Store::new(
            self.pre.module().engine(),
            SandboxState {
                wasi,
                limiter: SandboxLimiter::new(limits.memory_bytes),
            },
        );
        store.limiter(|state| &mut state.limiter);
        if self.fuel {
            // With metering on, an action without a fuel limit gets all of it.
            let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
        }
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.ticker.ticks_for(limits.timeout));

        let entry = invocation.action.entry.as_str();
        let result = {
            let _running = self.ticker.enter();
            self.pre.instantiate(&mut store).and_then(|instance| {
                let func = instance.get_typed_func::<(), ()>(&mut store, entry)?;
                func.call(&mut store, ())
            })
        };
        let termination = match result {
            Ok(()) => Termination::Exited(0),
            Err(error) => {
                if let Some(exit) = error.downcast_ref::<I32Exit>() {
                    Termination::Exited(exit.0)
                } else if let Some(trap) = error.downcast_ref::<Trap>() {
                    match trap {
                        Trap::Interrupt => Termination::TimedOut(limits.timeout),
                        Trap::OutOfFuel => Termination::OutOfFuel,
                        _ if store.data().limiter.refused => Termination::OutOfMemory {
                            limit_bytes: limits.memory_bytes,
                        },
                        _ => Termination::Trapped(format!("{error:#}")),
                    }
                } else if store.data().limiter.refused {
                    Termination::OutOfMemory {
                        limit_bytes: limits.memory_bytes,
                    }
                } else {
                    Termination::Trapped(format!("{error:#}"))
                }
            }
        };
        drop(store);
        Outcome {
            termination,
            stdout: take_output(stdout),
            stderr: take_output(stderr),
            elapsed: started.elapsed(),
        }
    }
}

/// The bytes a pipe captured. The store, the pipe's only other owner, has
/// been dropped by now, so the buffer is moved out rather than copied.
fn take_output(pipe: MemoryOutputPipe) -> Vec<u8> {
    pipe.try_into_inner()
        .map(|buffer| buffer.freeze().into())
        .unwrap_or_default()
}
