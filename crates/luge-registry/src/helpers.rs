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
