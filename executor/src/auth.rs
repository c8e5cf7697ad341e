//! The operator token that guards the management API.

use hyper::header::{self, HeaderMap};

/// The operator token, kept only as a hash: comparing `blake3::Hash`es is
/// constant-time, so a wrong token's timing says nothing about the right one.
#[derive(Debug, Clone)]
pub struct OperatorToken(blake3::Hash);

/// Tokens shorter than this are refused at start: the token is all that
/// guards uploading native-speed code.
const MIN_TOKEN_CHARS: usize = 16;

impl OperatorToken {
    /// The token in `text` (surrounding whitespace ignored).
    pub fn new(text: &str) -> anyhow::Result<Self> {
        let token = text.trim();
        if token.chars().count() < MIN_TOKEN_CHARS {
            anyhow::bail!("the operator token must be at least {MIN_TOKEN_CHARS} characters");
        }
        Ok(Self(blake3::hash(token.as_bytes())))
    }

    /// Whether `headers` carry it as `Authorization: Bearer`.
    pub(crate) fn accepts(&self, headers: &HeaderMap) -> bool {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        presented.is_some_and(|p| blake3::hash(p.as_bytes()) == self.0)
    }
}
