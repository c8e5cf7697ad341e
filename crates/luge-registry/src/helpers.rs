//! Threads a load adds beside its own, bounded in the whole process.
//!
//! Loads run on the async runtime's blocking pool (up to 512 threads), and
//! a flood of large `/init`s must not double that: each helper thread takes
//! one of [`MAX_HELPER_THREADS`] places first, and a load that finds none
//! free does the work on its own thread, in turn, as without a helper.
//! Two things take one, each only while it runs and only for megabytes of
//! input, where a thread's start (about 0.03 ms) is small beside the work:
//! the first half of a large code's base64 decoding
//! ([`crate::code::decode_padded_base64`]) and the MAC check of a large
//! artifact beside its staging (`ModuleRegistry`'s loads).

/// Helper threads running at once, in the whole process.
pub const MAX_HELPER_THREADS: usize = 4;

/// The places of [`MAX_HELPER_THREADS`] (public to be watched: a place is
/// held only while its helper runs).
pub static HELPER_THREADS: luge_core::places::Places =
    luge_core::places::Places::new(MAX_HELPER_THREADS);

/// Runs `helper` on a helper thread named `name` (with `stack` bytes of
/// stack) while `here` runs on this one, and returns both results: the
/// helper's `None` where the system refused the thread (then `helper` never
/// ran) or it panicked, for the caller to do its work here. `None`, and
/// neither run, where every place is taken. The place is held until the
/// helper is joined, before this returns.
pub(crate) fn beside<A: Send, B>(
    name: &str,
    stack: usize,
    helper: impl FnOnce() -> A + Send,
    here: impl FnOnce() -> B,
) -> Option<(Option<A>, B)> {
    let _place = HELPER_THREADS.take()?;
    Some(std::thread::scope(|scope| {
        let helping = std::thread::Builder::new()
            .name(name.to_owned())
            .stack_size(stack)
            .spawn_scoped(scope, helper);
        let here = here();
        (helping.ok().and_then(|thread| thread.join().ok()), here)
    }))
}
