//! Operator secrets on disk: the artifact key and the management token.
//!
//! Whoever reads the key can seal native code that Luge runs, and whoever
//! reads the token can replace any function. So, as ssh insists for private
//! keys, a secret is read only from a file that neither its group nor
//! others may read or write; a looser mode is an error that names the fix.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Largest secret file read: a key or token is a line, not a document.
const MAX_SECRET_BYTES: u64 = 64 << 10;

/// Why a secret file was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// Could not be opened or read.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        reason: String,
    },
    /// Group or others may read or write it.
    #[error(
        "{path} has mode {mode:04o}: an operator secret must not be readable or writable by group or others (chmod 600 {path})"
    )]
    TooOpen {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
}

/// Reads the secret in `path`, refusing a file group or others can reach.
/// The mode is checked on the opened file, so a swap between the check and
/// the read cannot slip another file in.
pub fn read_private(path: &Path) -> Result<Vec<u8>, SecretFileError> {
    let io = |e: std::io::Error| SecretFileError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mode = file.metadata().map_err(io)?.permissions().mode() & 0o7777;
    if mode & 0o066 != 0 {
        return Err(SecretFileError::TooOpen {
            path: path.display().to_string(),
            mode,
        });
    }
    let mut secret = Vec::new();
    file.take(MAX_SECRET_BYTES)
        .read_to_end(&mut secret)
        .map_err(io)?;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cret").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o666, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let refused = read_private(&path).unwrap_err();
            assert!(refused.to_string().contains("chmod 600"), "{refused}");
        }
        for mode in [0o600, 0o400, 0o700] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(read_private(&path).unwrap(), b"s3cret");
        }
        assert!(matches!(
            read_private(&dir.path().join("missing")),
            Err(SecretFileError::Io { .. })
        ));
    }
}
