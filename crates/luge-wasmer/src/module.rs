//! A compiled module, shared by every container running the same code.

use std::collections::HashSet;
use std::sync::Arc;

use wasmer::{Engine, ExternType, Module};

use crate::Shared;

/// A module deserialized into the engine, ready to instantiate.
#[derive(derive_more::Debug)]
pub struct WasmerModule {
    #[debug(skip)]
    pub(crate) module: Module,
    /// The module's own engine (see `EngineRecipe`): its stores are made
    /// from it, and its code goes with the last of them.
    #[debug(skip)]
    pub(crate) engine: Engine,
    #[debug(skip)]
    pub(crate) exports: HashSet<String>,
    pub(crate) code_size: usize,
    #[debug(skip)]
    pub(crate) shared: Arc<Shared>,
}

impl WasmerModule {
    /// Wraps a module of `code_size` serialized bytes.
    pub(crate) fn new(
        module: Module,
        engine: Engine,
        code_size: usize,
        shared: Arc<Shared>,
    ) -> Self {
        let exports = module
            .exports()
            .filter(|e| {
                matches!(e.ty(), ExternType::Function(f)
                    if luge_core::runtime::is_entry_point(e.name(), f.params().len(), f.results().len()))
            })
            .map(|e| e.name().to_owned())
            .collect();
        Self {
            module,
            engine,
            exports,
            code_size,
            shared,
        }
    }
}
