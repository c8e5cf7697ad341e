//! An image whose layers are the app (the OCI layout `spin registry push`
//! writes and containerd-shim-spin reads): runwasi hands the shim the
//! layers whose media types [`LAYER_TYPES`] names, already compiled where
//! [`crate::compiler`] compiled them; this writes them out as the
//! directory [`crate::locked::write_app`] makes.

use std::path::{Path, PathBuf};

use containerd_shim_wasm::sandbox::context::WasmLayer;

use crate::compiler::WASM_LAYER_TYPES;
use crate::locked::{self, ARCHIVE_MEDIA_TYPE, DATA_MEDIA_TYPE, LOCKED_APP_MEDIA_TYPE};

/// Every layer type the shim asks runwasi for: Wasm, the locked app, the
/// files, and the archive (only to refuse it by name rather than run an
/// app without its files).
pub const LAYER_TYPES: &[&str] = &[
    WASM_LAYER_TYPES[0],
    WASM_LAYER_TYPES[1],
    WASM_LAYER_TYPES[2],
    LOCKED_APP_MEDIA_TYPE,
    DATA_MEDIA_TYPE,
    ARCHIVE_MEDIA_TYPE,
];

/// Where, in the container's root, the app is written.
pub const APP_DIR: &str = "luge-oci";

/// Why an image's layers cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Wasm layers and no Spin app to say how to serve them.
    #[error(
        "no runnable app in the image: its Wasm layers come without a Spin locked app \
         ({LOCKED_APP_MEDIA_TYPE})"
    )]
    NoLockedApp,
    /// Two apps in one image.
    #[error("the image holds {0} Spin locked apps; one is served")]
    ManyLockedApps(usize),
    /// Files as one archive layer.
    #[error(
        "the image's files are an archive layer ({ARCHIVE_MEDIA_TYPE}), which Luge does not \
         unpack; push the app without SPIN_OCI_ARCHIVE_LAYERS"
    )]
    Archive,
    /// The directory the app is written to is already in the image (a
    /// layer of files beside the app's, a link it made): never written
    /// through.
    #[error("the image already holds {0}, where the app is written")]
    Exists(PathBuf),
    /// The directory could not be made.
    #[error("making {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The locked app itself.
    #[error(transparent)]
    Locked(#[from] locked::LockedError),
}

fn media_type(layer: &WasmLayer) -> String {
    layer.config.media_type().to_string()
}

/// The locked app's layer, if the layers make a servable app.
pub fn locked_app(layers: &[WasmLayer]) -> Result<&WasmLayer, OciError> {
    if layers.iter().any(|l| media_type(l) == ARCHIVE_MEDIA_TYPE) {
        return Err(OciError::Archive);
    }
    let mut apps = layers
        .iter()
        .filter(|l| media_type(l) == LOCKED_APP_MEDIA_TYPE);
    match (apps.next(), apps.count()) {
        (Some(app), 0) => Ok(app),
        (None, _) => Err(OciError::NoLockedApp),
        (Some(_), more) => Err(OciError::ManyLockedApps(more + 1)),
    }
}

/// Where, under `dir`, [`write_app`] puts the app's files: `luge serve`'s
/// `--fs-root`, so a grant reaches those and nothing else.
pub fn files_root(dir: &Path) -> PathBuf {
    dir.join(locked::FILES_DIR)
}

/// Writes the app the layers make under `dir`, which must not exist yet;
/// returns its manifest. A component's layer is written as runwasi gives
/// it: a sealed artifact where the compiler made one, else the Wasm
/// (compiled by `luge serve`).
pub fn write_app(layers: &[WasmLayer], dir: &Path) -> Result<PathBuf, OciError> {
    let app = locked_app(layers)?;
    // Made here, not found: a directory or link an image brought is
    // refused rather than written through.
    std::fs::create_dir(dir).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => OciError::Exists(dir.to_owned()),
        _ => OciError::Io {
            path: dir.to_owned(),
            source,
        },
    })?;
    let content = |digest: &str| {
        layers
            .iter()
            .find(|l| {
                l.config.digest().to_string() == digest && media_type(l) != LOCKED_APP_MEDIA_TYPE
            })
            .map(|l| l.layer.clone())
    };
    let manifest = locked::write_app(&app.layer, &content, dir)?;
    // Made even when empty: `--fs-root` names a directory.
    let files = files_root(dir);
    std::fs::create_dir_all(&files).map_err(|source| locked::LockedError::Io {
        path: files,
        source,
    })?;
    Ok(manifest)
}
