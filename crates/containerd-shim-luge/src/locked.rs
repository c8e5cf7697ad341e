//! A Spin app as `spin registry push` ships it: the locked app (Spin's
//! `spin.lock` JSON, the layer `application/vnd.fermyon.spin.application.v1+config`),
//! its components and files as layers named by digest. [`write_app`]
//! turns it back into what Luge's Spin loader reads, a `spin.toml` with
//! its components and files beside it, so the app meets every check a
//! `spin.toml` meets (grants, variables, triggers), none skipped.
//!
//! The locked app is the image author's: every field is bounded and
//! checked here before a byte is written (paths stay under the app's
//! directory, ids are plain names, content is what the image holds), and
//! the manifest is written by a TOML serializer, never by pasting text.
//! Pure: given the layers' bytes, so it is tested without containerd.

use std::collections::BTreeMap;
use std::path::{Component as PathComponent, Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;

/// The media type of the locked app's layer (Spin's
/// `SPIN_APPLICATION_MEDIA_TYPE`).
pub const LOCKED_APP_MEDIA_TYPE: &str = "application/vnd.fermyon.spin.application.v1+config";
/// The media type of a component's layer (Spin's `WASM_LAYER_MEDIA_TYPE`).
pub const WASM_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The media type of one file's layer (Spin's `DATA_MEDIATYPE`).
pub const DATA_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+data";
/// The media type of a bundle of files (Spin's `ARCHIVE_MEDIATYPE`, used
/// past 500 layers or with `SPIN_OCI_ARCHIVE_LAYERS`): not read here.
pub const ARCHIVE_MEDIA_TYPE: &str = "application/vnd.wasm.content.bundle.v1.tar+gzip";

/// A locked app's JSON is a few KiB; anything past this is refused
/// before it is parsed.
pub const MAX_LOCKED_APP_BYTES: usize = 1 << 20;
/// Components and files an app may name (Spin's own bound on an image's
/// layers is 500).
const MAX_ENTRIES: usize = 1000;
/// A component id or a file path's length.
const MAX_NAME: usize = 255;

/// Where, under the app's directory, components and files are written.
pub const COMPONENTS_DIR: &str = "components";
/// See [`COMPONENTS_DIR`].
pub const FILES_DIR: &str = "files";
/// The manifest written for the loader.
pub const MANIFEST: &str = "spin.toml";

/// Why a locked app cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum LockedError {
    /// Too big to be a locked app.
    #[error("the locked app is {0} bytes, more than {MAX_LOCKED_APP_BYTES}")]
    TooBig(usize),
    /// Not the JSON Spin writes.
    #[error("the locked app is not a Spin lock file: {0}")]
    Json(#[from] serde_json::Error),
    /// A lock file version this loader does not know.
    #[error("spin_lock_version {0} is not one Luge reads (0 or 1)")]
    Version(u64),
    /// Something the app needs that Luge does not do, by name.
    #[error("the app needs {0}, which Luge does not support")]
    Unsupported(String),
    /// A malformed field, by where it is.
    #[error("{at}: {why}")]
    Invalid {
        /// The field.
        at: String,
        /// What is wrong with it.
        why: String,
    },
    /// Content the app names that no layer holds.
    #[error("{at}: no layer of the image holds {digest}")]
    Missing {
        /// The field naming it.
        at: String,
        /// Its digest.
        digest: String,
    },
    /// The manifest could not be written as TOML.
    #[error("the app cannot be written as a spin.toml: {0}")]
    Toml(#[from] toml::ser::Error),
    /// A value the TOML manifest cannot hold (a JSON `null`).
    #[error("{at}: {source}")]
    Value {
        /// The field.
        at: String,
        /// Why.
        source: toml::ser::Error,
    },
    /// Writing the app's files.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Debug, Deserialize)]
struct LockedApp {
    spin_lock_version: u64,
    #[serde(default)]
    must_understand: Vec<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, Value>,
    #[serde(default)]
    host_requirements: serde_json::Map<String, Value>,
    #[serde(default)]
    variables: BTreeMap<String, Variable>,
    triggers: Vec<Trigger>,
    components: Vec<Component>,
}

#[derive(Debug, Deserialize)]
struct Variable {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    secret: bool,
}

#[derive(Debug, Deserialize)]
struct Trigger {
    trigger_type: String,
    trigger_config: Value,
    #[serde(default)]
    trigger_dependencies: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Component {
    id: String,
    #[serde(default)]
    metadata: serde_json::Map<String, Value>,
    source: Source,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    files: Vec<ContentPath>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    dependencies: serde_json::Map<String, Value>,
    #[serde(default)]
    host_requirements: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Source {
    #[serde(flatten)]
    content: ContentRef,
}

#[derive(Debug, Deserialize)]
struct ContentRef {
    #[serde(default)]
    inline: Option<String>,
    #[serde(default)]
    digest: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ContentPath {
    #[serde(flatten)]
    content: ContentRef,
    path: String,
}

/// Component metadata keys as Spin's loader writes them, and the
/// manifest key each came from.
const METADATA_KEYS: &[(&str, &str)] = &[
    ("description", "description"),
    ("allowed_outbound_hosts", "allowed_outbound_hosts"),
    ("allowed_http_hosts", "allowed_http_hosts"),
    ("key_value_stores", "key_value_stores"),
    ("databases", "sqlite_databases"),
    ("ai_models", "ai_models"),
];
/// Application metadata kept in `[application]`.
const APPLICATION_KEYS: &[&str] = &["name", "version", "description", "authors"];

/// Writes the locked app `json` under `dir` as a `spin.toml` with its
/// components and files, taking each piece of content by digest from
/// `content` (the image's layers). Returns the manifest's path.
pub fn write_app(
    json: &[u8],
    content: &dyn Fn(&str) -> Option<Vec<u8>>,
    dir: &Path,
) -> Result<PathBuf, LockedError> {
    if json.len() > MAX_LOCKED_APP_BYTES {
        return Err(LockedError::TooBig(json.len()));
    }
    let app: LockedApp = serde_json::from_slice(json)?;
    if app.spin_lock_version > 1 {
        return Err(LockedError::Version(app.spin_lock_version));
    }
    // What Spin's hosts must understand: Luge understands none of it, so
    // an app that requires any of it is refused rather than half-run.
    if let Some(what) = app.must_understand.first() {
        return Err(LockedError::Unsupported(format!("must_understand {what}")));
    }
    if let Some((what, _)) = required(&app.host_requirements) {
        return Err(LockedError::Unsupported(format!("host requirement {what}")));
    }
    if app.components.len() + app.triggers.len() > MAX_ENTRIES {
        return Err(invalid("components", format!("more than {MAX_ENTRIES}")));
    }

    let mut manifest = app_tables(&app)?;
    let (components, writes) = components(&app, content)?;
    manifest.insert("component".into(), components.into());
    let text = toml::to_string(&manifest)?;

    for (relative, bytes) in writes {
        write(&dir.join(relative), &bytes)?;
    }
    let path = dir.join(MANIFEST);
    write(&path, text.as_bytes())?;
    Ok(path)
}

/// The manifest of `app` but its components: its version,
/// `[application]`, `[variables]` and `[[trigger.KIND]]` tables.
fn app_tables(app: &LockedApp) -> Result<toml::Table, LockedError> {
    let mut manifest = toml::Table::new();
    manifest.insert("spin_manifest_version".into(), 2.into());
    let mut application = toml::Table::new();
    for key in APPLICATION_KEYS {
        if let Some(value) = app.metadata.get(*key) {
            application.insert((*key).into(), to_toml(value, &format!("metadata.{key}"))?);
        }
    }
    if let Some(settings) = app.metadata.get("triggers") {
        application.insert("trigger".into(), to_toml(settings, "metadata.triggers")?);
    }
    manifest.insert("application".into(), application.into());

    let mut variables = toml::Table::new();
    for (name, variable) in &app.variables {
        let mut entry = toml::Table::new();
        match &variable.default {
            Some(default) => entry.insert("default".into(), default.clone().into()),
            None => entry.insert("required".into(), true.into()),
        };
        if variable.secret {
            entry.insert("secret".into(), true.into());
        }
        if let Some(description) = &variable.description {
            entry.insert("description".into(), description.clone().into());
        }
        variables.insert(name.clone(), entry.into());
    }
    if !variables.is_empty() {
        manifest.insert("variables".into(), variables.into());
    }

    let mut triggers: BTreeMap<String, Vec<toml::Value>> = BTreeMap::new();
    for (index, trigger) in app.triggers.iter().enumerate() {
        let at = format!("triggers[{index}]");
        plain_name(&trigger.trigger_type, &format!("{at}.trigger_type"))?;
        if !trigger.trigger_dependencies.is_empty() {
            return Err(LockedError::Unsupported(format!(
                "trigger dependencies (middleware) on {at}"
            )));
        }
        let config = to_toml(&trigger.trigger_config, &format!("{at}.trigger_config"))?;
        triggers
            .entry(trigger.trigger_type.clone())
            .or_default()
            .push(config);
    }
    manifest.insert(
        "trigger".into(),
        toml::Value::Table(
            triggers
                .into_iter()
                .map(|(kind, list)| (kind, toml::Value::Array(list)))
                .collect(),
        ),
    );

    Ok(manifest)
}

/// Each piece of content a component of the app needs, at its path under
/// the app's directory.
type Writes = Vec<(PathBuf, Vec<u8>)>;

/// `app`'s `[component.ID]` tables, and the files they name, taken by
/// digest from `content`.
fn components(
    app: &LockedApp,
    content: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<(toml::Table, Writes), LockedError> {
    let mut components = toml::Table::new();
    let mut writes: Writes = Vec::new();
    let mut files_seen = 0usize;
    for component in &app.components {
        let id = &component.id;
        let at = format!("component {id}");
        plain_name(id, "components[].id")?;
        if components.contains_key(id) {
            return Err(invalid(&at, "named twice".to_owned()));
        }
        if !component.dependencies.is_empty() {
            return Err(LockedError::Unsupported(format!(
                "component dependencies (composition) in {at}"
            )));
        }
        if let Some((what, _)) = required(&component.host_requirements) {
            return Err(LockedError::Unsupported(format!(
                "host requirement {what} of {at}"
            )));
        }
        let mut entry = toml::Table::new();
        let wasm = resolve(&component.source.content, content, &format!("{at}.source"))?;
        let source = Path::new(COMPONENTS_DIR).join(format!("{id}.wasm"));
        writes.push((source.clone(), wasm));
        entry.insert("source".into(), source.display().to_string().into());
        for (from, to) in METADATA_KEYS {
            if let Some(value) = component.metadata.get(*from) {
                entry.insert(
                    (*to).into(),
                    to_toml(value, &format!("{at}.metadata.{from}"))?,
                );
            }
        }
        for (key, map, field) in [
            ("environment", &component.env, "env"),
            ("variables", &component.config, "config"),
        ] {
            if !map.is_empty() {
                entry.insert(key.into(), to_toml(map, &format!("{at}.{field}"))?);
            }
        }
        if !component.files.is_empty() {
            // Spin mounts each file at its path from the guest's root: one
            // directory per component, granted read-only at `/`.
            let root = Path::new(FILES_DIR).join(id);
            for (index, file) in component.files.iter().enumerate() {
                files_seen += 1;
                if files_seen > MAX_ENTRIES {
                    return Err(invalid("files", format!("more than {MAX_ENTRIES}")));
                }
                let file_at = format!("{at}.files[{index}]");
                let relative = relative_path(&file.path, &file_at)?;
                let bytes = resolve(&file.content, content, &file_at)?;
                writes.push((root.join(relative), bytes));
            }
            let mut mount = toml::Table::new();
            mount.insert("source".into(), root.display().to_string().into());
            mount.insert("destination".into(), "/".into());
            entry.insert("files".into(), vec![toml::Value::Table(mount)].into());
        }
        components.insert(id.clone(), entry.into());
    }
    Ok((components, writes))
}

/// The first host requirement that is not `optional`.
fn required(requirements: &serde_json::Map<String, Value>) -> Option<(&String, &Value)> {
    requirements
        .iter()
        .find(|(_, value)| value.as_str() != Some("optional"))
}

fn invalid(at: &str, why: String) -> LockedError {
    LockedError::Invalid {
        at: at.to_owned(),
        why,
    }
}

fn to_toml(value: &impl serde::Serialize, at: &str) -> Result<toml::Value, LockedError> {
    toml::Value::try_from(value).map_err(|source| LockedError::Value {
        at: at.to_owned(),
        source,
    })
}

/// An id or trigger type: a file name and a TOML key, nothing more.
fn plain_name(name: &str, at: &str) -> Result<(), LockedError> {
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        Ok(())
    } else {
        Err(invalid(
            at,
            format!("{name:?} is not a name (letters, digits, - and _)"),
        ))
    }
}

/// A file's path: relative, its parts plain names, under its root.
fn relative_path(path: &str, at: &str) -> Result<PathBuf, LockedError> {
    let path = path.trim_start_matches('/');
    let mut out = PathBuf::new();
    for part in Path::new(path).components() {
        match part {
            PathComponent::Normal(name) if name.len() <= MAX_NAME => out.push(name),
            PathComponent::CurDir => {}
            _ => {
                return Err(invalid(
                    at,
                    format!("{path:?} leaves the app's files (only plain names)"),
                ));
            }
        }
    }
    if out.as_os_str().is_empty() || path.len() > 4096 {
        return Err(invalid(at, format!("{path:?} is not a file's path")));
    }
    Ok(out)
}

/// The content a reference names: inline (base64) or a layer's digest.
fn resolve(
    reference: &ContentRef,
    content: &dyn Fn(&str) -> Option<Vec<u8>>,
    at: &str,
) -> Result<Vec<u8>, LockedError> {
    if let Some(inline) = &reference.inline {
        return base64::engine::general_purpose::STANDARD
            .decode(inline)
            .map_err(|e| invalid(at, format!("inline content is not base64: {e}")));
    }
    match &reference.digest {
        Some(digest) => content(digest).ok_or_else(|| LockedError::Missing {
            at: at.to_owned(),
            digest: digest.clone(),
        }),
        None => Err(invalid(
            at,
            "names no content (no digest, nothing inline)".to_owned(),
        )),
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), LockedError> {
    let io = |source| LockedError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, bytes).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WASM: &[u8] = b"\0asm\x01\0\0\0";

    fn layers(digest: &str) -> Option<Vec<u8>> {
        match digest {
            "sha256:aa" => Some(WASM.to_vec()),
            "sha256:dd" => Some(b"file contents".to_vec()),
            _ => None,
        }
    }

    /// A lock file as Spin 3's `spin registry push` writes one.
    const LOCKED: &str = r#"{
      "spin_lock_version": 1,
      "metadata": {"name": "hello", "version": "0.1.0", "origin": "file:///x/spin.toml",
                   "trigger": {"type": "http"}},
      "variables": {"greeting": {"default": "Hello"}, "token": {"secret": true}},
      "triggers": [{"id": "trigger--app", "trigger_type": "http",
                    "trigger_config": {"route": "/...", "component": "app"}}],
      "components": [{
        "id": "app",
        "metadata": {"allowed_outbound_hosts": ["https://example.com"],
                     "key_value_stores": ["default"], "databases": ["default"]},
        "source": {"content_type": "application/wasm", "digest": "sha256:aa"},
        "env": {"MODE": "prod"},
        "files": [{"digest": "sha256:dd", "path": "static/a.txt"},
                  {"inline": "aGk=", "path": "/b.txt"}],
        "config": {"greeting": "{{ greeting }}"}
      }]
    }"#;

    #[test]
    fn a_locked_app_becomes_a_manifest_with_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = write_app(LOCKED.as_bytes(), &layers, dir.path()).unwrap();
        let text = std::fs::read_to_string(&manifest).unwrap();
        let parsed: toml::Table = text.parse().unwrap();
        assert_eq!(parsed["application"]["name"].as_str(), Some("hello"));
        assert_eq!(
            parsed["variables"]["greeting"]["default"].as_str(),
            Some("Hello")
        );
        assert_eq!(
            parsed["variables"]["token"]["required"].as_bool(),
            Some(true)
        );
        assert_eq!(parsed["variables"]["token"]["secret"].as_bool(), Some(true));
        let trigger = &parsed["trigger"]["http"][0];
        assert_eq!(trigger["route"].as_str(), Some("/..."));
        assert_eq!(trigger["component"].as_str(), Some("app"));
        let app = &parsed["component"]["app"];
        assert_eq!(app["source"].as_str(), Some("components/app.wasm"));
        assert_eq!(
            app["allowed_outbound_hosts"][0].as_str(),
            Some("https://example.com")
        );
        assert_eq!(app["sqlite_databases"][0].as_str(), Some("default"));
        assert_eq!(app["environment"]["MODE"].as_str(), Some("prod"));
        assert_eq!(
            app["variables"]["greeting"].as_str(),
            Some("{{ greeting }}")
        );
        assert_eq!(app["files"][0]["destination"].as_str(), Some("/"));
        let root = dir.path();
        assert_eq!(
            std::fs::read(root.join("components/app.wasm")).unwrap(),
            WASM
        );
        assert_eq!(
            std::fs::read(root.join("files/app/static/a.txt")).unwrap(),
            b"file contents"
        );
        assert_eq!(std::fs::read(root.join("files/app/b.txt")).unwrap(), b"hi");
    }

    fn refused(json: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let error = write_app(json.as_bytes(), &layers, dir.path()).unwrap_err();
        // Nothing is written for a refused app.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{error}");
        error.to_string()
    }

    #[test]
    fn hostile_locked_apps_are_refused_by_name() {
        let with = |from: &str, to: &str| {
            assert!(LOCKED.contains(from), "{from}");
            LOCKED.replace(from, to)
        };
        assert!(
            refused(&with(
                r#""path": "static/a.txt""#,
                r#""path": "../../etc/x""#
            ))
            .contains("leaves the app's files")
        );
        assert!(refused(&with(r#""id": "app""#, r#""id": "../app""#)).contains("is not a name"));
        assert!(refused(&with("sha256:aa", "sha256:ff")).contains("no layer of the image holds"));
        assert!(
            refused(&with(
                r#""spin_lock_version": 1"#,
                r#""spin_lock_version": 7"#
            ))
            .contains("spin_lock_version 7")
        );
        assert!(
            refused(&with(
                r#""spin_lock_version": 1,"#,
                r#""spin_lock_version": 1, "host_requirements": {"local_service_chaining": "required"},"#
            ))
            .contains("host requirement local_service_chaining")
        );
        assert!(
            refused(&with(
                r#""config": {"#,
                r#""dependencies": {"a:b/c": {"source": {"content_type": "x", "digest": "sha256:aa"}}}, "config": {"#
            ))
            .contains("composition")
        );
        assert!(
            refused(&with(
                r#""trigger_type": "http""#,
                r#""trigger_type": "http]\nx""#
            ))
            .contains("is not a name")
        );
        assert!(refused("{").contains("not a Spin lock file"));
        let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(MAX_LOCKED_APP_BYTES));
        assert!(refused(&huge).contains("more than"));
    }
}
