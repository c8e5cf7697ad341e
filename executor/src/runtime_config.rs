//! Spin's runtime config file (`--runtime-config-file`, Spin's flag): the
//! operator's settings that a Spin app's manifest leaves to the host.
//! [`SECTIONS`] lists what Luge knows of it: `[[client_tls]]` and
//! `[outbound_networking]` (see `luge_outbound::Config`),
//! `[sqlite_database.LABEL]` (see `luge_sqlite::Databases`),
//! `[key_value_store.LABEL]` ([`KeyValueStores`]) and
//! `[[variables_provider]]` (Spin 1's `[[config_provider]]` too:
//! [`VariableProviders`]); every other section is refused by name, so a
//! setting Luge would ignore never looks applied.

use std::path::Path;

use anyhow::{Context, bail};

/// Every section of Spin's runtime config Luge knows: what it reads, and
/// what it refuses by name. A section not here is refused as unknown; the
/// book's reference (docs/book/src/ref-runtime-config.md) is made from
/// this table and the types it names.
pub(crate) const SECTIONS: &[Section] = &[
    Section {
        heading: "[[client_tls]]",
        name: "client_tls",
        what: "a function's roots and client certificate for some hosts (`luge_outbound::Config`)",
        shape: Shape::Keys(luge_core::serde_keys::of::<luge_outbound::ClientTlsToml>),
    },
    Section {
        heading: "[outbound_networking]",
        name: "outbound_networking",
        what: "networks no outgoing connection may reach, whatever a grant says",
        shape: Shape::Keys(luge_core::serde_keys::of::<luge_outbound::OutboundNetworkingToml>),
    },
    Section {
        heading: "[sqlite_database.LABEL]",
        name: "sqlite_database",
        what: "the file behind a SQLite database label (`default` included)",
        shape: Shape::Types(luge_core::serde_keys::types::<SqliteToml>),
    },
    Section {
        heading: "[key_value_store.LABEL]",
        name: "key_value_store",
        what: "the tier a key-value store label lives on: Luge's Redis tier, or the local one (kept in `--state-dir`: a `path` is refused)",
        shape: Shape::Types(luge_core::serde_keys::types::<KeyValueToml>),
    },
    Section {
        heading: "[[variables_provider]]",
        name: "variables_provider",
        what: "where app variables come from besides `SPIN_VARIABLE_*`, in order",
        shape: Shape::Types(luge_core::serde_keys::types::<ProviderToml>),
    },
    Section {
        heading: "[[config_provider]]",
        name: "config_provider",
        what: "Spin 1's name for `[[variables_provider]]`, read the same",
        shape: Shape::Types(luge_core::serde_keys::types::<ProviderToml>),
    },
    Section {
        heading: "[llm_compute]",
        name: "llm_compute",
        what: "Spin's LLM backend: Luge serves no `fermyon:spin/llm`",
        shape: Shape::NotServed,
    },
];

/// One section of [`SECTIONS`].
pub(crate) struct Section {
    /// As a file writes it: `[name]`, `[[name]]` (a list) or
    /// `[name.LABEL]` (one table per label).
    pub heading: &'static str,
    /// The key of the file's top-level table.
    pub name: &'static str,
    /// What it sets, one line.
    pub what: &'static str,
    /// What it holds.
    pub shape: Shape,
}

/// What a section holds, as its types read it.
pub(crate) enum Shape {
    /// Tables of these keys.
    Keys(fn() -> &'static [&'static str]),
    /// Tables tagged by `type` (given as the argument), each type with
    /// its keys.
    Types(fn(&'static str) -> Vec<luge_core::serde_keys::Type>),
    /// A section refused by name.
    NotServed,
}

/// The runtime config file `file`, parsed; errors name it (and the line
/// of a syntax error), never its content.
fn read(file: &Path) -> anyhow::Result<toml::Table> {
    let at = || format!("--runtime-config-file {}", file.display());
    let text = luge_core::files::read_config_text(file).with_context(at)?;
    toml::from_str(&text).map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|span| format!("line {}: ", luge_core::files::line_of(&text, span.start)))
            .unwrap_or_default();
        anyhow::anyhow!("{}: {line}{}", at(), e.message().trim())
    })
}

/// The section `name` of the runtime config file `runtime_config`, with
/// what errors call the file (`--runtime-config-file FILE`) and the
/// directory its paths are relative to; `None` without a file or without
/// the section.
fn section(
    runtime_config: Option<&Path>,
    name: &str,
) -> anyhow::Result<Option<(toml::Value, String, std::path::PathBuf)>> {
    let Some(file) = runtime_config else {
        return Ok(None);
    };
    let Some(value) = read(file)?.remove(name) else {
        return Ok(None);
    };
    let dir = file.parent().unwrap_or(Path::new(".")).to_owned();
    Ok(Some((
        value,
        format!("--runtime-config-file {}", file.display()),
        dir,
    )))
}

/// The variables of the dotenv file `path`, as Spin's `env` provider reads
/// them; a line that is not `NAME=VALUE` is named by its number, never
/// quoted.
fn dotenv(path: &Path) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let text = luge_core::files::read_config_text(path)?;
    let mut values = std::collections::BTreeMap::new();
    for item in dotenvy::from_read_iter(text.as_bytes()) {
        match item {
            Ok((name, value)) => {
                values.insert(name, value);
            }
            Err(dotenvy::Error::LineParse(line, _)) => {
                let number = text
                    .lines()
                    .position(|l| l == line || l.contains(line.as_str()));
                match number {
                    Some(index) => bail!("line {}: not NAME=VALUE", index + 1),
                    None => bail!("a line is not NAME=VALUE"),
                }
            }
            Err(dotenvy::Error::Io(e)) => return Err(e.into()),
            Err(_) => bail!("not a dotenv file"),
        }
    }
    Ok(values)
}

/// The outbound settings of `ca_file` (the operator's CA bundle) and
/// `runtime_config` (Spin's runtime config file), each named in its
/// errors.
pub fn outbound(
    ca_file: Option<&Path>,
    runtime_config: Option<&Path>,
) -> anyhow::Result<luge_outbound::Config> {
    let pem = ca_file
        .map(|file| {
            luge_core::files::read_bounded(file, luge_core::files::MAX_CONFIG_FILE_BYTES)
                .with_context(|| format!("--ca-file {}", file.display()))
        })
        .transpose()?;
    let mut config = luge_outbound::Config::new(pem.as_deref()).with_context(|| {
        format!(
            "--ca-file {}",
            ca_file.map_or(String::new(), |f| f.display().to_string())
        )
    })?;
    let Some(file) = runtime_config else {
        return Ok(config);
    };
    let at = || format!("--runtime-config-file {}", file.display());
    let table = read(file)?;
    let dir = file.parent().unwrap_or(Path::new("."));
    for (section, value) in table {
        config = match section.as_str() {
            "client_tls" => {
                let entries: Vec<luge_outbound::ClientTlsToml> = value
                    .try_into()
                    .with_context(|| format!("{}: [[client_tls]]", at()))?;
                config.client_tls(&entries, dir).with_context(at)?
            }
            "outbound_networking" => {
                let table: luge_outbound::OutboundNetworkingToml = value
                    .try_into()
                    .with_context(|| format!("{}: [outbound_networking]", at()))?;
                config.outbound_networking(&table).with_context(at)?
            }
            name => match SECTIONS.iter().find(|known| known.name == name) {
                Some(Section {
                    shape: Shape::NotServed,
                    ..
                }) => bail!("{}: [{name}] is not served by Luge yet", at()),
                // Read by `sqlite`, `KeyValueStores::load` and
                // `VariableProviders::load`.
                Some(_) => config,
                None => bail!("{}: unknown section [{name}]", at()),
            },
        };
    }
    Ok(config)
}

/// A `[sqlite_database.LABEL]` section, as Spin's runtime config has it.
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum SqliteToml {
    /// A local file, relative to the runtime config file.
    Spin {
        #[serde(default)]
        path: Option<std::path::PathBuf>,
    },
    /// A remote server; read only to refuse it by name.
    Libsql(#[allow(dead_code)] toml::Table),
}

/// The databases a host keeps: each function's own under `own_dir`
/// (`None`: none), and the `[sqlite_database.NAME]` sections of
/// `runtime_config` (a `default` there is the one database every
/// function granted `default` opens, as on `spin up` with it set).
pub fn sqlite(
    runtime_config: Option<&Path>,
    own_dir: Option<std::path::PathBuf>,
) -> anyhow::Result<luge_sqlite::Databases> {
    let mut databases = luge_sqlite::Databases::new(own_dir);
    let Some((sections, named, dir)) = section(runtime_config, "sqlite_database")? else {
        return Ok(databases);
    };
    let at = || named.clone();
    let sections: std::collections::BTreeMap<String, SqliteToml> = sections
        .try_into()
        .with_context(|| format!("{}: [sqlite_database]", at()))?;
    for (label, section) in sections {
        let here = || format!("{}: [sqlite_database.{label}]", at());
        if !luge_core::capabilities::sqlite::valid_label(&label) {
            bail!("{}: a label is 1-64 letters, digits, '_' or '-'", here());
        }
        match section {
            SqliteToml::Spin { path: Some(path) } => databases.name(label, dir.join(path)),
            SqliteToml::Spin { path: None } => bail!(
                "{}: an in-memory database (no path) is not served by Luge; give a path",
                here()
            ),
            SqliteToml::Libsql(_) => bail!(
                "{}: libsql (a remote database) is not served by Luge",
                here()
            ),
        }
    }
    Ok(databases)
}

/// Spin's key-value stores as Luge's state tiers: a `[key_value_store.NAME]`
/// of `type = "redis"` is the store NAME on Luge's Redis tier (its `url`
/// becomes the tier's, or must be the tier's when `--state-url` or `[state]
/// url` names one: Luge keeps one Redis tier, with its quotas); one of
/// `type = "spin"` without a `path` is the local tier, where every store
/// is by default (Luge keeps local stores in its state directory, so a
/// `path` is refused, as are Azure Cosmos DB and DynamoDB).
#[derive(Debug, Default)]
pub struct KeyValueStores {
    /// The Redis tier's URL the runtime config gives (it may hold a
    /// password: never shown).
    pub redis_url: Option<String>,
    /// The labels on the Redis tier.
    pub global: std::collections::BTreeSet<String>,
}

/// A `[key_value_store.NAME]` section.
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum KeyValueToml {
    Redis {
        url: String,
    },
    Spin {
        #[serde(default)]
        path: Option<std::path::PathBuf>,
    },
    /// Read only to refuse it by name.
    AzureCosmos(#[allow(dead_code)] toml::Table),
    /// Read only to refuse it by name.
    AwsDynamo(#[allow(dead_code)] toml::Table),
}

impl KeyValueStores {
    /// The `[key_value_store.NAME]` sections of `runtime_config`.
    pub fn load(runtime_config: Option<&Path>) -> anyhow::Result<Self> {
        let mut stores = Self::default();
        let Some((sections, named, _)) = section(runtime_config, "key_value_store")? else {
            return Ok(stores);
        };
        let at = || named.clone();
        let toml::Value::Table(sections) = sections else {
            bail!("{}: [key_value_store] holds one table per store", at());
        };
        for (label, section) in sections {
            let here = || format!("{}: [key_value_store.{label}]", at());
            if label != luge_core::keyvalue::DEFAULT_BUCKET
                && !luge_core::state::valid_namespace(&label)
            {
                bail!("{}: not a store label Luge can grant", here());
            }
            // Only the type is named in an error: a URL may hold a password.
            let section: KeyValueToml = section.try_into().map_err(|e: toml::de::Error| {
                anyhow::anyhow!("{}: {}", here(), e.message().trim())
            })?;
            match section {
                KeyValueToml::Redis { url } => {
                    if stores.redis_url.as_ref().is_some_and(|u| *u != url) {
                        bail!(
                            "{}: Luge keeps one Redis tier, and another store names another URL",
                            here()
                        );
                    }
                    stores.redis_url = Some(url);
                    stores.global.insert(label);
                }
                KeyValueToml::Spin { path: None } => {}
                KeyValueToml::Spin { path: Some(_) } => bail!(
                    "{}: Luge keeps local stores in its state directory (--state-dir); a path is not served",
                    here()
                ),
                KeyValueToml::AzureCosmos(_) | KeyValueToml::AwsDynamo(_) => {
                    bail!(
                        "{}: this store type is not served by Luge (redis and spin are)",
                        here()
                    )
                }
            }
        }
        Ok(stores)
    }
}

/// Where a Spin app's variables come from besides their defaults: Spin's
/// environment provider first (`SPIN_VARIABLE_NAME` in Luge's
/// environment, always, with the highest priority, as on Spin), then each
/// `[[variables_provider]]` of the runtime config in its order: `env`
/// (its `prefix`, default `SPIN_VARIABLE`, and a `dotenv_path` file read
/// once at start) and `static` (its `values`). Vault and Azure Key Vault
/// are refused by name: each needs a network client with credentials of
/// its own that this host does not hold, and a secret fetched at start
/// would be one more copy of it in memory than `SPIN_VARIABLE_*` already
/// gives.
#[derive(Default)]
pub struct VariableProviders {
    providers: Vec<Provider>,
}

/// One provider, in the order the runtime config lists them.
enum Provider {
    /// Names as `PREFIX_NAME`, from Luge's environment, then the dotenv
    /// file's.
    Env {
        prefix: String,
        dotenv: std::collections::BTreeMap<String, String>,
    },
    /// Names as they are.
    Static(std::collections::BTreeMap<String, String>),
}

/// A `[[variables_provider]]` entry.
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ProviderToml {
    Env {
        #[serde(default)]
        prefix: Option<String>,
        #[serde(default)]
        dotenv_path: Option<std::path::PathBuf>,
    },
    Static {
        values: std::collections::BTreeMap<String, String>,
    },
    /// Read only to refuse it by name.
    Vault(#[allow(dead_code)] toml::Table),
    /// Read only to refuse it by name.
    AzureKeyVault(#[allow(dead_code)] toml::Table),
}

impl VariableProviders {
    /// The providers of `runtime_config` (none without one).
    pub fn load(runtime_config: Option<&Path>) -> anyhow::Result<Self> {
        let Some(file) = runtime_config else {
            return Ok(Self::default());
        };
        let at = || format!("--runtime-config-file {}", file.display());
        let table = read(file)?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let mut providers = Vec::new();
        for key in ["variables_provider", "config_provider"] {
            let Some(entries) = table.get(key) else {
                continue;
            };
            let entries: Vec<toml::Value> = entries
                .clone()
                .try_into()
                .with_context(|| format!("{}: [[{key}]] is a list of tables", at()))?;
            for (index, entry) in entries.into_iter().enumerate() {
                let here = || format!("{}: [[{key}]] #{}", at(), index + 1);
                // Only the type is named in an error: values may be secrets.
                let entry: ProviderToml = entry.try_into().map_err(|e: toml::de::Error| {
                    anyhow::anyhow!("{}: {}", here(), e.message().trim())
                })?;
                providers.push(match entry {
                    ProviderToml::Env {
                        prefix,
                        dotenv_path,
                    } => {
                        let dotenv = match dotenv_path {
                            Some(path) => {
                                let path = dir.join(path);
                                dotenv(&path).with_context(|| {
                                    format!("{}: dotenv_path {}", here(), path.display())
                                })?
                            }
                            None => std::collections::BTreeMap::new(),
                        };
                        Provider::Env {
                            prefix: prefix.unwrap_or_else(|| "SPIN_VARIABLE".to_owned()),
                            dotenv,
                        }
                    }
                    ProviderToml::Static { values } => Provider::Static(values),
                    ProviderToml::Vault(_) | ProviderToml::AzureKeyVault(_) => bail!(
                        "{}: this provider is not served by Luge (env and static are)",
                        here()
                    ),
                });
            }
        }
        Ok(Self { providers })
    }

    /// The value of the app variable `name` (lowercase) from the runtime
    /// config's providers, the first that has it; `env` reads Luge's
    /// environment.
    pub fn get(&self, name: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        self.providers.iter().find_map(|provider| match provider {
            Provider::Env { prefix, dotenv } => {
                let key = if prefix.is_empty() {
                    name.to_ascii_uppercase()
                } else {
                    format!("{prefix}_{}", name.to_ascii_uppercase())
                };
                env(&key).or_else(|| dotenv.get(&key).cloned())
            }
            Provider::Static(values) => values.get(name).cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// That `refused` (a reader's error for a file of `text`) names `reason`.
    #[track_caller]
    fn assert_refused(refused: impl Fn(&str) -> String, text: &str, reason: &str) {
        let error = refused(text);
        assert!(error.contains(reason), "{text}: {error}");
    }

    #[test]
    fn sections_are_served_or_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rc.toml");
        let refused = |text: &str| {
            std::fs::write(&file, text).unwrap();
            format!("{:#}", outbound(None, Some(&file)).unwrap_err())
        };
        for (text, reason) in [
            (
                "[llm_compute]\ntype = \"spin\"\n",
                "[llm_compute] is not served",
            ),
            ("[nonsense]\n", "unknown section [nonsense]"),
            (
                "[outbound_networking]\nblock_networks = [\"nope\"]\n",
                "neither an IP network",
            ),
            (
                "[outbound_networking]\nmax_socket_connections = 3\n",
                "max_socket_connections",
            ),
            (
                "[[client_tls]]\ncomponent_ids = []\nhosts = [\"a\"]\n",
                "'component_ids' list may not be empty",
            ),
            (
                "[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"a\"]\nclient_cert_file = \"c.pem\"\n",
                "without client_private_key_file",
            ),
            (
                "[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"a\"]\nca_roots_file = \"missing.pem\"\n",
                "missing.pem",
            ),
        ] {
            assert_refused(refused, text, reason);
        }
        std::fs::write(
            &file,
            "[outbound_networking]\nblock_networks = [\"private\", \"1.1.1.1/32\"]\n[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"example.com:8443\"]\nca_use_webpki_roots = true\n",
        )
        .unwrap();
        outbound(None, Some(&file)).unwrap();
    }

    #[test]
    fn sqlite_databases_are_read_or_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rc.toml");
        let read = |text: &str| {
            std::fs::write(&file, text).unwrap();
            sqlite(Some(&file), None)
        };
        let refused = |text: &str| format!("{:#}", read(text).unwrap_err());
        for (text, reason) in [
            ("[sqlite_database.default]\ntype = \"spin\"\n", "in-memory"),
            (
                "[sqlite_database.x]\ntype = \"libsql\"\nurl = \"https://a\"\ntoken = \"t\"\n",
                "libsql",
            ),
            (
                "[sqlite_database.x]\ntype = \"pg\"\npath = \"a\"\n",
                "unknown variant `pg`, expected `spin` or `libsql`",
            ),
            (
                "[sqlite_database.\"a b\"]\ntype = \"spin\"\npath = \"a\"\n",
                "label",
            ),
            (
                "[sqlite_database.x]\ntype = \"spin\"\npath = \"a\"\nnope = 1\n",
                "nope",
            ),
        ] {
            assert_refused(refused, text, reason);
        }
        let databases =
            read("[sqlite_database.orders]\ntype = \"spin\"\npath = \"data/orders.db\"\n").unwrap();
        assert!(databases.knows("orders"));
        assert!(!databases.knows("default"));
        assert_eq!(
            databases
                .path("orders", &["orders".to_owned()], "f")
                .unwrap(),
            dir.path().join("data/orders.db")
        );
        // The outbound reader passes the section by.
        outbound(None, Some(&file)).unwrap();
    }

    #[test]
    fn variable_providers_answer_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rc.toml");
        std::fs::write(
            dir.path().join("app.env"),
            "MY_TOKEN=from-dotenv\nMY_BOTH=dotenv\n",
        )
        .unwrap();
        std::fs::write(
            &file,
            "[[variables_provider]]\ntype = \"env\"\nprefix = \"MY\"\ndotenv_path = \"app.env\"\n\
             [[variables_provider]]\ntype = \"static\"\nvalues = { token = \"static\", other = \"static-other\" }\n",
        )
        .unwrap();
        let providers = VariableProviders::load(Some(&file)).unwrap();
        let env = |key: &str| (key == "MY_BOTH").then(|| "process".to_owned());
        assert_eq!(providers.get("token", &env).as_deref(), Some("from-dotenv"));
        assert_eq!(providers.get("both", &env).as_deref(), Some("process"));
        assert_eq!(
            providers.get("other", &env).as_deref(),
            Some("static-other")
        );
        assert_eq!(providers.get("none", &env), None);
        // The outbound reader passes the section by.
        outbound(None, Some(&file)).unwrap();
        for refused in [
            "[[variables_provider]]\ntype = \"vault\"\nurl = \"http://x\"\ntoken = \"secret-token\"\nmount = \"m\"\n",
            "[[config_provider]]\ntype = \"azure_key_vault\"\nvault_url = \"https://x\"\n",
        ] {
            std::fs::write(&file, refused).unwrap();
            let error = format!("{:#}", VariableProviders::load(Some(&file)).err().unwrap());
            assert!(error.contains("not served"), "{error}");
            assert!(!error.contains("secret-token"), "{error}");
        }
        std::fs::write(&file, "[[variables_provider]]\ntype = \"nope\"\n").unwrap();
        assert!(VariableProviders::load(Some(&file)).is_err());
    }

    #[test]
    fn key_value_stores_map_to_tiers_or_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rc.toml");
        let load = |text: &str| {
            std::fs::write(&file, text).unwrap();
            KeyValueStores::load(Some(&file))
        };
        let stores = load(
            "[key_value_store.default]\ntype = \"redis\"\nurl = \"redis://:pw@127.0.0.1:1\"\n\
             [key_value_store.cart]\ntype = \"redis\"\nurl = \"redis://:pw@127.0.0.1:1\"\n\
             [key_value_store.local]\ntype = \"spin\"\n",
        )
        .unwrap();
        assert_eq!(stores.redis_url.as_deref(), Some("redis://:pw@127.0.0.1:1"));
        assert_eq!(
            stores.global.iter().collect::<Vec<_>>(),
            ["cart", "default"]
        );
        outbound(None, Some(&file)).unwrap();
        for (text, expected) in [
            (
                "[key_value_store.a]\ntype = \"spin\"\npath = \"x.db\"\n",
                "a path is not served",
            ),
            (
                "[key_value_store.a]\ntype = \"azure_cosmos\"\nkey = \"secret\"\n",
                "not served",
            ),
            (
                "[key_value_store.a]\ntype = \"redis\"\nurl = \"redis://:secret@a\"\n[key_value_store.b]\ntype = \"redis\"\nurl = \"redis://b\"\n",
                "one Redis tier",
            ),
            (
                "[key_value_store.\"a/b\"]\ntype = \"spin\"\n",
                "not a store label",
            ),
        ] {
            let error = format!("{:#}", load(text).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
