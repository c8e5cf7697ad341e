//! Files an operator's configuration names (a runtime config, CA bundles,
//! client keys, dotenv files, manifests, modules): read only when they
//! are regular files, and never past a bound, so a config that names
//! `/dev/zero`, a FIFO or a directory stops the start with a clear error
//! instead of growing memory or blocking it. An error names the file and
//! why, never the file's content (it may be a secret, or not the file the
//! operator meant: `/etc/shadow`).

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most a configuration file is read (16 MiB): far above any runtime
/// config, CA bundle or dotenv file, far below what would hurt the host.
pub const MAX_CONFIG_FILE_BYTES: u64 = 16 << 20;

/// Why a configuration file was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A directory, device, FIFO or socket.
    #[error("{path}: not a regular file")]
    NotRegular {
        /// The file.
        path: PathBuf,
    },
    /// Larger than the bound.
    #[error("{path}: larger than {max} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        max: u64,
    },
    /// Not UTF-8 text where text was expected.
    #[error("{path}: not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

impl FileError {
    /// Why, without the file's name (for an error that names it already).
    pub fn reason(&self) -> String {
        match self {
            Self::Io { source, .. } => source.to_string(),
            Self::NotRegular { .. } => "not a regular file".to_owned(),
            Self::TooLarge { max, .. } => format!("larger than {max} bytes"),
            Self::NotText { .. } => "not UTF-8 text".to_owned(),
        }
    }
}

/// The bytes of the regular file at `path`, at most `max` of them.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let io = |source| FileError::Io {
        path: path.to_owned(),
        source,
    };
    let not_regular = || FileError::NotRegular {
        path: path.to_owned(),
    };
    // Checked before opening (opening a FIFO would wait for a writer),
    // and again on what was opened (the path may have changed between).
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(not_regular());
    }
    let too_large = || FileError::TooLarge {
        path: path.to_owned(),
        max,
    };
    if metadata.len() > max {
        return Err(too_large());
    }
    // The length may grow while it is read: the read stops past the bound.
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text, at most [`MAX_CONFIG_FILE_BYTES`].
pub fn read_config_text(path: &Path) -> Result<String, FileError> {
    String::from_utf8(read_bounded(path, MAX_CONFIG_FILE_BYTES)?).map_err(|_| FileError::NotText {
        path: path.to_owned(),
    })
}

/// The 1-based line of byte `offset` in `text` (where a parser's error
/// points), so an error can name the line without quoting it.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_bound_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("roots.pem");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_bounded(&file, 10).unwrap(), b"0123456789");
        let refused = read_bounded(&file, 9).unwrap_err();
        assert!(
            matches!(refused, FileError::TooLarge { max: 9, .. }),
            "{refused}"
        );
        for path in [Path::new("/dev/zero"), dir.path()] {
            let refused = read_bounded(path, MAX_CONFIG_FILE_BYTES).unwrap_err();
            assert!(matches!(refused, FileError::NotRegular { .. }), "{refused}");
        }
        // A FIFO is refused without waiting for a writer.
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        assert!(matches!(
            read_bounded(&fifo, MAX_CONFIG_FILE_BYTES),
            Err(FileError::NotRegular { .. })
        ));
        // Never the content, even when it is not text.
        std::fs::write(&file, b"root:$6$secret\xff\n").unwrap();
        let refused = read_config_text(&file).unwrap_err().to_string();
        assert!(!refused.contains("secret"), "{refused}");
        assert!(refused.ends_with("not UTF-8 text"), "{refused}");
    }

    #[test]
    fn a_line_is_named_by_its_number() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }
}
