//! Calls between functions (host API v1, import module `luge`): the
//! contract between an engine, which reads and writes guest memory, and the
//! host, which finds, admits and schedules the callee.
//!
//! A host that allows calls gives each invocation a [`Calls`] value; the
//! engine turns `call_start` into [`Calls::start`] and `call_wait` into
//! awaiting the returned [`PendingCall`]. Everything a callee's failure can
//! be is a [`CallStatus`] or [`CallError`] the caller reads, never a trap in
//! the caller.

use std::future::Future;
use std::pin::Pin;

use crate::outcome::Termination;

/// Longest function name a call may give (names are short identifiers;
/// anything longer is a bad argument, not a lookup).
pub const MAX_CALL_NAME_BYTES: usize = 256;

/// Calls one invocation may start: a fan-out wider than this is a program
/// bug or an attack, and each call holds an admission place.
pub const MAX_CALLS_PER_INVOCATION: usize = 256;

/// Nesting of calls (a caller's callee's callee...): a cycle of functions
/// that call each other ends here with [`CallError::Depth`], never in a hang.
pub const MAX_CALL_DEPTH: u32 = 8;

/// Input bytes one invocation may send to its callees in all, and output
/// bytes it may hold from them: a bound on the memory one caller pins.
pub const MAX_CALL_BYTES: usize = 64 << 20;

/// How a callee ended (`call_wait`'s non-negative results).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// Exited with 0.
    Success = 0,
    /// Exited with another code, or could not be started.
    Failed = 1,
    /// Trapped (or was stopped for another reason).
    Trapped = 2,
    /// Ran past its time limit.
    TimeLimit = 3,
    /// Ran past its memory limit.
    MemoryLimit = 4,
}

impl CallStatus {
    /// A short name for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Trapped => "trapped",
            Self::TimeLimit => "time_limit",
            Self::MemoryLimit => "memory_limit",
        }
    }

    /// The status a callee's termination is to its caller.
    pub fn of(termination: &Termination) -> Self {
        match termination {
            Termination::Exited(0) => Self::Success,
            Termination::Exited(_) | Termination::Failed(_) => Self::Failed,
            Termination::TimedOut(_) => Self::TimeLimit,
            Termination::OutOfMemory { .. } => Self::MemoryLimit,
            _ => Self::Trapped,
        }
    }
}

/// Why a call was refused (host API v1's negative codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No function has that name.
    #[error("no function is called so")]
    NotFound = -1,
    /// The caller's metadata does not list the callee in `calls`.
    #[error("the caller may not call it (not in its `calls`)")]
    NotGranted = -2,
    /// A name or buffer the guest passed is unusable.
    #[error("bad argument")]
    BadArgument = -3,
    /// Over a bound: calls per invocation or bytes in flight.
    #[error("over the calls or bytes an invocation may have")]
    OverQuota = -4,
    /// The host is at its admission bound.
    #[error("the host is overloaded")]
    Busy = -6,
    /// The call would nest deeper than [`MAX_CALL_DEPTH`].
    #[error("calls nest deeper than {MAX_CALL_DEPTH}")]
    Depth = -7,
    /// No call has that handle (or it was already waited for and read).
    #[error("no call has that handle")]
    InvalidHandle = -8,
}

impl CallError {
    /// The code the guest reads.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// A short name for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::NotGranted => "not_granted",
            Self::BadArgument => "bad_argument",
            Self::OverQuota => "over_quota",
            Self::Busy => "busy",
            Self::Depth => "depth",
            Self::InvalidHandle => "invalid_handle",
        }
    }
}

/// What a finished call left: its status and its whole stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// How it ended.
    pub status: CallStatus,
    /// Its stdout.
    pub output: Vec<u8>,
}

/// A started call; resolves when the callee has ended. Awaiting it parks
/// the caller (on engines that can park) without holding a worker.
pub type PendingCall = Pin<Box<dyn Future<Output = CallResult> + Send>>;

/// How a callee runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    /// Scheduled at once on the host's workers; the caller awaits it (an
    /// engine that parks a waiting sandbox).
    Scheduled,
    /// Fused: run on the caller's own thread when the caller waits for it
    /// (Pyrosome's fused execution). For engines whose sandboxes cannot
    /// park: a caller blocking a worker on a callee that needs a worker
    /// could deadlock a host whose every worker is such a caller.
    Fused,
}

/// The host's side of calls, one per invocation: it knows the caller's
/// grants, depth and deadline.
pub trait Calls: Send + Sync {
    /// Starts `name` on `input`, under the caller's deadline: at once
    /// ([`CallMode::Scheduled`]) or when first polled ([`CallMode::Fused`]).
    fn start(&self, name: &str, input: Vec<u8>, mode: CallMode) -> Result<PendingCall, CallError>;

    /// Starts the HTTP handler `name` on `request`: service chaining, an
    /// outgoing request of the caller's to `http://NAME.luge.internal/...`
    /// (see [`crate::capabilities::chained_function`]), admitted, scheduled
    /// and bounded like [`Calls::start`]. Hosts without it refuse it.
    fn start_http(
        &self,
        name: &str,
        request: crate::handler::Request,
    ) -> Result<PendingHttp, CallError> {
        let _ = (name, request);
        Err(CallError::NotGranted)
    }
}

/// A started chained request; resolves to the callee's response head (its
/// body streams on) or to why it gave none.
pub type PendingHttp = Pin<
    Box<dyn Future<Output = Result<crate::handler::Response, crate::handler::HandlerError>> + Send>,
>;

/// A host where calls cannot be made (e.g. an OpenWhisk action container,
/// whose invocations must go through the controller): every `call_start`
/// is refused with [`CallError::NotGranted`], and counted, so the host can
/// tell the function's developer why in the invocation's logs.
#[derive(Debug)]
pub struct Refused {
    why: &'static str,
    count: std::sync::atomic::AtomicUsize,
}

impl Refused {
    /// Refuses every call, for the reason `why` (one sentence).
    pub fn new(why: &'static str) -> Self {
        Self {
            why,
            count: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The line for the invocation's log, if a call was refused.
    pub fn log_line(&self) -> Option<String> {
        let count = self.count.load(std::sync::atomic::Ordering::Relaxed);
        (count > 0).then(|| format!("luge: {count} call(s) refused: {}", self.why))
    }
}

impl Calls for Refused {
    fn start(&self, _: &str, _: Vec<u8>, _: CallMode) -> Result<PendingCall, CallError> {
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(CallError::NotGranted)
    }
}

/// One invocation's calls, as every engine keeps them: handles, results,
/// and the per-invocation bounds. Engines only copy bytes between guest
/// memory and this table.
pub struct CallTable {
    host: Option<std::sync::Arc<dyn Calls>>,
    mode: CallMode,
    slots: Vec<Slot>,
    bytes: usize,
}

enum Slot {
    Pending(PendingCall),
    /// Being awaited (its future moved out of the table).
    Waiting,
    Done(CallResult),
}

impl std::fmt::Debug for CallTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallTable")
            .field("calls", &self.slots.len())
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl CallTable {
    /// The table of an invocation whose host is `host` (`None`: no calls),
    /// on an engine whose callees run as `mode` says.
    pub fn new(host: Option<std::sync::Arc<dyn Calls>>, mode: CallMode) -> Self {
        Self {
            host,
            mode,
            slots: Vec::new(),
            bytes: 0,
        }
    }

    /// `call_start`: a handle, or a [`CallError`].
    pub fn start(&mut self, name: &str, input: Vec<u8>) -> Result<i64, CallError> {
        if name.is_empty() || name.len() > MAX_CALL_NAME_BYTES {
            return Err(CallError::BadArgument);
        }
        let host = self.host.as_ref().ok_or(CallError::NotGranted)?;
        if self.slots.len() >= MAX_CALLS_PER_INVOCATION || self.bytes + input.len() > MAX_CALL_BYTES
        {
            return Err(CallError::OverQuota);
        }
        let bytes = input.len();
        let pending = host.start(name, input, self.mode)?;
        self.bytes += bytes;
        self.slots.push(Slot::Pending(pending));
        Ok(self.slots.len() as i64 - 1)
    }

    /// The first half of `call_wait`: the call to await. A call already
    /// finished gives a ready future.
    pub fn take(&mut self, handle: i64) -> Result<PendingCall, CallError> {
        let slot = usize::try_from(handle)
            .ok()
            .and_then(|i| self.slots.get_mut(i))
            .ok_or(CallError::InvalidHandle)?;
        match std::mem::replace(slot, Slot::Waiting) {
            Slot::Pending(pending) => Ok(pending),
            Slot::Done(result) => {
                // Counted again by `finish`.
                self.bytes -= result.output.len();
                Ok(Box::pin(std::future::ready(result)))
            }
            Slot::Waiting => Err(CallError::InvalidHandle),
        }
    }

    /// The second half of `call_wait`: keeps `result` for `call_output`
    /// and gives the status the guest reads (output past the byte bound is
    /// refused as [`CallError::OverQuota`]).
    pub fn finish(&mut self, handle: i64, result: CallResult) -> i32 {
        let Some(slot) = usize::try_from(handle)
            .ok()
            .and_then(|i| self.slots.get_mut(i))
        else {
            return CallError::InvalidHandle.code();
        };
        if self.bytes + result.output.len() > MAX_CALL_BYTES {
            *slot = Slot::Done(CallResult {
                status: result.status,
                output: Vec::new(),
            });
            return CallError::OverQuota.code();
        }
        self.bytes += result.output.len();
        let status = result.status as i32;
        *slot = Slot::Done(result);
        status
    }

    /// `call_wait` for engines that cannot park: blocks this thread.
    pub fn wait_blocking(&mut self, handle: i64) -> i32 {
        match self.take(handle) {
            Ok(pending) => {
                let result = block_on(pending);
                self.finish(handle, result)
            }
            Err(e) => e.code(),
        }
    }

    /// `call_output`'s bytes: the whole stdout of a waited call.
    pub fn output(&self, handle: i64) -> Result<&[u8], CallError> {
        match usize::try_from(handle).ok().and_then(|i| self.slots.get(i)) {
            Some(Slot::Done(result)) => Ok(&result.output),
            _ => Err(CallError::InvalidHandle),
        }
    }
}

/// Runs `future` to completion on this thread (for engines whose sandbox
/// cannot yield): parks between wake-ups.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

/// The calls of the invocation running on this thread, for engines whose
/// guest runs on the calling thread and cannot park (Wasmer, WAMR): their
/// host functions have no per-instance state to hang a [`CallTable`] on, so
/// it lives here while the guest's entry call runs. Callees are fused: a
/// callee run by `wait` on this thread installs its own table and puts the
/// caller's back.
pub mod on_this_thread {
    use std::cell::RefCell;

    use super::CallTable;

    thread_local! {
        static CURRENT: RefCell<Option<CallTable>> = const { RefCell::new(None) };
    }

    /// Puts the previous table back when dropped (also on unwind).
    struct Restore(Option<CallTable>);

    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }

    /// Runs `f` (the guest's entry call) with `table` as this thread's.
    pub fn with<R>(table: CallTable, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|current| current.replace(Some(table)));
        let _restore = Restore(previous);
        f()
    }

    /// Runs `f` with this thread's table (an empty one, which grants no
    /// calls, when no invocation installed one). The table is borrowed
    /// only while `f` runs: never while a fused callee runs.
    pub fn with_table<R>(f: impl FnOnce(&mut CallTable) -> R) -> R {
        CURRENT.with(|current| match current.borrow_mut().as_mut() {
            Some(table) => f(table),
            None => f(&mut CallTable::new(None, super::CallMode::Fused)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_host_api_v1s() {
        assert_eq!(CallError::NotFound.code(), -1);
        assert_eq!(CallError::NotGranted.code(), -2);
        assert_eq!(CallError::Busy.code(), -6);
        assert_eq!(CallError::Depth.code(), -7);
        assert_eq!(CallError::InvalidHandle.code(), -8);
        assert_eq!(CallStatus::of(&Termination::Exited(0)), CallStatus::Success);
        assert_eq!(CallStatus::of(&Termination::Exited(3)), CallStatus::Failed);
    }

    struct Echo;
    impl Calls for Echo {
        fn start(&self, name: &str, input: Vec<u8>, _: CallMode) -> Result<PendingCall, CallError> {
            if name != "echo" {
                return Err(CallError::NotGranted);
            }
            Ok(Box::pin(std::future::ready(CallResult {
                status: CallStatus::Success,
                output: input,
            })))
        }
    }

    #[test]
    fn a_table_starts_waits_and_reads() {
        let mut table = CallTable::new(Some(std::sync::Arc::new(Echo)), CallMode::Fused);
        let a = table.start("echo", b"one".to_vec()).unwrap();
        let b = table.start("echo", b"two".to_vec()).unwrap();
        assert_eq!(table.start("other", Vec::new()), Err(CallError::NotGranted));
        let long = "x".repeat(MAX_CALL_NAME_BYTES + 1);
        assert_eq!(table.start(&long, Vec::new()), Err(CallError::BadArgument));
        assert_eq!(
            table.output(a),
            Err(CallError::InvalidHandle),
            "not waited yet"
        );
        assert_eq!(table.wait_blocking(b), 0);
        assert_eq!(table.wait_blocking(a), 0);
        assert_eq!(table.output(a).unwrap(), b"one");
        assert_eq!(table.output(b).unwrap(), b"two");
        assert_eq!(table.wait_blocking(7), CallError::InvalidHandle.code());
        let mut none = CallTable::new(None, CallMode::Fused);
        assert_eq!(none.start("echo", Vec::new()), Err(CallError::NotGranted));
    }
}
