//! WebAssembly components that are WASI 0.2 commands (`wasi:cli/command`:
//! Rust's `wasm32-wasip2`, componentize-py, componentize-js): the same
//! function ABI as core modules (stdin in, stdout out, argv, environment,
//! granted directories), the same limits, scheduling and preemption. A
//! fresh instance per invocation, from a pre-instantiated component.

use std::sync::Arc;
use std::time::Instant;

use luge_core::{EngineError, Invocation, LoadedModule, Outcome, Preemption, SandboxFuture};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::epoch::EpochTicker;
use crate::limits::SandboxLimiter;
use crate::sandbox::{schedule, take_output, termination, wasi_builder};

pub use luge_core::code::is_component;

/// Per-invocation host state of a component.
pub struct ComponentState {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: SandboxLimiter,
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// The WASI 0.2 linker, built once per engine.
pub(crate) fn linker(engine: &Engine) -> Result<Linker<ComponentState>, EngineError> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| EngineError::Config(format!("{e:#}")))?;
    Ok(linker)
}

/// A loaded `wasi:cli/command` component.
pub struct CommandComponent {
    pre: CommandPre<ComponentState>,
    ticker: Arc<EpochTicker>,
    fuel: bool,
    code_size: usize,
}

impl CommandComponent {
    pub(crate) fn new(
        component: &Component,
        linker: &Linker<ComponentState>,
        ticker: Arc<EpochTicker>,
        fuel: bool,
    ) -> Result<Self, EngineError> {
        let pre = linker
            .instantiate_pre(component)
            .and_then(CommandPre::new)
            .map_err(|e| {
                EngineError::Unsupported(format!(
                    "only wasi:cli/command components run as functions (WASI 0.2 imports only, exporting wasi:cli/run): {e:#}"
                ))
            })?;
        let range = component.image_range();
        Ok(Self {
            pre,
            ticker,
            fuel,
            code_size: range.end as usize - range.start as usize,
        })
    }

    async fn invoke(&self, invocation: Invocation, preemption: Option<Preemption>) -> Outcome {
        let started = Instant::now();
        let limits = invocation.action.limits;
        let stdout = MemoryOutputPipe::new(limits.capture_bytes());
        let stderr = MemoryOutputPipe::new(limits.capture_bytes());
        let ctx = match wasi_builder(&invocation, &stdout, &stderr) {
            Ok(mut builder) => builder.build(),
            Err(e) => return Outcome::failed(e),
        };
        let mut store = Store::new(
            self.pre.engine(),
            ComponentState {
                ctx,
                table: ResourceTable::new(),
                limiter: SandboxLimiter::new(limits.memory_bytes),
            },
        );
        store.limiter(|state| &mut state.limiter);
        if self.fuel {
            let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
        }
        // Run to completion (a synchronous caller) or as a scheduled future.
        schedule(
            &mut store,
            &self.ticker,
            &invocation,
            preemption.unwrap_or(Preemption {
                quantum: limits.timeout,
                enabled: false,
            }),
            started,
        );
        let result = {
            let _running = self.ticker.enter();
            match self.pre.instantiate_async(&mut store).await {
                Ok(command) => match command.wasi_cli_run().call_run(&mut store).await {
                    Ok(Ok(())) => Ok(()),
                    // `run` returned its error result: exit status 1.
                    Ok(Err(())) => Err(wasmtime::Error::new(wasmtime_wasi::I32Exit(1))),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        };
        let refused = store.data().limiter.refused;
        let termination = termination(result, refused, &limits);
        drop(store);
        Outcome {
            termination,
            stdout: take_output(stdout),
            stderr: take_output(stderr),
            elapsed: started.elapsed(),
        }
        .cap_output(limits.max_output_bytes)
    }
}

impl LoadedModule for CommandComponent {
    fn has_export(&self, name: &str) -> bool {
        // A command's entry point is `wasi:cli/run`, which stands for the
        // core modules' `_start`; a component has no other entry.
        name == luge_core::action::COMMAND_ENTRY
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        // The component linker is asynchronous: run it to completion on
        // this thread, inside WASI's tokio runtime (for its timers).
        wasmtime_wasi::runtime::in_tokio(self.invoke(invocation, None))
    }

    fn code_size(&self) -> usize {
        self.code_size
    }

    fn start(self: Arc<Self>, invocation: Invocation, preemption: Preemption) -> SandboxFuture {
        Box::pin(async move { self.invoke(invocation, Some(preemption)).await })
    }
}
