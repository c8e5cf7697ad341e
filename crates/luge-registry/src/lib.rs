//! From the bytes a client uploads to a module an engine runs.
//!
//! `luge-core` says what an engine is; this crate is everything between an
//! upload and [`luge_core::WasmRuntime`], so that engines compile neither
//! archives nor hashes:
//!
//! - [`code`]: what a client uploads (Wasm, a zip, or a precompiled
//!   artifact), detected by magic bytes, unpacked with a size cap.
//! - [`artifact`]: the authenticated envelope around engine-native code;
//!   native code reaches an engine (as a [`luge_core::VerifiedArtifact`])
//!   only after its MAC verifies under the operator's key.
//! - the registry ([`ModuleRegistry`]): compile once per content hash, share
//!   loaded modules between containers, keep compiled artifacts on disk so a
//!   restart is warm, snapshot with the function's own initialisation.
//! - [`admit`]: the one admission pipeline (grants, engine check, limits,
//!   code, compile, entry) and its one refusal-to-status mapping.
//! - [`secret`]: operator secrets read only from private files.
#![deny(missing_docs)]

pub mod admit;
pub mod artifact;
pub mod code;
mod helpers;
mod registry;
pub mod secret;

pub use artifact::{ArtifactError, ArtifactKey};
pub use code::{CodeError, ModuleCode};
pub use helpers::{HELPER_THREADS, MAX_HELPER_THREADS};
pub use registry::*;
