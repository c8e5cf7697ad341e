//! What a guest hands the host as times, sizes and values through the
//! capabilities' interfaces, with anything the fuzzer likes:
//!
//! - `wasi:otel` times (`luge_core::trace::guest_time`): never an
//!   overflow, exact where OTLP can carry the time, clamped past it;
//! - key-value buckets (`luge_core::keyvalue`, what `spin:key-value`,
//!   Spin 2's and `wasi:keyvalue` bind to): any identifier, key, value,
//!   delta and compare-and-swap, over a state store in one map;
//! - SQLite statements and parameters (`luge_sqlite`, what `spin:sqlite`
//!   binds to): statements from a small grammar or raw text, parameters of
//!   every type (NaN, infinities, empty and large text and blobs), on one
//!   hardened connection, each bounded by a deadline and a result bound.
//!
//! Each answers a value or an error, never a panic; no single host
//! allocation is larger than [`MAX_ALLOCATION`] (the allocator aborts
//! past it).
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use luge_core::keyvalue;

#[path = "support/map_state.rs"]
mod map_state;
use map_state::MapState;

/// SQLite's own bound on a value (`luge_sqlite::MAX_VALUE_BYTES`, 16 MiB)
/// and room for its copies.
const MAX_ALLOCATION: usize = 64 << 20;

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

#[derive(Arbitrary, Debug)]
enum KvOp {
    Get(String),
    Set(String, Vec<u8>),
    Delete(String),
    Exists(String),
    Keys,
    Increment(String, u64),
    Add(String, i64),
    Swap(String, Vec<u8>),
    SetMany(Vec<(String, Vec<u8>)>),
    GetMany(Vec<String>),
}

#[derive(Arbitrary, Debug)]
enum SqlValue {
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// A text or blob of this many KiB (at most 32 MiB: past SQLite's
    /// bound on a value, which must refuse it).
    Large(bool, u16),
    Null,
}

impl SqlValue {
    fn value(self) -> luge_sqlite::Value {
        use luge_sqlite::Value;
        match self {
            Self::Integer(i) => Value::Integer(i),
            Self::Real(r) => Value::Real(r),
            Self::Text(t) => Value::Text(t),
            Self::Blob(b) => Value::Blob(b),
            Self::Large(text, kib) => {
                let len = (usize::from(kib) % (32 << 10)) << 10;
                if text {
                    Value::Text("x".repeat(len))
                } else {
                    Value::Blob(vec![0; len])
                }
            }
            Self::Null => Value::Null,
        }
    }
}

/// Statements of the grammar: each with the parameters it binds.
const STATEMENTS: &[&str] = &[
    "INSERT INTO t (a, b) VALUES (?, ?)",
    "SELECT a, b, typeof(a), length(b) FROM t WHERE a = ? OR b = ?",
    "UPDATE t SET b = ? WHERE a = ?",
    "DELETE FROM t WHERE a = ? OR b = ?",
    "SELECT ?, ?",
    "SELECT zeroblob(?) AS z, ? AS w",
    "SELECT substr(?, 1, 10), hex(?)",
    "CREATE TEMP TABLE IF NOT EXISTS tt AS SELECT ? AS a, ? AS b",
    "SELECT count(*) FROM t WHERE a > ? AND a < ?",
];

#[derive(Arbitrary, Debug)]
enum Sql {
    Grammar(u8, Vec<SqlValue>),
    Raw(String, Vec<SqlValue>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    times: Vec<(u64, u32)>,
    bucket: String,
    global: Vec<String>,
    kv: Vec<KvOp>,
    sql: Vec<Sql>,
}

/// Runs `future`, which completes without waiting: outside a tokio
/// runtime `luge_sqlite` runs its work inline.
fn now<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
}

/// One hardened connection for the whole run.
fn connection() -> &'static luge_sqlite::Connection {
    static CONNECTION: OnceLock<luge_sqlite::Connection> = OnceLock::new();
    CONNECTION.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("luge-fuzz-sqlite-{}", std::process::id()));
        let databases = luge_sqlite::Databases::new(Some(dir));
        let granted = ["default".to_owned()];
        let connection = now(databases.open(
            "default",
            &granted,
            "fuzz",
            Instant::now() + Duration::from_secs(10),
        ))
        .expect("a fresh database opens");
        now(connection.execute(
            "CREATE TABLE IF NOT EXISTS t (a, b)".to_owned(),
            Vec::new(),
            Instant::now() + Duration::from_secs(10),
            1 << 20,
        ))
        .expect("the table is made");
        connection
    })
}

fuzz_target!(|input: Input| {
    for (seconds, nanoseconds) in input.times {
        let time = luge_core::trace::guest_time(seconds, nanoseconds);
        let since = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("never before the epoch");
        let exact = u128::from(seconds) * 1_000_000_000 + u128::from(nanoseconds.min(999_999_999));
        assert_eq!(since.as_nanos(), exact.min(u128::from(u64::MAX)));
    }

    let state = MapState::default();
    if let Ok(bucket) = keyvalue::open(&input.bucket, &input.global) {
        for op in input.kv.into_iter().take(64) {
            match op {
                KvOp::Get(key) => drop(bucket.get(&state, &key)),
                KvOp::Set(key, value) => drop(bucket.set(&state, &key, &value)),
                KvOp::Delete(key) => drop(bucket.delete(&state, &key)),
                KvOp::Exists(key) => drop(bucket.exists(&state, &key)),
                KvOp::Keys => drop(bucket.all_keys(&state)),
                KvOp::Increment(key, delta) => drop(bucket.increment(&state, &key, delta)),
                KvOp::Add(key, delta) => drop(bucket.add(&state, &key, delta)),
                KvOp::Swap(key, value) => {
                    if let Ok(cas) = bucket.cas(&state, &key) {
                        drop(cas.swap(&state, &value));
                    }
                }
                KvOp::SetMany(pairs) => drop(bucket.set_many(&state, &pairs)),
                KvOp::GetMany(keys) => drop(bucket.get_many(&state, keys)),
            }
        }
    }

    let connection = connection();
    for sql in input.sql.into_iter().take(8) {
        let (statement, parameters) = match sql {
            Sql::Grammar(which, parameters) => (
                STATEMENTS[usize::from(which) % STATEMENTS.len()].to_owned(),
                parameters,
            ),
            Sql::Raw(text, parameters) => (text, parameters),
        };
        let parameters = parameters
            .into_iter()
            .take(4)
            .map(SqlValue::value)
            .collect();
        let _ = now(connection.execute(
            statement,
            parameters,
            Instant::now() + Duration::from_millis(200),
            1 << 20,
        ));
    }
});
