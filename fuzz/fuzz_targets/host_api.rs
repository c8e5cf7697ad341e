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
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use luge_core::calls::{
    CallError, CallMode, CallResult, CallStatus, CallTable, Calls, PendingCall,
};
use luge_core::hostapi::{self, Host, Parts, SliceMemory, Step, imports};
use luge_core::state::{State, StateError, Tier};

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

/// Both tiers in one map.
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
        if entry.len() + value.len() > GUEST_MEMORY {
            return Err(StateError::OverQuota);
        }
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
        Instant::now() + Duration::from_millis(10)
    }
}

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
