//! Why annotations or grants were refused: the one error every slice
//! answers with.

/// Why annotations or grants were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    /// Annotations that are neither an object nor a key/value list.
    #[error("annotations must be an object or a list of {{\"key\", \"value\"}} pairs")]
    Shape,
    /// A Luge key that does not exist.
    #[error("unknown annotation {0}")]
    UnknownKey(String),
    /// A value of the wrong type or form.
    #[error("annotation {key}: {reason}")]
    BadValue {
        /// Annotation key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Directory grants without an operator fs root.
    #[error("directory grants need the operator's --fs-root; none is configured")]
    NoFsRoot,
    /// `/abs/path` as a host path.
    #[error(
        "directory grant {0:?}: host paths are relative to the fs root; absolute paths are refused"
    )]
    Absolute(String),
    /// `..` in a path.
    #[error("directory grant {0:?}: '..' escapes are refused")]
    DotDot(String),
    /// A symlink on the way: it could lead outside the fs root, now or later.
    #[error(
        "directory grant {0:?} passes through a symlink; grants name real directories beneath the fs root"
    )]
    Symlink(String),
    /// More directory grants than the bound
    /// ([`super::MAX_DIR_GRANTS`]).
    #[error("at most {0} directory grants per action")]
    TooMany(usize),
    /// Missing or not a directory.
    #[error("directory grant {path:?}: {reason}")]
    NotADirectory {
        /// Requested host path.
        path: String,
        /// What the filesystem said.
        reason: String,
    },
}

pub(super) fn bad(key: &str, reason: impl Into<String>) -> GrantError {
    GrantError::BadValue {
        key: key.to_owned(),
        reason: reason.into(),
    }
}
