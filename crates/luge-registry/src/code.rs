//! What a client hands Luge as an action's code, recognised by magic bytes.
//!
//! OpenWhisk's `/init` carries `code` as base64 of a zip, of a `.wasm`, or of a
//! precompiled artifact; the upload API takes the same. Detection is by
//! content, never by name, and a zip is unpacked with a size cap so a zip
//! bomb costs a clear error rather than the executor's memory.
//!
//! Nothing here recurses on input: a zip's module must be Wasm or an
//! artifact itself, so a zip inside a zip is refused after one level, and
//! an archive's entry count is bounded before any entry is read.

use std::io::Read;

use crate::artifact;

const WASM_MAGIC: &[u8; 4] = b"\0asm";
const ZIP_MAGIC: &[u8; 4] = b"PK\x03\x04";
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// Entries a zip may list. An action's zip holds a module and perhaps a
/// README; the bound keeps a crafted central directory (entries are ~50
/// bytes each) from costing more than a small allocation.
pub const MAX_ZIP_ENTRIES: usize = 1000;
/// Entry names preferred when a zip holds several modules.
const PREFERRED_STEMS: [&str; 2] = ["main", "action"];

pub use luge_core::runtime::is_component;

/// An action's module, as Wasm to compile or as an authenticated artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleCode {
    /// WebAssembly binary.
    Wasm(Vec<u8>),
    /// A Luge artifact (not yet authenticated).
    Artifact(Vec<u8>),
}

/// Why code was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// Nothing was sent.
    #[error("the action code is empty")]
    Empty,
    /// Native code without Luge's authenticated envelope.
    #[error(
        "unauthenticated precompiled artifact: native code is only loaded when sealed by luge-precompile with this operator's key"
    )]
    UnauthenticatedNative,
    /// Neither Wasm, a Luge artifact nor a zip.
    #[error(
        "the action code is not a WebAssembly module, a Luge artifact or a zip (first bytes {0})"
    )]
    Unrecognised(String),
    /// A zip that cannot be read.
    #[error("the zip archive is unreadable: {0}")]
    Zip(String),
    /// A zip whose module is itself a zip (or anything but a module).
    #[error(
        "the zip archive's {0} is not a WebAssembly module or a Luge artifact (zips inside zips are refused)"
    )]
    ZipNested(String),
    /// More entries than [`MAX_ZIP_ENTRIES`].
    #[error("the zip archive lists more than {MAX_ZIP_ENTRIES} entries")]
    ZipTooManyEntries,
    /// A zip without any module in it.
    #[error("the zip archive holds no WebAssembly module or Luge artifact (.wasm, .luge)")]
    ZipWithoutModule,
    /// A zip with several modules and none named main/action.
    #[error("the zip archive holds several modules ({0}); name the one to run main.wasm")]
    ZipAmbiguous(String),
    /// Bigger than the operator allows once unpacked.
    #[error("the action code exceeds {limit} bytes once unpacked")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
}

impl ModuleCode {
    /// Recognises `bytes`, unpacking a zip with at most `max_unpacked` bytes
    /// read from its chosen entry.
    pub fn detect(bytes: Vec<u8>, max_unpacked: usize) -> Result<Self, CodeError> {
        if bytes.is_empty() {
            return Err(CodeError::Empty);
        }
        if bytes.starts_with(WASM_MAGIC) {
            return Ok(Self::Wasm(bytes));
        }
        if artifact::is_artifact(&bytes) {
            return Ok(Self::Artifact(bytes));
        }
        if bytes.starts_with(ELF_MAGIC) {
            return Err(CodeError::UnauthenticatedNative);
        }
        if bytes.starts_with(ZIP_MAGIC) {
            return Self::from_zip(&bytes, max_unpacked);
        }
        let head: String = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        Err(CodeError::Unrecognised(head))
    }

    /// The raw bytes, Wasm or artifact.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Wasm(b) | Self::Artifact(b) => b,
        }
    }

    fn from_zip(bytes: &[u8], max_unpacked: usize) -> Result<Self, CodeError> {
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
            .map_err(|e| CodeError::Zip(e.to_string()))?;
        if archive.len() > MAX_ZIP_ENTRIES {
            return Err(CodeError::ZipTooManyEntries);
        }
        let candidates: Vec<(usize, String)> = (0..archive.len())
            .filter_map(|i| {
                let entry = archive.by_index_raw(i).ok()?;
                let name = entry.name().ok()?.into_owned();
                let is_module = entry.is_file()
                    && [".wasm", ".luge", ".cwasm"]
                        .iter()
                        .any(|ext| name.ends_with(ext));
                is_module.then_some((i, name))
            })
            .collect();
        let chosen = match candidates.as_slice() {
            [] => return Err(CodeError::ZipWithoutModule),
            [only] => only.0,
            many => {
                let preferred = many.iter().find(|(_, name)| {
                    let base = name.rsplit('/').next().unwrap_or(name);
                    let stem = base.split('.').next().unwrap_or(base);
                    PREFERRED_STEMS.contains(&stem)
                });
                match preferred {
                    Some((i, _)) => *i,
                    None => {
                        let names: Vec<&str> = many.iter().map(|(_, n)| n.as_str()).collect();
                        return Err(CodeError::ZipAmbiguous(names.join(", ")));
                    }
                }
            }
        };
        let entry = archive
            .by_index(chosen)
            .map_err(|e| CodeError::Zip(e.to_string()))?;
        let name = entry
            .name()
            .map_or_else(|_| "entry".to_owned(), |n| n.into_owned());
        let mut unpacked = Vec::new();
        entry
            .take(max_unpacked as u64 + 1)
            .read_to_end(&mut unpacked)
            .map_err(|e| CodeError::Zip(e.to_string()))?;
        if unpacked.len() > max_unpacked {
            return Err(CodeError::TooLarge {
                limit: max_unpacked,
            });
        }
        if unpacked.starts_with(WASM_MAGIC) {
            Ok(Self::Wasm(unpacked))
        } else if artifact::is_artifact(&unpacked) {
            Ok(Self::Artifact(unpacked))
        } else {
            Err(CodeError::ZipNested(name))
        }
    }
}

/// Decodes `text` if it is padded standard base64 and nothing else (no
/// line breaks, no other character), as OpenWhisk's CLI and controller
/// send code; `None` otherwise, for [`decode_base64`] to read it the
/// forgiving way. What it decodes, the forgiving decoder decodes alike; it
/// only skips that decoder's search for whitespace.
///
/// From [`DECODE_IN_HALVES_AT`] on, and where a helper thread can be had
/// ([`crate::HELPER_THREADS`]), the first half is decoded on a thread of
/// its own while this one decodes the second: a 3.7 MB text (a 2.8 MB
/// artifact) takes about 0.55 ms on one core of the 2-core machine of
/// `docs/BENCHMARKS.md`.
pub fn decode_padded_base64(text: &[u8]) -> Option<Vec<u8>> {
    const BASE64: base64_simd::Base64 = base64_simd::STANDARD;
    // The first half ends on a whole group of four characters with no
    // padding in it, so each half is a base64 text of its own, and the
    // bytes of the first are exactly the first `head.len() / 4 * 3`.
    let half = text.len() / 8 * 4;
    if text.len() < DECODE_IN_HALVES_AT || !text.len().is_multiple_of(4) {
        return BASE64.decode_to_vec(text).ok();
    }
    let (head, tail) = text.split_at(half);
    let len = BASE64.decoded_length(text).ok()?;
    let mut code = Vec::with_capacity(len);
    let (head_out, tail_out) = code.spare_capacity_mut().split_at_mut(half / 4 * 3);
    let halves = crate::helpers::beside(
        "luge-base64",
        // The decoder keeps its state in registers.
        64 << 10,
        || {
            BASE64
                .decode(head, base64_simd::Out::from_uninit_slice(head_out))
                .map(|out| out.len())
        },
        || {
            BASE64
                .decode(tail, base64_simd::Out::from_uninit_slice(tail_out))
                .map(|out| out.len())
        },
    );
    match halves {
        // Each half decoded whole (the decoder says how many bytes it wrote).
        Some((Some(Ok(first)), Ok(second))) if first == half / 4 * 3 && first + second == len => {}
        // No helper thread, or none started: all of it here.
        None | Some((None, _)) => return BASE64.decode_to_vec(text).ok(),
        Some(_) => return None,
    }
    // SAFETY: the decoder wrote `half / 4 * 3` bytes from the start of the
    // spare capacity and the rest of `len` from there on (checked above):
    // every byte of `0..len` is initialised.
    unsafe { code.set_len(len) };
    Some(code)
}

/// Texts from this length on are decoded in two halves at once (about
/// 0.15 ms of decoding per half, five times a thread's start).
pub const DECODE_IN_HALVES_AT: usize = 1 << 20;

/// Decodes code sent as base64 (OpenWhisk's `/init`, the upload API) as
/// clients write it: standard alphabet, padding optional, line breaks
/// tolerated (some tools wrap at 76 columns). That is WHATWG's "forgiving
/// base64", which `base64-simd` decodes at several GB/s (it also takes
/// non-zero bits after the last byte, as browsers do). What it refuses is
/// decoded again by the `base64` crate, whose error says where the input
/// is wrong.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine as _;
    if let Ok(code) = base64_simd::forgiving_decode_to_vec(text.as_bytes()) {
        return Ok(code);
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    if text.bytes().any(|b| b.is_ascii_whitespace()) {
        let compact: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        engine.decode(compact)
    } else {
        engine.decode(text)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// `len` bytes of a pattern, and their padded standard base64.
    fn sample(len: usize) -> (Vec<u8>, String) {
        use base64::Engine as _;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
        let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
        (bytes, text)
    }

    #[test]
    fn base64_is_decoded_like_the_general_purpose_decoder() {
        // Every length, wrapped or not, padded or not, decodes to the bytes
        // the general-purpose decoder gives.
        for len in 0..200usize {
            let (bytes, text) = sample(len);
            let unpadded = text.trim_end_matches('=').to_owned();
            let wrapped: String = text
                .as_bytes()
                .chunks(76)
                .map(|line| std::str::from_utf8(line).unwrap())
                .collect::<Vec<_>>()
                .join("\r\n");
            for text in [&text, &unpadded, &wrapped] {
                if len == 0 {
                    continue;
                }
                assert_eq!(decode_base64(text).unwrap(), bytes, "{text}");
            }
        }
        // Refusals still say what is wrong.
        let err = decode_base64("AG=zbQ").unwrap_err().to_string();
        assert!(err.contains("offset") || err.contains("symbol"), "{err}");
        assert!(decode_base64("A").is_err());
    }

    #[test]
    fn padded_base64_is_decoded_alike_or_left_to_the_forgiving_decoder() {
        for len in 1..200usize {
            let (bytes, text) = sample(len);
            assert_eq!(decode_padded_base64(text.as_bytes()).unwrap(), bytes);
            // Every text with one character changed, padding included: what
            // the strict decoder takes, the forgiving one decodes alike.
            for at in 0..text.len() {
                for c in [b'A', b'/', b'=', b' ', b'\n', b'"', b'\\', 0, 0xff] {
                    let mut changed = text.clone().into_bytes();
                    changed[at] = c;
                    let Some(strict) = decode_padded_base64(&changed) else {
                        continue;
                    };
                    let text = std::str::from_utf8(&changed).expect("only base64 is taken");
                    assert_eq!(decode_base64(text).unwrap(), strict, "{text}");
                }
            }
        }
        // Unpadded, wrapped, or with anything but base64: the forgiving's.
        for text in [
            "AGFzbQ",
            "AGFz\nbQ==",
            "AGFzbQ== ",
            "\"GFzbQ==",
            "AGFzbQ=\\",
        ] {
            assert_eq!(decode_padded_base64(text.as_bytes()), None, "{text:?}");
        }
    }

    #[test]
    fn large_texts_are_decoded_in_halves_alike() {
        use base64::Engine as _;
        let general = base64::engine::general_purpose::STANDARD;
        // Each padding, each length around the split, and a text of
        // several megabytes; each decoded in halves and whole alike.
        for len in [DECODE_IN_HALVES_AT / 4 * 3, (3 << 20) + 1, (3 << 20) + 2] {
            for extra in 0..3 {
                let bytes: Vec<u8> = (0..len + extra).map(|i| (i * 131 + i / 7) as u8).collect();
                let text = general.encode(&bytes);
                assert!(text.len() >= DECODE_IN_HALVES_AT);
                assert_eq!(
                    decode_padded_base64(text.as_bytes()).as_deref(),
                    Some(&bytes[..])
                );
                // A bad character in either half, or padding in the
                // middle: refused, for the forgiving decoder to say why.
                let mut text = text.into_bytes();
                for (at, c) in [(5, b'*'), (text.len() - 7, b'*'), (text.len() / 2, b'=')] {
                    let good = std::mem::replace(&mut text[at], c);
                    assert_eq!(decode_padded_base64(&text), None, "{at}");
                    text[at] = good;
                }
            }
        }
        // With every helper thread taken, decoded all the same, here.
        let places: Vec<_> = std::iter::from_fn(|| crate::HELPER_THREADS.take()).collect();
        let bytes = vec![7; 2 << 20];
        assert_eq!(
            decode_padded_base64(general.encode(&bytes).as_bytes()),
            Some(bytes)
        );
        drop(places);
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut out);
        for (name, data) in entries {
            writer
                .start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            writer.write_all(data).unwrap();
        }
        writer.finish().unwrap();
        out.into_inner()
    }

    const WASM: &[u8] = b"\0asm\x01\0\0\0";

    #[test]
    fn detects_wasm_artifact_and_native() {
        assert!(matches!(
            ModuleCode::detect(WASM.to_vec(), 1024),
            Ok(ModuleCode::Wasm(_))
        ));
        assert!(matches!(
            ModuleCode::detect(b"LUGEART\x01rest".to_vec(), 1024),
            Ok(ModuleCode::Artifact(_))
        ));
        assert!(matches!(
            ModuleCode::detect(b"\x7fELF....".to_vec(), 1024),
            Err(CodeError::UnauthenticatedNative)
        ));
        assert!(matches!(
            ModuleCode::detect(b"hello".to_vec(), 1024),
            Err(CodeError::Unrecognised(_))
        ));
        assert!(matches!(
            ModuleCode::detect(vec![], 1024),
            Err(CodeError::Empty)
        ));
    }

    #[test]
    fn unpacks_zip() {
        let zip = zip_of(&[("README", b"docs"), ("bin/echo.wasm", WASM)]);
        assert_eq!(
            ModuleCode::detect(zip, 1024).unwrap(),
            ModuleCode::Wasm(WASM.to_vec())
        );
    }

    #[test]
    fn zip_choices() {
        let none = zip_of(&[("README", b"docs")]);
        assert!(matches!(
            ModuleCode::detect(none, 1024),
            Err(CodeError::ZipWithoutModule)
        ));
        let two = zip_of(&[("a.wasm", WASM), ("b.wasm", WASM)]);
        assert!(matches!(
            ModuleCode::detect(two, 1024),
            Err(CodeError::ZipAmbiguous(_))
        ));
        let preferred = zip_of(&[("a.wasm", b"junk"), ("main.wasm", WASM)]);
        assert!(ModuleCode::detect(preferred, 1024).is_ok());
    }

    #[test]
    fn zip_bomb_is_capped() {
        let mut big = WASM.to_vec();
        big.resize(1 << 20, 0);
        let zip = zip_of(&[("main.wasm", &big)]);
        assert!(matches!(
            ModuleCode::detect(zip, 64 * 1024),
            Err(CodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn zips_inside_zips_are_refused_at_the_first_level() {
        // Deep nesting was once a recursion per level: a stack overflow at
        // a few thousand levels, hundreds of MiB well before.
        let mut nested = zip_of(&[("main.wasm", WASM)]);
        for _ in 0..200 {
            nested = zip_of(&[("main.wasm", &nested)]);
        }
        let refused = ModuleCode::detect(nested, 1 << 20).unwrap_err();
        assert!(matches!(refused, CodeError::ZipNested(_)), "{refused}");
        assert!(refused.to_string().contains("main.wasm"), "{refused}");
    }

    #[test]
    fn entry_count_is_bounded() {
        let names: Vec<String> = (0..=MAX_ZIP_ENTRIES).map(|i| format!("f{i}")).collect();
        let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        assert!(matches!(
            ModuleCode::detect(zip_of(&entries), 1024),
            Err(CodeError::ZipTooManyEntries)
        ));
    }

    #[test]
    fn garbage_zip_is_an_error() {
        assert!(matches!(
            ModuleCode::detect(b"PK\x03\x04garbage".to_vec(), 1024),
            Err(CodeError::Zip(_))
        ));
    }
}
