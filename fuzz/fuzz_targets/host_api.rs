//! Every host API v1 import, called in any order with any arguments over a
//! 64 KiB guest memory whose bytes (keys, names, values) are the fuzzer's
//! too: the bodies every engine shares (`luge_core::hostapi::imports`),
//! driven as Wasmer and WAMR drive them. Each call answers a count or a
//! host API code (-1 to -8), never a panic, and no host allocation is
//! larger than the guest's memory and a little more: a guest cannot make
//! the host allocate what it does not have (the allocator aborts past
//! [`MAX_ALLOCATION`]).
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use luge_core::calls::{
    CallError, CallMode, CallResult, CallStatus, CallTable, Calls, PendingCall,
};
use luge_core::hostapi::{self, Host, Parts, SliceMemory, Step, imports};
use luge_core::state::State;

const GUEST_MEMORY: usize = 64 << 10;
/// The guest's memory, an echoed call's output of that size, and room.
const MAX_ALLOCATION: usize = 4 * GUEST_MEMORY;

/// Aborts on any single allocation past [`MAX_ALLOCATION`].
struct Bounded;

// SAFETY: every call is forwarded to `System` unchanged after a size check
// that neither allocates nor unwinds.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            std::process::abort();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            std::process::abort();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

/// An argument: mostly small (pointers and lengths inside the memory),
/// sometimes anything.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Arg {
    Small(u16),
    Tiny(u8),
    Negative(i8),
    Any(i64),
}

impl Arg {
    fn value(self) -> i64 {
        match self {
            Self::Small(v) => i64::from(v),
            Self::Tiny(v) => i64::from(v),
            Self::Negative(v) => -i64::from(v.unsigned_abs()),
            Self::Any(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Call {
    import: u8,
    args: [Arg; 7],
}

#[derive(Arbitrary, Debug)]
struct Program {
    memory: Vec<u8>,
    calls: Vec<Call>,
}

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

#[path = "support/map_state.rs"]
mod map_state;
use map_state::MapState;

struct FuzzHost {
    memory: Vec<u8>,
    calls: CallTable,
    state: Arc<dyn State>,
}

impl Host for FuzzHost {
    fn with<R>(&mut self, f: impl FnOnce(Parts<'_>) -> R) -> R {
        f(Parts {
            memory: &mut SliceMemory(&mut self.memory),
            calls: &mut self.calls,
            state: Some(&self.state),
        })
    }
}

fn run(p: Parts<'_>, import: u8, a: [i64; 7]) -> Step {
    let i = |n: usize| a[n] as i32;
    match import % 13 {
        0 => imports::call_start(p, i(0), i(1), i(2), i(3)),
        1 => imports::call_wait(p, a[0]),
        2 => imports::call_output(p, a[0], i(1), i(2)),
        3 => imports::state_get(p, i(0), i(1), i(2), i(3), i(4)),
        4 => imports::state_set(p, i(0), i(1), i(2), i(3), i(4)),
        5 => imports::state_delete(p, i(0), i(1), i(2)),
        6 => imports::state_append(p, i(0), i(1), i(2), i(3), i(4)),
        7 => imports::state_cas(p, i(0), i(1), i(2), i(3), i(4), i(5), i(6)),
        8 => imports::state_add(p, i(0), i(1), a[2], i(3)),
        9 => imports::state_pull(p, i(0), i(1)),
        10 => imports::state_push(p, i(0), i(1)),
        11 => imports::state_lock(p, i(0), i(1), i(2).clamp(-1, 50)),
        _ => imports::state_unlock(p, i(0), i(1)),
    }
}

fuzz_target!(|program: Program| {
    let mut memory = program.memory;
    memory.resize(GUEST_MEMORY, 0);
    let mut host = FuzzHost {
        memory,
        calls: CallTable::new(Some(Arc::new(Echo)), CallMode::Fused),
        state: Arc::new(MapState::default()),
    };
    for call in program.calls.iter().take(512) {
        let args = call.args.map(Arg::value);
        let step = host.with(|parts| run(parts, call.import, args));
        let result = hostapi::drive_blocking(&mut host, step);
        // A count, a value (state_add's, call_start's handle) or a code.
        let counts_or_values = matches!(call.import % 13, 0 | 2 | 3 | 6 | 8);
        assert!(
            counts_or_values || (-8..=i64::from(i32::MAX)).contains(&result),
            "{call:?} answered {result}"
        );
        assert_eq!(
            host.memory.len(),
            GUEST_MEMORY,
            "the guest's memory changed size"
        );
    }
});
