//! The body of every host API v1 import, once for all engines.
//!
//! Each body checks the guest's arguments (through [`Guest`], before any
//! host allocation), then either answers at once ([`Step::Done`]) or says
//! what to wait for: a callee ([`Step::Call`]), a state operation
//! ([`Step::State`], which an engine that parks runs off its worker when it
//! goes to the global tier), or a lock back-off ([`Step::Lock`]). The
//! drivers in [`super`] run a step to the value the guest reads.
//!
//! Codes are host API v1's: -1 absent, -2 not granted, -3 bad argument,
//! -4 over a quota, -5 store unavailable, -6 busy, -7 depth, -8 invalid
//! handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Parts;
use super::memory::{Guest, MemoryError};
use crate::calls::{CallError, CallResult, MAX_CALL_NAME_BYTES, PendingCall};
use crate::state::{MAX_KEY_BYTES, State, StateError, Tier};

impl From<MemoryError> for CallError {
    fn from(_: MemoryError) -> Self {
        Self::BadArgument
    }
}

impl From<MemoryError> for StateError {
    fn from(_: MemoryError) -> Self {
        Self::BadArgument
    }
}

/// Where an import is on its way to the guest's result.
pub enum Step {
    /// The guest reads this (the engine narrows it to the import's type;
    /// `i32` results are codes and small counts).
    Done(i64),
    /// Await the callee, then [`finish_call`].
    Call {
        /// The call's handle.
        handle: i64,
        /// The callee.
        pending: PendingCall,
    },
    /// Perform the state operation ([`StateCall::perform`]), then
    /// complete it ([`StateDone::complete`]).
    State(StateCall),
    /// Sleep, then try the lock again.
    Lock(LockRetry),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done(value) => write!(f, "Done({value})"),
            Self::Call { handle, .. } => write!(f, "Call({handle})"),
            Self::State(call) => write!(f, "State({:?})", call.op),
            Self::Lock(retry) => write!(f, "Lock(after {:?})", retry.after),
        }
    }
}

fn code<T: Into<i64>, E: Into<i64>>(result: Result<T, E>) -> Step {
    Step::Done(result.map_or_else(Into::into, Into::into))
}

impl From<CallError> for i64 {
    fn from(e: CallError) -> Self {
        i64::from(e.code())
    }
}

impl From<StateError> for i64 {
    fn from(e: StateError) -> Self {
        i64::from(e.code())
    }
}

// ---- calls -----------------------------------------------------------

/// `call_start`: a handle, or why not.
pub fn call_start(p: Parts<'_>, name_ptr: i32, name_len: i32, in_ptr: i32, in_len: i32) -> Step {
    let started = (|| {
        if usize::try_from(name_len).map_or(true, |n| n == 0 || n > MAX_CALL_NAME_BYTES) {
            return Err(CallError::BadArgument);
        }
        let mut guest = Guest(p.memory);
        let name = String::from_utf8(guest.read(name_ptr, name_len)?)
            .map_err(|_| CallError::BadArgument)?;
        let input = guest.read(in_ptr, in_len)?;
        p.calls.start(&name, input)
    })();
    code(started)
}

/// `call_wait`: the callee to await.
pub fn call_wait(p: Parts<'_>, handle: i64) -> Step {
    match p.calls.take(handle) {
        Ok(pending) => Step::Call { handle, pending },
        Err(e) => code::<i64, _>(Err(e)),
    }
}

/// The end of `call_wait`: keeps the callee's result for `call_output`.
pub fn finish_call(p: Parts<'_>, handle: i64, result: CallResult) -> Step {
    Step::Done(i64::from(p.calls.finish(handle, result)))
}

/// `call_output`: the callee's whole output length; copies what fits.
pub fn call_output(p: Parts<'_>, handle: i64, buf_ptr: i32, buf_len: i32) -> Step {
    let copied = (|| {
        let mut guest = Guest(p.memory);
        guest.check(buf_ptr, buf_len)?;
        let output = p.calls.output(handle)?;
        let room = usize::try_from(buf_len).unwrap_or(0);
        guest.write(buf_ptr, &output[..output.len().min(room)])?;
        Ok::<i64, CallError>(output.len() as i64)
    })();
    code(copied)
}

// ---- state -----------------------------------------------------------

/// Longest lease a guest may ask for: a lock outliving this is a bug or an
/// attack (the host releases it at the invocation's end anyway).
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// The first back-off of a held lock; it doubles up to
/// [`MAX_LOCK_BACKOFF`].
const FIRST_LOCK_BACKOFF: Duration = Duration::from_micros(200);

/// Longest back-off between two attempts at a held lock.
pub const MAX_LOCK_BACKOFF: Duration = Duration::from_millis(10);

/// The time one more lock attempt needs of its own (a global-tier round
/// trip): `state_lock` gives up while the invocation would still have it.
const LOCK_ATTEMPT: Duration = Duration::from_millis(5);

/// A state operation, its arguments copied out of guest memory.
#[derive(Debug)]
enum Op {
    Get {
        key: String,
    },
    Set {
        key: String,
        value: Vec<u8>,
    },
    Delete {
        key: String,
    },
    Append {
        key: String,
        value: Vec<u8>,
    },
    Cas {
        key: String,
        old: Option<Vec<u8>>,
        new: Vec<u8>,
    },
    Add {
        key: String,
        delta: i64,
    },
    Pull {
        key: String,
    },
    Push {
        key: String,
    },
    Lock {
        key: String,
        lease: Duration,
        backoff: Duration,
    },
    Unlock {
        key: String,
    },
}

/// A checked state operation, ready to perform: owned, so an engine may
/// perform it on another thread.
#[derive(Debug)]
pub struct StateCall {
    op: Op,
    tier: Tier,
    /// `state_get`'s buffer.
    buf: (i32, i32),
}

/// What the operation gave.
#[derive(Debug)]
enum Value {
    Bytes(Arc<[u8]>),
    Unit,
    Count(u64),
    Flag(bool),
    Counter(i64),
}

/// A performed state operation, to complete against guest memory.
#[derive(Debug)]
pub struct StateDone {
    result: Result<Value, StateError>,
    buf: (i32, i32),
    /// A lock attempt: its key, lease and the back-off just slept.
    lock: Option<(String, Duration, Duration)>,
}

impl StateCall {
    fn step(op: Op, flags: i32) -> Step {
        Step::State(Self {
            op,
            tier: Tier::of(flags),
            buf: (0, 0),
        })
    }

    /// Whether performing it may wait on the global tier (a network round
    /// trip): what an engine that parks runs off its worker.
    pub fn is_remote(&self) -> bool {
        self.tier == Tier::Global
            || matches!(
                self.op,
                Op::Pull { .. } | Op::Push { .. } | Op::Lock { .. } | Op::Unlock { .. }
            )
    }

    /// Performs it on `state` (`None`: the invocation has no state).
    pub fn perform(self, state: Option<&dyn State>) -> StateDone {
        let tier = self.tier;
        let mut lock = None;
        let result = match state {
            None => Err(StateError::NotGranted),
            Some(s) => match self.op {
                Op::Get { key } => s.get(&key, tier).map(Value::Bytes),
                Op::Set { key, value } => s.set(&key, &value, tier).map(|()| Value::Unit),
                Op::Delete { key } => s.delete(&key, tier).map(|()| Value::Unit),
                Op::Append { key, value } => s.append(&key, &value, tier).map(Value::Count),
                Op::Cas { key, old, new } => {
                    s.cas(&key, old.as_deref(), &new, tier).map(Value::Flag)
                }
                Op::Add { key, delta } => s.add(&key, delta, tier).map(Value::Counter),
                Op::Pull { key } => s.pull(&key).map(|()| Value::Unit),
                Op::Push { key } => s.push(&key).map(|()| Value::Unit),
                Op::Unlock { key } => s.unlock(&key).map(|()| Value::Unit),
                Op::Lock {
                    key,
                    lease,
                    backoff,
                } => {
                    let taken = s.try_lock(&key, lease).map(Value::Flag);
                    lock = Some((key, lease, backoff));
                    taken
                }
            },
        };
        StateDone {
            result,
            buf: self.buf,
            lock,
        }
    }
}

impl StateDone {
    /// An operation that could not be performed at all (the thread it was
    /// sent to is gone): the store is unavailable to the guest.
    pub fn unavailable() -> Self {
        Self {
            result: Err(StateError::Unavailable),
            buf: (0, 0),
            lock: None,
        }
    }

    /// What the guest reads, or the next step (a held lock backs off).
    pub fn complete(self, p: Parts<'_>) -> Step {
        let value = match self.result {
            Ok(value) => value,
            Err(e) => return code::<i64, _>(Err(e)),
        };
        match (value, self.lock) {
            (Value::Flag(false), Some((key, lease, backoff))) => {
                let after = (backoff * 2).min(MAX_LOCK_BACKOFF);
                let until = p.state.map_or_else(Instant::now, |s| s.wait_until());
                if Instant::now() + after + LOCK_ATTEMPT >= until {
                    code::<i64, _>(Err(StateError::Busy))
                } else {
                    Step::Lock(LockRetry { key, lease, after })
                }
            }
            (Value::Flag(true), Some(_)) => Step::Done(0),
            (Value::Bytes(value), _) => {
                let (ptr, len) = self.buf;
                let room = usize::try_from(len).unwrap_or(0);
                let written = Guest(p.memory).write(ptr, &value[..value.len().min(room)]);
                code(
                    written
                        .map(|()| value.len() as i64)
                        .map_err(StateError::from),
                )
            }
            (Value::Unit, _) => Step::Done(0),
            (Value::Count(n), _) => Step::Done(i64::try_from(n).unwrap_or(i64::MAX)),
            (Value::Flag(flag), None) => Step::Done(i64::from(flag)),
            (Value::Counter(n), _) => Step::Done(n),
        }
    }
}

/// A held lock, to try again after a back-off.
#[derive(Debug)]
pub struct LockRetry {
    key: String,
    lease: Duration,
    /// How long to sleep first.
    pub after: Duration,
}

impl LockRetry {
    /// The next attempt, once [`LockRetry::after`] has been slept.
    pub fn attempt(self) -> StateCall {
        StateCall {
            op: Op::Lock {
                key: self.key,
                lease: self.lease,
                backoff: self.after,
            },
            tier: Tier::Global,
            buf: (0, 0),
        }
    }
}

/// A key the guest names: 1 to [`MAX_KEY_BYTES`] bytes of UTF-8.
fn key(guest: &mut Guest<'_>, ptr: i32, len: i32) -> Result<String, StateError> {
    if usize::try_from(len).map_or(true, |len| len == 0 || len > MAX_KEY_BYTES) {
        return Err(StateError::BadArgument);
    }
    String::from_utf8(guest.read(ptr, len)?).map_err(|_| StateError::BadArgument)
}

/// Runs `prepare` on the guest's memory: a state call, or the code of why
/// not.
fn prepared(
    p: Parts<'_>,
    prepare: impl FnOnce(&mut Guest<'_>) -> Result<Step, StateError>,
) -> Step {
    prepare(&mut Guest(p.memory)).unwrap_or_else(|e| code::<i64, _>(Err(e)))
}

/// `state_get`: the value's length, its first `buf_len` bytes copied.
pub fn state_get(
    p: Parts<'_>,
    key_ptr: i32,
    key_len: i32,
    buf_ptr: i32,
    buf_len: i32,
    flags: i32,
) -> Step {
    prepared(p, |g| {
        let key = key(g, key_ptr, key_len)?;
        g.check(buf_ptr, buf_len)?;
        Ok(Step::State(StateCall {
            op: Op::Get { key },
            tier: Tier::of(flags),
            buf: (buf_ptr, buf_len),
        }))
    })
}

/// An import that takes a key and a value: both read from the guest,
/// then `op` of them.
fn keyed_value(
    p: Parts<'_>,
    (key_ptr, key_len): (i32, i32),
    (val_ptr, val_len): (i32, i32),
    flags: i32,
    op: fn(String, Vec<u8>) -> Op,
) -> Step {
    prepared(p, |g| {
        let key = key(g, key_ptr, key_len)?;
        let value = g.read(val_ptr, val_len)?;
        Ok(StateCall::step(op(key, value), flags))
    })
}

/// `state_set`: 0.
pub fn state_set(
    p: Parts<'_>,
    key_ptr: i32,
    key_len: i32,
    val_ptr: i32,
    val_len: i32,
    flags: i32,
) -> Step {
    let set = |key, value| Op::Set { key, value };
    keyed_value(p, (key_ptr, key_len), (val_ptr, val_len), flags, set)
}

/// `state_delete`: 0, or -1 if absent.
pub fn state_delete(p: Parts<'_>, key_ptr: i32, key_len: i32, flags: i32) -> Step {
    prepared(p, |g| {
        let key = key(g, key_ptr, key_len)?;
        Ok(StateCall::step(Op::Delete { key }, flags))
    })
}

/// `state_append`: the new length.
pub fn state_append(
    p: Parts<'_>,
    key_ptr: i32,
    key_len: i32,
    val_ptr: i32,
    val_len: i32,
    flags: i32,
) -> Step {
    let append = |key, value| Op::Append { key, value };
    keyed_value(p, (key_ptr, key_len), (val_ptr, val_len), flags, append)
}

/// `state_cas`: 1 swapped, 0 not; `old_len` -1 means "only if absent".
#[allow(clippy::too_many_arguments)] // the import's signature
pub fn state_cas(
    p: Parts<'_>,
    key_ptr: i32,
    key_len: i32,
    old_ptr: i32,
    old_len: i32,
    new_ptr: i32,
    new_len: i32,
    flags: i32,
) -> Step {
    prepared(p, |g| {
        let key = key(g, key_ptr, key_len)?;
        let old = match old_len {
            -1 => None,
            len => Some(g.read(old_ptr, len)?),
        };
        let new = g.read(new_ptr, new_len)?;
        Ok(StateCall::step(Op::Cas { key, old, new }, flags))
    })
}

/// `state_add`: the counter's new value.
pub fn state_add(p: Parts<'_>, key_ptr: i32, key_len: i32, delta: i64, flags: i32) -> Step {
    prepared(p, |g| {
        let key = key(g, key_ptr, key_len)?;
        Ok(StateCall::step(Op::Add { key, delta }, flags))
    })
}

/// An import that takes only a key (pull, push, unlock: global by
/// nature, so no tier flag).
fn keyed(p: Parts<'_>, (key_ptr, key_len): (i32, i32), op: fn(String) -> Op) -> Step {
    prepared(p, |g| Ok(StateCall::step(op(key(g, key_ptr, key_len)?), 0)))
}

/// `state_pull`: 0.
pub fn state_pull(p: Parts<'_>, key_ptr: i32, key_len: i32) -> Step {
    keyed(p, (key_ptr, key_len), |key| Op::Pull { key })
}

/// `state_push`: 0.
pub fn state_push(p: Parts<'_>, key_ptr: i32, key_len: i32) -> Step {
    keyed(p, (key_ptr, key_len), |key| Op::Push { key })
}

/// `state_unlock`: 0.
pub fn state_unlock(p: Parts<'_>, key_ptr: i32, key_len: i32) -> Step {
    keyed(p, (key_ptr, key_len), |key| Op::Unlock { key })
}

/// `state_lock`: 0 once taken, or -6 if it stays held while the
/// invocation has time.
pub fn state_lock(p: Parts<'_>, key_ptr: i32, key_len: i32, lease_ms: i32) -> Step {
    prepared(p, |g| {
        let key = key(g, key_ptr, key_len)?;
        let lease = u64::try_from(lease_ms)
            .map(Duration::from_millis)
            .map_err(|_| StateError::BadArgument)?;
        if lease.is_zero() || lease > MAX_LEASE {
            return Err(StateError::BadArgument);
        }
        Ok(Step::State(
            LockRetry {
                key,
                lease,
                after: FIRST_LOCK_BACKOFF / 2,
            }
            .attempt(),
        ))
    })
}
