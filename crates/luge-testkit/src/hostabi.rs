//! Host API v1 conformance: every `luge` import called with what a hostile
//! guest passes (pointers past the end, negative and huge lengths, a
//! guest's "4 GiB", zero lengths, bad handles), from modules generated
//! here, on each engine. Each engine must answer the same code, and no host
//! call may allocate more than the guest's own memory.
//!
//! A case is a sequence of import calls with constant arguments; the
//! generated module stores each result (as `i64`) and writes them all to
//! stdout, so the test compares codes, not behaviour after them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luge_core::calls::{CallError, CallMode, CallResult, CallStatus, Calls, PendingCall};
use luge_core::hostapi::{self, IMPORT_MODULE, ValType};
use luge_core::state::{State, StateError, Tier};
use luge_core::{Action, Invocation, LoadedModule, Termination};
use luge_registry::{ModuleCode, ModuleRegistry};

/// The guest's memory: one page.
pub const GUEST_MEMORY: i32 = 65536;

// Where the module's data lies.
const KEY: i32 = 1024; // "k"
const NAME: i32 = 1040; // "echo"
const INPUT: i32 = 1056; // "abc"
const BUF: i32 = 2048;
/// Results are stored from here, 8 bytes each.
const RESULTS: i32 = 4096;
const IOVEC: i32 = 64;
const WRITTEN: i32 = 80;

// ---- the allocation probe ------------------------------------------------

static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, noting the largest single allocation made on a
/// thread while it is armed. Install it in a test binary with
/// `#[global_allocator]` ([`conformance_tests!`](crate::conformance_tests)
/// does).
pub struct Largest;

// SAFETY: every call is forwarded to `System` unchanged; the bookkeeping
// touches only const-initialized thread-locals and an atomic, neither of
// which allocates.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    // `try_with`: thread-locals may already be gone at thread exit.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

/// The largest single allocation this thread made while `f` ran.
fn largest_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|largest| largest.set(0));
    ARMED.with(|armed| armed.set(true));
    let result = f();
    ARMED.with(|armed| armed.set(false));
    (result, LARGEST.with(Cell::get))
}

// ---- the host the imports reach ------------------------------------------

/// Calls to `echo` answer their input; every other name is unknown.
struct Echo;

impl Calls for Echo {
    fn start(&self, name: &str, input: Vec<u8>, _: CallMode) -> Result<PendingCall, CallError> {
        if name != "echo" {
            return Err(CallError::NotFound);
        }
        Ok(Box::pin(std::future::ready(CallResult {
            status: CallStatus::Success,
            output: input,
        })))
    }
}

/// State in a map: both tiers are the same map; `pull` and `push` succeed.
#[derive(Default)]
struct MapState(Mutex<HashMap<String, Vec<u8>>>);

impl MapState {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State for MapState {
    fn get(&self, key: &str, _: Tier) -> Result<Arc<[u8]>, StateError> {
        self.map()
            .get(key)
            .map(|v| Arc::from(v.as_slice()))
            .ok_or(StateError::NotFound)
    }
    fn set(&self, key: &str, value: &[u8], _: Tier) -> Result<(), StateError> {
        self.map().insert(key.to_owned(), value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &str, _: Tier) -> Result<(), StateError> {
        self.map().remove(key).map(drop).ok_or(StateError::NotFound)
    }
    fn append(&self, key: &str, value: &[u8], _: Tier) -> Result<u64, StateError> {
        let mut map = self.map();
        let entry = map.entry(key.to_owned()).or_default();
        entry.extend_from_slice(value);
        Ok(entry.len() as u64)
    }
    fn cas(&self, key: &str, old: Option<&[u8]>, new: &[u8], _: Tier) -> Result<bool, StateError> {
        let mut map = self.map();
        if map.get(key).map(Vec::as_slice) != old {
            return Ok(false);
        }
        map.insert(key.to_owned(), new.to_vec());
        Ok(true)
    }
    fn add(&self, key: &str, delta: i64, _: Tier) -> Result<i64, StateError> {
        let mut map = self.map();
        let old = match map.get(key) {
            None => 0,
            Some(v) => i64::from_le_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| StateError::BadArgument)?,
            ),
        };
        let new = old.wrapping_add(delta);
        map.insert(key.to_owned(), new.to_le_bytes().to_vec());
        Ok(new)
    }
    fn pull(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn push(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn try_lock(&self, _: &str, _: Duration) -> Result<bool, StateError> {
        Ok(true)
    }
    fn unlock(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn keys(
        &self,
        prefix: &str,
        _: Tier,
        cursor: u64,
        limit: usize,
    ) -> Result<luge_core::state::KeyPage, StateError> {
        let mut keys: Vec<String> = self
            .map()
            .keys()
            .filter_map(|key| key.strip_prefix(prefix).map(str::to_owned))
            .collect();
        keys.sort();
        Ok(luge_core::state::page(keys.iter(), cursor, limit))
    }
    fn wait_until(&self) -> Instant {
        Instant::now() + Duration::from_secs(1)
    }
}

// ---- generated guests ------------------------------------------------------

/// One import call with constant arguments (as `i64`; narrowed to each
/// parameter's type).
#[derive(Debug, Clone)]
pub struct Call {
    /// The import.
    pub import: &'static str,
    /// Its arguments.
    pub args: Vec<i64>,
}

fn call(import: &'static str, args: &[i64]) -> Call {
    Call {
        import,
        args: args.to_vec(),
    }
}

/// A module that makes `calls` in order and writes their results to
/// stdout, 8 bytes (little-endian `i64`) each.
pub fn guest(calls: &[Call]) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, EntityType, ExportKind, ExportSection, Function,
        FunctionSection, ImportSection, MemArg, MemorySection, MemoryType, Module, TypeSection,
        ValType as W,
    };
    let wasm_type = |t: ValType| match t {
        ValType::I32 => W::I32,
        ValType::I64 => W::I64,
    };
    let mut used: Vec<&'static str> = Vec::new();
    for c in calls {
        if !used.contains(&c.import) {
            used.push(c.import);
        }
    }
    let mut types = TypeSection::new();
    let mut imports = ImportSection::new();
    // Type 0: fd_write; 1: _start; 2..: the luge imports, in `used` order.
    types
        .ty()
        .function([W::I32, W::I32, W::I32, W::I32], [W::I32]);
    types.ty().function([], []);
    imports.import(
        "wasi_snapshot_preview1",
        "fd_write",
        EntityType::Function(0),
    );
    for (i, name) in used.iter().enumerate() {
        let import = hostapi::import(name).unwrap_or_else(|| panic!("no import {name}"));
        types.ty().function(
            import.params.iter().copied().map(wasm_type),
            [wasm_type(import.result)],
        );
        imports.import(IMPORT_MODULE, name, EntityType::Function(2 + i as u32));
    }
    let mut functions = FunctionSection::new();
    functions.function(1);
    let start = 1 + used.len() as u32;
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: Some(1),
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("_start", ExportKind::Func, start);

    let mut body = Function::new([]);
    let mut code = body.instructions();
    let at = |offset: u64| MemArg {
        offset,
        align: 3,
        memory_index: 0,
    };
    for (n, c) in calls.iter().enumerate() {
        let index = used.iter().position(|u| *u == c.import).unwrap_or(0);
        let import = hostapi::import(c.import).unwrap_or_else(|| panic!("no import"));
        assert_eq!(import.params.len(), c.args.len(), "{c:?}");
        code.i32_const(RESULTS + 8 * n as i32);
        for (arg, ty) in c.args.iter().zip(import.params) {
            match ty {
                ValType::I32 => code.i32_const(*arg as i32),
                ValType::I64 => code.i64_const(*arg),
            };
        }
        code.call(1 + index as u32);
        if import.result == ValType::I32 {
            code.i64_extend_i32_s();
        }
        code.i64_store(at(0));
    }
    // fd_write(1, iovec {RESULTS, 8 * n}, 1, WRITTEN)
    code.i32_const(IOVEC).i32_const(RESULTS).i32_store(MemArg {
        offset: 0,
        align: 2,
        memory_index: 0,
    });
    code.i32_const(IOVEC)
        .i32_const(8 * calls.len() as i32)
        .i32_store(MemArg {
            offset: 4,
            align: 2,
            memory_index: 0,
        });
    code.i32_const(1)
        .i32_const(IOVEC)
        .i32_const(1)
        .i32_const(WRITTEN)
        .call(0)
        .drop()
        .end();
    let mut codes = CodeSection::new();
    codes.function(&body);

    let mut data = DataSection::new();
    let segment = |offset: i32| ConstExpr::i32_const(offset);
    data.active(0, &segment(KEY), b"k".iter().copied());
    data.active(0, &segment(NAME), b"echo".iter().copied());
    data.active(0, &segment(INPUT), b"abc".iter().copied());

    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&memories)
        .section(&exports)
        .section(&codes)
        .section(&data);
    module.finish()
}

/// One case: calls and the results every engine must give.
#[derive(Debug, Clone)]
pub struct Case {
    /// What it checks.
    pub what: &'static str,
    /// Whether the invocation has calls and state granted.
    pub granted: bool,
    /// The calls, with the result each must give.
    pub calls: Vec<(Call, i64)>,
}

fn case(what: &'static str, calls: Vec<(Call, i64)>) -> Case {
    Case {
        what,
        granted: true,
        calls,
    }
}

const BAD: i64 = -3;
const HUGE: i64 = i32::MAX as i64;
/// A guest's "4 GiB": `u32::MAX` as the `i32` it passes.
const FOUR_GIB: i64 = -1;
const END: i64 = GUEST_MEMORY as i64;

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    let mut cases = call_cases();
    cases.extend(state_cases());
    cases.push(nothing_granted());
    cases
}

/// The cases of the `call_*` imports.
fn call_cases() -> Vec<Case> {
    let (name, input, buf) = (NAME as i64, INPUT as i64, BUF as i64);
    let started = || (call("call_start", &[name, 4, input, 3]), 0);
    vec![
        case(
            "a call starts, is waited for, and its output is read",
            vec![
                started(),
                (call("call_wait", &[0]), 0),
                (call("call_output", &[0, buf, 16]), 3),
                (call("call_output", &[0, buf, 0]), 3),
                (call("call_output", &[0, END, 0]), 3),
                (call("call_output", &[0, buf, 1]), 3),
            ],
        ),
        case(
            "call_output's buffer: negative, 4 GiB, past the end",
            vec![
                started(),
                (call("call_wait", &[0]), 0),
                (call("call_output", &[0, buf, -5]), BAD),
                (call("call_output", &[0, buf, FOUR_GIB]), BAD),
                (call("call_output", &[0, buf, HUGE]), BAD),
                (call("call_output", &[0, -1, 4]), BAD),
                (call("call_output", &[0, END - 2, 16]), BAD),
                (call("call_output", &[0, END + 1, 0]), BAD),
            ],
        ),
        case(
            "bad handles",
            vec![
                (call("call_wait", &[0]), -8),
                (call("call_wait", &[-1]), -8),
                (call("call_wait", &[i64::MAX]), -8),
                (call("call_output", &[0, buf, 16]), -8),
                started(),
                (call("call_output", &[0, buf, 16]), -8),
                (call("call_output", &[1, buf, 16]), -8),
            ],
        ),
        case(
            "call_start's name and input",
            vec![
                (call("call_start", &[name, 0, input, 3]), BAD),
                (call("call_start", &[name, -1, input, 3]), BAD),
                (call("call_start", &[name, FOUR_GIB, input, 3]), BAD),
                (call("call_start", &[name, HUGE, input, 3]), BAD),
                (call("call_start", &[-1, 4, input, 3]), BAD),
                (call("call_start", &[END - 2, 4, input, 3]), BAD),
                (call("call_start", &[name, 4, input, FOUR_GIB]), BAD),
                (call("call_start", &[name, 4, input, HUGE]), BAD),
                (call("call_start", &[name, 4, 0, END]), 0),
                (call("call_start", &[name, 4, END, 0]), 1),
                (call("call_start", &[name, 3, input, 3]), -1),
            ],
        ),
    ]
}

/// The cases of the `state_*` imports.
fn state_cases() -> Vec<Case> {
    let (key, input, buf) = (KEY as i64, INPUT as i64, BUF as i64);
    vec![
        case(
            "state: set, get and the get buffer",
            vec![
                (call("state_set", &[key, 1, input, 3, 0]), 0),
                (call("state_get", &[key, 1, buf, 16, 0]), 3),
                (call("state_get", &[key, 1, buf, 0, 0]), 3),
                (call("state_get", &[key, 1, buf, -2, 0]), BAD),
                (call("state_get", &[key, 1, buf, FOUR_GIB, 0]), BAD),
                (call("state_get", &[key, 1, buf, HUGE, 0]), BAD),
                (call("state_get", &[key, 1, -1, 4, 0]), BAD),
                (call("state_get", &[key, 1, END - 1, 16, 0]), BAD),
                (call("state_get", &[key, 1, END, 0, 1]), 3),
            ],
        ),
        case(
            "state: keys",
            vec![
                (call("state_get", &[key, 0, buf, 16, 0]), BAD),
                (call("state_get", &[key, -1, buf, 16, 0]), BAD),
                (call("state_get", &[key, HUGE, buf, 16, 0]), BAD),
                (call("state_get", &[key, 1025, buf, 16, 0]), BAD),
                (call("state_get", &[-1, 1, buf, 16, 0]), BAD),
                (call("state_get", &[END, 1, buf, 16, 0]), BAD),
                (call("state_delete", &[key, FOUR_GIB, 0]), BAD),
                (call("state_pull", &[key, HUGE]), BAD),
                (call("state_push", &[END, 1]), BAD),
                (call("state_unlock", &[key, 0]), BAD),
                (call("state_add", &[key, -7, 1, 0]), BAD),
                (call("state_lock", &[-5, 1, 100]), BAD),
            ],
        ),
        case(
            "state: values",
            vec![
                (call("state_set", &[key, 1, input, HUGE, 0]), BAD),
                (call("state_set", &[key, 1, input, FOUR_GIB, 0]), BAD),
                (call("state_set", &[key, 1, -1, 1, 0]), BAD),
                (call("state_set", &[key, 1, END, 0, 0]), 0),
                (call("state_append", &[key, 1, input, HUGE, 0]), BAD),
                (call("state_append", &[key, 1, input, 3, 0]), 3),
                (call("state_append", &[key, 1, 0, END, 1]), 3 + END),
                (call("state_delete", &[key, 1, 0]), 0),
                (call("state_delete", &[key, 1, 0]), -1),
            ],
        ),
        case(
            "state: compare-and-swap",
            vec![
                (call("state_cas", &[key, 1, 0, -1, input, 3, 0]), 1),
                (call("state_cas", &[key, 1, 0, -1, input, 3, 0]), 0),
                (call("state_cas", &[key, 1, input, 3, input, 1, 0]), 1),
                (call("state_cas", &[key, 1, input, -2, input, 1, 0]), BAD),
                (call("state_cas", &[key, 1, input, HUGE, input, 1, 0]), BAD),
                (call("state_cas", &[key, 1, input, 1, input, HUGE, 0]), BAD),
                (
                    call("state_cas", &[key, 1, input, 1, input, FOUR_GIB, 0]),
                    BAD,
                ),
                (call("state_cas", &[key, 1, -1, 1, input, 1, 0]), BAD),
            ],
        ),
        case(
            "state: counters and locks",
            vec![
                (call("state_add", &[key, 1, 5, 0]), 5),
                (call("state_add", &[key, 1, -7, 0]), -2),
                (call("state_lock", &[key, 1, 0]), BAD),
                (call("state_lock", &[key, 1, -1]), BAD),
                (call("state_lock", &[key, 1, HUGE]), BAD),
                (call("state_lock", &[key, 1, 100]), 0),
                (call("state_unlock", &[key, 1]), 0),
                (call("state_pull", &[key, 1]), 0),
                (call("state_push", &[key, 1]), 0),
            ],
        ),
    ]
}

/// A function granted nothing.
fn nothing_granted() -> Case {
    let (key, name, input, buf) = (KEY as i64, NAME as i64, INPUT as i64, BUF as i64);
    Case {
        what: "nothing granted: good arguments are refused, bad ones are bad",
        granted: false,
        calls: vec![
            (call("call_start", &[name, 4, input, 3]), -2),
            (call("call_start", &[name, 4, input, HUGE]), BAD),
            (call("state_get", &[key, 1, buf, 16, 0]), -2),
            (call("state_set", &[key, 1, input, HUGE, 0]), BAD),
            (call("state_lock", &[key, 1, 100]), -2),
        ],
    }
}

/// What running `case` on `module` gave: the results, and the largest
/// single allocation made on this thread meanwhile.
fn run(module: &dyn LoadedModule, case: &Case) -> (Vec<i64>, usize) {
    let mut invocation = Invocation::new(Arc::new(Action::command("hostabi")), Vec::new());
    if case.granted {
        invocation.calls = Some(Arc::new(Echo));
        invocation.state = Some(Arc::new(MapState::default()));
    }
    let (outcome, largest) = largest_during(|| module.run(invocation));
    assert_eq!(
        outcome.termination,
        Termination::Exited(0),
        "{}: {}",
        case.what,
        String::from_utf8_lossy(&outcome.stderr)
    );
    let results = outcome
        .stdout
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .collect();
    (results, largest)
}

fn load(registry: &ModuleRegistry, calls: &[Call]) -> Arc<dyn LoadedModule> {
    registry
        .load(&ModuleCode::Wasm(guest(calls)))
        .unwrap_or_else(|e| panic!("a generated guest loads: {e}"))
}

/// The suite: every case on `registry`'s engine, the same codes as host
/// API v1 says, and no host allocation larger than the guest's memory
/// beyond what the same guest with small arguments makes.
pub fn host_api_v1(registry: &ModuleRegistry) {
    let mut failures = Vec::new();
    for case in cases() {
        let calls: Vec<Call> = case.calls.iter().map(|(c, _)| c.clone()).collect();
        let expected: Vec<i64> = case.calls.iter().map(|(_, r)| *r).collect();
        let module = load(registry, &calls);
        let (results, largest) = run(&*module, &case);
        if results != expected {
            for ((c, want), got) in case.calls.iter().zip(&results) {
                if want != got {
                    failures.push(format!(
                        "{}: {}{:?} gave {got}, not {want}",
                        case.what, c.import, c.args
                    ));
                }
            }
            if results.len() != expected.len() {
                failures.push(format!(
                    "{}: {} results of {}",
                    case.what,
                    results.len(),
                    expected.len()
                ));
            }
        }
        assert!(
            INSTALLED.load(Ordering::Relaxed),
            "install hostabi::Largest as the global allocator"
        );
        // The same guest with every length made small: what the engine
        // itself allocates for a run.
        let small: Vec<Call> = calls
            .iter()
            .map(|c| Call {
                import: c.import,
                args: c
                    .args
                    .iter()
                    .map(|a| if *a > 1024 || *a < 0 { 16 } else { *a })
                    .collect(),
            })
            .collect();
        let baseline_module = load(registry, &small);
        let baseline = (0..2)
            .map(|_| {
                let (outcome, largest) = largest_during(|| {
                    let mut invocation =
                        Invocation::new(Arc::new(Action::command("hostabi")), Vec::new());
                    invocation.calls = Some(Arc::new(Echo));
                    invocation.state = Some(Arc::new(MapState::default()));
                    baseline_module.run(invocation)
                });
                drop(outcome);
                largest
            })
            .max()
            .unwrap_or(0);
        if largest > baseline.max(GUEST_MEMORY as usize) + GUEST_MEMORY as usize {
            failures.push(format!(
                "{}: the host allocated {largest} bytes at once (a run with small arguments: {baseline}; the guest's memory: {GUEST_MEMORY})",
                case.what
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "host API v1 conformance:\n{}",
        failures.join("\n")
    );
}
