//! A compiled module, shared by every container running the same code.

use std::collections::HashSet;
use std::sync::Arc;

use luge_core::{Invocation, LoadedModule, Outcome};
use wasmer::{ExternType, Module};

use crate::Shared;

/// A module deserialized into the engine, ready to instantiate.
pub struct WasmerModule {
    pub(crate) module: Module,
    exports: HashSet<String>,
    code_size: usize,
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for WasmerModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmerModule")
            .field("code_size", &self.code_size)
            .finish_non_exhaustive()
    }
}

impl WasmerModule {
    /// Wraps a module of `code_size` serialized bytes.
    pub(crate) fn new(module: Module, code_size: usize, shared: Arc<Shared>) -> Self {
        let exports = module
            .exports()
            .filter(|e| matches!(e.ty(), ExternType::Function(_)))
            .map(|e| e.name().to_owned())
            .collect();
        Self {
            module,
            exports,
            code_size,
            shared,
        }
    }
}

impl LoadedModule for WasmerModule {
    fn has_export(&self, name: &str) -> bool {
        self.exports.contains(name)
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        crate::sandbox::run(self, invocation)
    }

    fn code_size(&self) -> usize {
        // The serialized artifact: native code plus Wasmer's metadata, what
        // deserializing keeps mapped.
        self.code_size
    }
}
