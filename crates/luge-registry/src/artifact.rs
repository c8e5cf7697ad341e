//! Authenticated artifacts: engine-native code that Luge agrees to map.
//!
//! A precompiled artifact is machine code, so loading one is running it. An
//! artifact is accepted only if it carries a MAC under the operator's key
//! (keyed BLAKE3, a PRF, chosen over HMAC-SHA256 because it verifies a
//! multi-megabyte artifact in well under a millisecond on the `/init` path)
//! and a header naming the engine, engine version and target it was built
//! for. [`VerifiedArtifact`] can only be obtained through [`open`], so an
//! engine's `load_artifact` cannot be handed unverified bytes.
//!
//! Layout: `MAGIC | header_len: u32 LE | header (JSON) | payload | mac (32)`,
//! the MAC covering everything before it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use luge_core::runtime::{EngineId, VerifiedArtifact};

/// First bytes of every Luge artifact.
pub const MAGIC: &[u8; 8] = b"LUGEART\x01";
const MAC_LEN: usize = 32;
/// Headers are a few hundred bytes; anything bigger is not ours.
const MAX_HEADER_LEN: usize = 16 * 1024;
/// Domain separation for turning an operator secret into a MAC key.
const KEY_CONTEXT: &str = "luge 2026 artifact authentication key v1";

/// The operator's artifact key.
#[derive(Clone)]
pub struct ArtifactKey([u8; 32]);

impl std::fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArtifactKey(..)")
    }
}

impl ArtifactKey {
    /// Derives the key from an operator secret (the contents of `--key-file`
    /// or `LUGE_KEY`). Surrounding whitespace is ignored so a trailing newline
    /// in a key file does not change the key.
    pub fn from_secret(secret: &[u8]) -> Result<Self, ArtifactError> {
        let secret = secret.trim_ascii();
        if secret.len() < 16 {
            return Err(ArtifactError::WeakKey);
        }
        Ok(Self(blake3::derive_key(KEY_CONTEXT, secret)))
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, ArtifactError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| ArtifactError::Io(e.to_string()))?;
        Ok(Self(blake3::derive_key(KEY_CONTEXT, &secret)))
    }

    /// Reads the secret from `path`, or creates the file with a random secret
    /// (mode 0600) if it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, ArtifactError> {
        match crate::secret::read_private(path) {
            Ok(secret) => Self::from_secret(&secret),
            Err(_) if !path.exists() => {
                let secret = random_secret()?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| ArtifactError::Io(e.to_string()))?;
                }
                write_private(path, secret.as_bytes())
                    .map_err(|e| ArtifactError::Io(format!("{}: {e}", path.display())))?;
                Self::from_secret(secret.as_bytes())
            }
            Err(e) => Err(ArtifactError::Io(e.to_string())),
        }
    }
}

/// A fresh random secret, 32 bytes as hex: what [`ArtifactKey::load_or_create`]
/// writes, and what a process that must not trust any other key uses.
pub fn random_secret() -> Result<String, ArtifactError> {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| ArtifactError::Io(e.to_string()))?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// Where the operator's key came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `--key-file`.
    File(std::path::PathBuf),
    /// The `LUGE_KEY` environment variable.
    Environment,
    /// Generated on first use and kept at this path (single-machine setups:
    /// the executor and the precompiler on one host share it).
    Local(std::path::PathBuf),
}

/// Resolves the operator key: `key_file`, else `LUGE_KEY`, else a local key
/// under `cache_dir`. Never from argv, so it does not show in `ps`.
pub fn operator_key(
    key_file: Option<&Path>,
    cache_dir: &Path,
) -> Result<(ArtifactKey, KeySource), ArtifactError> {
    if let Some(path) = key_file {
        let secret =
            crate::secret::read_private(path).map_err(|e| ArtifactError::Io(e.to_string()))?;
        return Ok((
            ArtifactKey::from_secret(&secret)?,
            KeySource::File(path.to_owned()),
        ));
    }
    if let Some(secret) = std::env::var_os("LUGE_KEY") {
        return Ok((
            ArtifactKey::from_secret(secret.as_encoded_bytes())?,
            KeySource::Environment,
        ));
    }
    let path = cache_dir.join("key");
    Ok((ArtifactKey::load_or_create(&path)?, KeySource::Local(path)))
}

/// `--cache-dir`'s default: `$XDG_CACHE_HOME/luge`, else `~/.cache/luge`.
pub fn default_cache_dir() -> std::path::PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("luge")
}

fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Why an artifact was refused.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// Not a Luge artifact at all.
    #[error("not a Luge artifact (bad magic bytes)")]
    NotAnArtifact,
    /// Cut short or with inconsistent lengths.
    #[error("truncated or malformed Luge artifact")]
    Malformed,
    /// The MAC does not verify: made with another key, or tampered with.
    #[error(
        "artifact authentication failed: it was not made by this operator's precompiler (wrong key or modified)"
    )]
    BadMac,
    /// Authentic, but for another engine build or CPU.
    #[error("artifact was built for {found}, but this executor runs {expected}")]
    WrongEngine {
        /// What the artifact's header says.
        found: Box<EngineId>,
        /// What this executor runs.
        expected: Box<EngineId>,
    },
    /// Authentic and for this engine build, but compiled under engine
    /// settings this executor does not run (Wasmtime: fuel metering).
    #[error(
        "artifact was compiled with engine settings \"{found}\", but this executor runs \"{expected}\": precompile it again with the executor's settings (luge-precompile --fuel for an executor started with --fuel)"
    )]
    WrongSettings {
        /// The settings the artifact was compiled under.
        found: String,
        /// This executor's.
        expected: String,
    },
    /// The operator secret is too short to be a key.
    #[error("artifact key secret must be at least 16 bytes")]
    WeakKey,
    /// Reading or creating the key failed.
    #[error("artifact key: {0}")]
    Io(String),
}

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(flatten)]
    engine: EngineId,
    /// The engine's settings in words ([`luge_core::WasmRuntime::settings`]) at
    /// compile time; absent in artifacts of earlier Luge versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    settings: Option<String>,
    payload_len: u64,
}

/// Wraps an engine payload in an authenticated artifact, recording the
/// engine `settings` it was compiled under ([`luge_core::WasmRuntime::settings`]),
/// which [`open`] checks.
pub fn seal(
    key: &ArtifactKey,
    engine: &EngineId,
    settings: Option<&str>,
    payload: &[u8],
) -> Vec<u8> {
    let header = serde_json::to_vec(&Header {
        engine: engine.clone(),
        settings: settings.map(str::to_owned),
        payload_len: payload.len() as u64,
    })
    .expect("header serialization cannot fail");
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + payload.len() + MAC_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
    let mac = mac(key, &out);
    out.extend_from_slice(mac.as_bytes());
    out
}

fn mac(key: &ArtifactKey, body: &[u8]) -> blake3::Hash {
    // Single-threaded on purpose: BLAKE3's multi-threaded mode measured
    // slower for a 2.8 MB artifact on a 2-vCPU machine (2.73 vs 2.24 ms).
    blake3::keyed_hash(&key.0, body)
}

/// Whether `bytes` start like a Luge artifact.
pub fn is_artifact(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Reads the engine an artifact claims, without authenticating it. For
/// diagnostics only.
pub fn peek_engine(bytes: &[u8]) -> Result<EngineId, ArtifactError> {
    let (header, _) = split_header(bytes)?;
    Ok(header.engine)
}

/// Where an artifact's header ends, by its length field alone (the header
/// is not read).
fn header_end(bytes: &[u8]) -> Result<usize, ArtifactError> {
    if !is_artifact(bytes) {
        return Err(ArtifactError::NotAnArtifact);
    }
    let len_at = MAGIC.len();
    let len_bytes: [u8; 4] = bytes
        .get(len_at..len_at + 4)
        .and_then(|s| s.try_into().ok())
        .ok_or(ArtifactError::Malformed)?;
    let header_len = u32::from_le_bytes(len_bytes) as usize;
    if header_len > MAX_HEADER_LEN {
        return Err(ArtifactError::Malformed);
    }
    Ok(len_at + 4 + header_len)
}

fn split_header(bytes: &[u8]) -> Result<(Header, usize), ArtifactError> {
    let header_end = header_end(bytes)?;
    let header_bytes = bytes
        .get(MAGIC.len() + 4..header_end)
        .ok_or(ArtifactError::Malformed)?;
    let header: Header =
        serde_json::from_slice(header_bytes).map_err(|_| ArtifactError::Malformed)?;
    Ok((header, header_end))
}

/// An artifact's body (all but its MAC) and the MAC it carries, neither
/// checked.
fn split_mac(bytes: &[u8]) -> Result<(&[u8], [u8; MAC_LEN]), ArtifactError> {
    if !is_artifact(bytes) {
        return Err(ArtifactError::NotAnArtifact);
    }
    let body_len = bytes
        .len()
        .checked_sub(MAC_LEN)
        .ok_or(ArtifactError::Malformed)?;
    let (body, mac) = bytes.split_at(body_len);
    let mac = mac.try_into().map_err(|_| ArtifactError::Malformed)?;
    Ok((body, mac))
}

/// The payload of a sealed artifact, found by the header's length alone,
/// **unauthenticated**: to stage it (copy it where it will be loaded from)
/// while [`open`] checks the MAC, never to believe it. `None` where the
/// bytes are not shaped like an artifact.
pub fn unverified_payload(bytes: &[u8]) -> Option<&[u8]> {
    let (body, _) = split_mac(bytes).ok()?;
    body.get(header_end(body).ok()?..)
}

/// The content id an artifact claims (its MAC, what [`open`] identifies it
/// by once the MAC checks), **unauthenticated**: enough to tell that an
/// artifact is probably loaded already, never to share a module on.
pub fn claimed_id(bytes: &[u8]) -> Option<[u8; 32]> {
    split_mac(bytes).ok().map(|(_, mac)| mac)
}

/// Authenticates an artifact and checks it was built for `expected`, and,
/// where both the artifact and the caller name them, under `settings`.
///
/// The MAC is checked before the header is believed, so a forged header can
/// only ever produce [`ArtifactError::BadMac`].
pub fn open<'a>(
    key: &ArtifactKey,
    bytes: &'a [u8],
    expected: &EngineId,
    settings: Option<&str>,
) -> Result<VerifiedArtifact<'a>, ArtifactError> {
    let (body, mac) = split_mac(bytes)?;
    // blake3::Hash equality is constant-time.
    let expected_mac = blake3::Hash::from_bytes(mac);
    if self::mac(key, body) != expected_mac {
        return Err(ArtifactError::BadMac);
    }
    let (header, payload_at) = split_header(body)?;
    if &header.engine != expected {
        return Err(ArtifactError::WrongEngine {
            found: Box::new(header.engine),
            expected: Box::new(expected.clone()),
        });
    }
    if let (Some(found), Some(expected)) = (&header.settings, settings)
        && found != expected
    {
        return Err(ArtifactError::WrongSettings {
            found: found.clone(),
            expected: expected.to_owned(),
        });
    }
    let payload = &body[payload_at..];
    if payload.len() as u64 != header.payload_len {
        return Err(ArtifactError::Malformed);
    }
    // SAFETY: the MAC under the operator's key verified over the whole
    // artifact, header included, and the header names `expected` (and its
    // settings where both say): only the operator's key holders (this
    // executor, `luge-precompile`) seal, and they seal only what an engine
    // of that id serialized.
    Ok(unsafe { VerifiedArtifact::new_unchecked(payload, *expected_mac.as_bytes()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(name: &str) -> EngineId {
        EngineId {
            engine: name.into(),
            version: "1.0.0".into(),
            target: "x86_64-unknown-linux-gnu".into(),
        }
    }

    fn key(secret: &str) -> ArtifactKey {
        ArtifactKey::from_secret(secret.as_bytes()).unwrap()
    }

    #[test]
    fn round_trip() {
        let k = key("0123456789abcdef0123");
        let sealed = seal(&k, &engine("wasmtime"), None, b"native code");
        let opened = open(&k, &sealed, &engine("wasmtime"), None).unwrap();
        assert_eq!(opened.payload(), b"native code");
        assert_eq!(peek_engine(&sealed).unwrap(), engine("wasmtime"));
    }

    #[test]
    fn the_unverified_payload_and_id_are_where_open_finds_them() {
        let k = key("0123456789abcdef0123");
        let sealed = seal(&k, &engine("wasmtime"), Some("fuel off"), b"native code");
        let opened = open(&k, &sealed, &engine("wasmtime"), Some("fuel off")).unwrap();
        let payload = unverified_payload(&sealed).unwrap();
        // The very same bytes in the same place: what a stage made of it
        // is used by the load of the verified payload.
        assert_eq!(payload.as_ptr(), opened.payload().as_ptr());
        assert_eq!(payload.len(), opened.payload().len());
        assert_eq!(claimed_id(&sealed), Some(opened.content_id()));
        // Anything else has none, and nothing here panics on it.
        for bad in [&b""[..], b"not an artifact", &sealed[..MAGIC.len() + 2]] {
            assert_eq!(unverified_payload(bad), None);
            assert_eq!(claimed_id(bad), None);
        }
        let mut huge_header = sealed.clone();
        huge_header[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(unverified_payload(&huge_header), None);
        let mut past_the_end = sealed.clone();
        past_the_end[MAGIC.len()..MAGIC.len() + 4]
            .copy_from_slice(&(MAX_HEADER_LEN as u32).to_le_bytes());
        assert_eq!(unverified_payload(&past_the_end), None);
    }

    #[test]
    fn other_key_is_refused() {
        let sealed = seal(
            &key("0123456789abcdef0123"),
            &engine("wasmtime"),
            None,
            b"x",
        );
        let err = open(
            &key("another secret of enough length"),
            &sealed,
            &engine("wasmtime"),
            None,
        );
        assert!(matches!(err, Err(ArtifactError::BadMac)));
    }

    #[test]
    fn any_flipped_byte_is_refused() {
        let k = key("0123456789abcdef0123");
        let sealed = seal(&k, &engine("wasmtime"), None, b"payload bytes");
        for i in MAGIC.len()..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[i] ^= 0x01;
            assert!(
                open(&k, &tampered, &engine("wasmtime"), None).is_err(),
                "byte {i}"
            );
        }
    }

    #[test]
    fn other_engine_is_named() {
        let k = key("0123456789abcdef0123");
        let sealed = seal(&k, &engine("wasmer"), None, b"x");
        let err = open(&k, &sealed, &engine("wasmtime"), None).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("wasmer") && msg.contains("wasmtime"), "{msg}");
    }

    #[test]
    fn truncation_and_garbage_are_refused() {
        let k = key("0123456789abcdef0123");
        let sealed = seal(&k, &engine("wasmtime"), None, b"payload");
        for cut in 0..sealed.len() {
            assert!(open(&k, &sealed[..cut], &engine("wasmtime"), None).is_err());
        }
        assert!(matches!(
            open(&k, b"\0asm\x01\0\0\0", &engine("wasmtime"), None),
            Err(ArtifactError::NotAnArtifact)
        ));
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(matches!(
            ArtifactKey::from_secret(b"short\n"),
            Err(ArtifactError::WeakKey)
        ));
    }

    #[test]
    fn key_file_is_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/key");
        let a = ArtifactKey::load_or_create(&path).unwrap();
        let b = ArtifactKey::load_or_create(&path).unwrap();
        assert_eq!(a.0, b.0);
    }

    #[test]
    fn other_settings_are_named() {
        let k = key("0123456789abcdef0123");
        let sealed = seal(&k, &engine("wasmtime"), Some("fuel off"), b"x");
        assert!(open(&k, &sealed, &engine("wasmtime"), Some("fuel off")).is_ok());
        let err = open(&k, &sealed, &engine("wasmtime"), Some("fuel on")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"fuel off\"")
                && text.contains("\"fuel on\"")
                && text.contains("--fuel"),
            "{text}"
        );
        // An artifact that names no settings (earlier Luge) is left to the engine.
        let bare = seal(&k, &engine("wasmtime"), None, b"x");
        assert!(open(&k, &bare, &engine("wasmtime"), Some("fuel on")).is_ok());
    }
}
