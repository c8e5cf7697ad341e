//! Where a loaded artifact's code lives: a sealed in-memory file that
//! Wasmtime maps, rather than a private copy it faults in page by page.
//!
//! `Module::deserialize` copies the payload into fresh anonymous memory, so
//! every page of it is a page fault (tens of thousands for a Python
//! interpreter's artifact, each dear under a hypervisor). Written into a
//! `memfd` with one `write`, the same bytes land in the page cache without
//! a fault; Wasmtime then maps the file, and the pages a sandbox touches are
//! mapped in on demand, sixteen at a time (the kernel's fault-around). The
//! file is sealed before it is mapped, so nothing can change the code
//! under a loaded module. Where the kernel refuses any step (no memfd, an
//! executable mapping of one refused by `vm.memfd_noexec`), or where
//! [`MAX_MAPPED`] files are mapped already, the caller falls back to the
//! copy.

use std::fs::File;
use std::io::Write as _;

use rustix::fs::{MemfdFlags, SealFlags};

/// Payloads below this are copied as before: a few pages fault in less time
/// than the file's system calls take.
const AT_LEAST: usize = 256 << 10;

/// Artifacts mapped from files at once, in the whole process. Wasmtime
/// keeps each file open under its mapping for as long as the module lives,
/// so each costs a descriptor, taken from the 256 the executor keeps for
/// everything but client connections (`RESERVED_FDS` in the executor's
/// `http`): a quarter of them. Past this, artifacts are copied.
pub(crate) const MAX_MAPPED: usize = 64;

/// The places of artifacts mapped now.
static MAPPED: luge_core::places::Places = luge_core::places::Places::new(MAX_MAPPED);

/// One of the [`MAX_MAPPED`] places, held by the loaded module whose code
/// the file holds and given back as it is dropped.
#[derive(Debug)]
pub(crate) struct Lease(#[allow(dead_code, reason = "held for its drop")] luge_core::places::Place);

impl Lease {
    fn take() -> Option<Self> {
        MAPPED.take().map(Self)
    }
}

/// A sealed file holding an artifact's payload, and its place.
pub(crate) struct Image {
    /// The file, positioned at its end; Wasmtime maps it whole.
    file: File,
    /// To keep with the loaded module.
    lease: Lease,
}

/// Code loaded from `payload`: by `map` from a sealed file holding it where
/// one can be had (`staged`, made of this payload beforehand by [`stage`],
/// or one made now; then with the file's lease, to keep with the loaded
/// module), else, or where `map` refuses it, by `copy`.
pub(crate) fn load<T, E>(
    payload: &[u8],
    staged: Option<Image>,
    map: impl FnOnce(File) -> Option<T>,
    copy: impl FnOnce() -> Result<T, E>,
) -> Result<(T, Option<Lease>), E> {
    if let Some(Image { file, lease }) = staged.or_else(|| sealed(payload))
        && let Some(code) = map(file)
    {
        return Ok((code, Some(lease)));
    }
    Ok((copy()?, None))
}

/// A sealed file holding `payload`, made before the payload is known to be
/// authentic: it only copies bytes (the file is mapped, as code, only by
/// [`load`], after the MAC was checked). `None` as for [`sealed`].
pub(crate) fn stage(payload: &[u8]) -> Option<Image> {
    sealed(payload)
}

/// A sealed file holding `payload`; `None` where the payload is small, the
/// places are taken, or the kernel refuses.
fn sealed(payload: &[u8]) -> Option<Image> {
    if payload.len() < AT_LEAST {
        return None;
    }
    let lease = Lease::take()?;
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // MFD_EXEC asks for an executable file where the kernel knows the flag
    // (6.3+, where `vm.memfd_noexec` may otherwise make it non-executable).
    let fd = rustix::fs::memfd_create("luge-artifact", flags | MemfdFlags::EXEC)
        .or_else(|_| rustix::fs::memfd_create("luge-artifact", flags))
        .ok()?;
    let mut file = File::from(fd);
    file.write_all(payload).ok()?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
    )
    .ok()?;
    Some(Image { file, lease })
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Seek as _};

    use super::*;

    #[test]
    fn large_payloads_are_sealed_copies_small_ones_are_left() {
        assert!(sealed(&[7; AT_LEAST - 1]).is_none());
        let payload: Vec<u8> = (0..AT_LEAST * 3 + 5).map(|i| (i % 251) as u8).collect();
        let Image { mut file, lease } = sealed(&payload).expect("a memfd");
        let seals = rustix::fs::fcntl_get_seals(&file).unwrap();
        assert!(
            seals
                .contains(SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        );
        // Nothing can change it now, not even through its own descriptor.
        assert!(file.write_all(b"x").is_err());
        assert!(file.set_len(1).is_err());
        let mut read = Vec::new();
        file.rewind().unwrap();
        file.read_to_end(&mut read).unwrap();
        assert_eq!(read, payload);
        drop(lease);
    }

    #[test]
    fn at_most_max_mapped_files_at_once() {
        let payload = vec![1; AT_LEAST];
        // Other tests of this binary may hold some places meanwhile.
        let held: Vec<Lease> = std::iter::from_fn(Lease::take).collect();
        assert!(held.len() <= MAX_MAPPED, "{}", held.len());
        assert!(sealed(&payload).is_none());
        drop(held);
        assert!(sealed(&payload).is_some());
    }
}
