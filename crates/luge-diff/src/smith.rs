//! Random modules from `wasm-smith`: any instruction sequence the engines'
//! shared feature set allows, shaped as a command (`_start`, an exported `memory`, no imports),
//! with every loop and call made to end (`ensure_termination`: a fuel
//! global that traps with `unreachable` when it runs out) and NaNs
//! canonicalized. What is compared is whether each engine takes the
//! module, and how its run ends: the same trap, or the same exit.

use arbitrary::Unstructured;
use rand::RngCore;
use rand::rngs::SmallRng;
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, Module, TypeSection,
};

/// Fuel for the loops and calls of one run: enough for real work, far
/// short of the time limit on the slowest engine (WAMR's interpreter).
const FUEL: u32 = 20_000;

/// The shape every generated module takes: `_start: [] -> []`. (Its
/// memory, which wasm-smith makes on its own, is exported afterwards by
/// [`export_memory`]: a memory in the shape would come on top of it.)
fn shape() -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([], []);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut exports = ExportSection::new();
    exports.export("_start", ExportKind::Func, 0);
    let mut code = CodeSection::new();
    let mut body = Function::new([]);
    body.instructions().end();
    code.function(&body);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&exports)
        .section(&code);
    module.finish()
}

/// The configuration: Wasm 2.0 (bulk memory, reference types, multi-value,
/// sign extension, saturating conversions) less SIMD, which WAMR's fast
/// interpreter as Luge builds it does not take; none of the proposals
/// past 2.0 (threads, tail calls, GC, exceptions, memory64, multi-memory,
/// custom page sizes), which not every engine takes either. Memories stay
/// under the limit the cases run with.
fn config() -> wasm_smith::Config {
    wasm_smith::Config {
        exports: Some(shape()),
        allow_start_export: true,
        bulk_memory_enabled: true,
        reference_types_enabled: false,
        multi_value_enabled: true,
        sign_extension_ops_enabled: true,
        saturating_float_to_int_enabled: true,
        simd_enabled: false,
        relaxed_simd_enabled: false,
        threads_enabled: false,
        shared_everything_threads_enabled: false,
        tail_call_enabled: false,
        gc_enabled: false,
        exceptions_enabled: false,
        memory64_enabled: false,
        custom_page_sizes_enabled: false,
        wide_arithmetic_enabled: false,
        extended_const_enabled: false,
        custom_descriptors_enabled: false,
        min_memories: 1,
        max_memories: 1,
        // Nothing to import: the host functions are the structured
        // generator's business (program.rs).
        max_imports: 0,
        max_memory32_bytes: super::program::MEMORY_LIMIT / 2,
        max_tables: 2,
        max_table_elements: 1_000,
        max_funcs: 30,
        max_instructions: 2_000,
        canonicalize_nans: true,
        ..wasm_smith::Config::default()
    }
}

/// A random module from `rng`, or `None` when wasm-smith ran out of
/// input or could not make it end (both rare; the case is skipped).
pub fn generate(rng: &mut SmallRng) -> Option<Vec<u8>> {
    let mut bytes = vec![0u8; 16 << 10];
    rng.fill_bytes(&mut bytes);
    let mut u = Unstructured::new(&bytes);
    let mut module = wasm_smith::Module::new(config(), &mut u).ok()?;
    module.ensure_termination(FUEL).ok()?;
    export_memory(&module.to_bytes())
}

/// `wasm` with its memory 0 exported as `memory`, as the function ABI asks.
fn export_memory(wasm: &[u8]) -> Option<Vec<u8>> {
    use wasm_encoder::reencode::{Error, Reencode, utils};
    struct AddExport;
    impl Reencode for AddExport {
        type Error = std::convert::Infallible;
        fn parse_export_section(
            &mut self,
            exports: &mut ExportSection,
            section: wasmparser::ExportSectionReader<'_>,
        ) -> Result<(), Error<Self::Error>> {
            utils::parse_export_section(self, exports, section)?;
            exports.export("memory", ExportKind::Memory, 0);
            Ok(())
        }
    }
    let mut module = Module::new();
    AddExport
        .parse_core_module(&mut module, wasmparser::Parser::new(0), wasm)
        .ok()?;
    Some(module.finish())
}
