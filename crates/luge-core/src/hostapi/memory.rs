//! Guest linear memory as host API v1 reaches it.
//!
//! An engine supplies three primitives ([`GuestMemory`]): whether a range
//! lies inside the guest's memory, and a copy each way. Everything a guest
//! can get wrong (a negative pointer or length, a range past the end, a
//! length of 4 GiB) is checked here, once, *before* the host allocates a
//! byte: a guest can never make the host allocate more than its own memory
//! holds.

/// Why a guest pointer or length is unusable. Every variant is host API
/// v1's "bad argument" (-3) to the guest; the variants say why in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// A pointer or length below zero (as `i32`; a guest's "4 GiB" is -1).
    #[error("negative pointer or length ({ptr}, {len})")]
    Negative {
        /// The guest's pointer.
        ptr: i32,
        /// The guest's length.
        len: i64,
    },
    /// The range does not lie inside the guest's linear memory.
    #[error("[{ptr}, {ptr} + {len}) is outside guest memory")]
    OutOfBounds {
        /// Start of the range.
        ptr: u64,
        /// Its length.
        len: u64,
    },
    /// The module exports no linear memory named `memory`.
    #[error("the module exports no memory")]
    NoMemory,
}

/// Whether `[offset, offset + len)` lies within a memory of `size` bytes
/// (no overflow): the one bound check every adapter's `contains` uses.
pub fn within(offset: u64, len: u64, size: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// One engine's linear memory, during one host call. Implementations do
/// no argument checking of their own: [`Guest`] checks, then calls them
/// only with ranges [`GuestMemory::contains`] accepted.
pub trait GuestMemory {
    /// Whether `[offset, offset + len)` lies inside the memory. Must not
    /// allocate or have side effects.
    fn contains(&self, offset: u64, len: u64) -> bool;
    /// Copies `into.len()` bytes from `offset`.
    fn copy_out(&mut self, offset: u64, into: &mut [u8]) -> Result<(), MemoryError>;
    /// Copies `bytes` to `offset`.
    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> Result<(), MemoryError>;
}

/// Memory that is one contiguous slice (Wasmtime; tests).
pub struct SliceMemory<'a>(pub &'a mut [u8]);

impl GuestMemory for SliceMemory<'_> {
    fn contains(&self, offset: u64, len: u64) -> bool {
        within(offset, len, self.0.len() as u64)
    }

    fn copy_out(&mut self, offset: u64, into: &mut [u8]) -> Result<(), MemoryError> {
        let range = slice_range(offset, into.len(), self.0.len())?;
        into.copy_from_slice(&self.0[range]);
        Ok(())
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let range = slice_range(offset, bytes.len(), self.0.len())?;
        self.0[range].copy_from_slice(bytes);
        Ok(())
    }
}

fn slice_range(
    offset: u64,
    len: usize,
    size: usize,
) -> Result<std::ops::Range<usize>, MemoryError> {
    let out = MemoryError::OutOfBounds {
        ptr: offset,
        len: len as u64,
    };
    let start = usize::try_from(offset).map_err(|_| out)?;
    let end = start.checked_add(len).ok_or(out)?;
    if end > size {
        return Err(out);
    }
    Ok(start..end)
}

/// No memory at all: every non-empty range is outside it (a module that
/// exports none).
pub struct NoMemory;

impl GuestMemory for NoMemory {
    fn contains(&self, _: u64, _: u64) -> bool {
        false
    }
    fn copy_out(&mut self, _: u64, _: &mut [u8]) -> Result<(), MemoryError> {
        Err(MemoryError::NoMemory)
    }
    fn copy_in(&mut self, _: u64, _: &[u8]) -> Result<(), MemoryError> {
        Err(MemoryError::NoMemory)
    }
}

/// The checked accessors every import body uses.
pub struct Guest<'a>(pub &'a mut dyn GuestMemory);

impl Guest<'_> {
    /// The range `(ptr, len)` names, checked against the memory.
    fn range(&self, ptr: i32, len: i64) -> Result<(u64, u64), MemoryError> {
        let (Ok(offset), Ok(n)) = (u64::try_from(ptr), u64::try_from(len)) else {
            return Err(MemoryError::Negative { ptr, len });
        };
        if !self.0.contains(offset, n) {
            return Err(MemoryError::OutOfBounds {
                ptr: offset,
                len: n,
            });
        }
        Ok((offset, n))
    }

    /// A copy of guest bytes `[ptr, ptr + len)`. Bounds are checked before
    /// the buffer is allocated.
    pub fn read(&mut self, ptr: i32, len: i32) -> Result<Vec<u8>, MemoryError> {
        let (offset, n) = self.range(ptr, i64::from(len))?;
        // `n` fits: it is inside a linear memory that this process maps.
        let mut bytes = vec![0; usize::try_from(n).unwrap_or(0)];
        if !bytes.is_empty() {
            self.0.copy_out(offset, &mut bytes)?;
        }
        Ok(bytes)
    }

    /// Checks that the guest's buffer `(ptr, len)` is writable memory
    /// (the whole buffer, even if less is written: a buffer the guest
    /// names must be its own).
    pub fn check(&self, ptr: i32, len: i32) -> Result<(), MemoryError> {
        self.range(ptr, i64::from(len)).map(drop)
    }

    /// Writes `bytes` at `ptr`.
    pub fn write(&mut self, ptr: i32, bytes: &[u8]) -> Result<(), MemoryError> {
        let len = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
        let (offset, _) = self.range(ptr, len)?;
        if bytes.is_empty() {
            return Ok(());
        }
        self.0.copy_in(offset, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_range_is_refused_before_allocating() {
        let mut backing = vec![7u8; 16];
        let mut memory = SliceMemory(&mut backing);
        let mut guest = Guest(&mut memory);
        assert_eq!(guest.read(0, 16).unwrap(), vec![7; 16]);
        assert_eq!(guest.read(16, 0).unwrap(), Vec::<u8>::new());
        assert!(matches!(
            guest.read(17, 0),
            Err(MemoryError::OutOfBounds { .. })
        ));
        assert!(matches!(
            guest.read(-1, 1),
            Err(MemoryError::Negative { .. })
        ));
        // A guest's "4 GiB" (u32::MAX as i32) and i32::MAX.
        assert!(matches!(
            guest.read(0, -1),
            Err(MemoryError::Negative { .. })
        ));
        assert!(matches!(
            guest.read(0, i32::MAX),
            Err(MemoryError::OutOfBounds { .. })
        ));
        assert!(matches!(
            guest.read(i32::MAX, 1),
            Err(MemoryError::OutOfBounds { .. })
        ));
        assert!(guest.write(15, b"ab").is_err());
        guest.write(14, b"ab").unwrap();
        assert_eq!(&backing[14..], b"ab");
        let mut none = NoMemory;
        assert!(Guest(&mut none).read(0, 1).is_err());
        assert!(Guest(&mut none).check(0, 0).is_err());
    }
}
