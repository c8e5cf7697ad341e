//! Spin's runtime config file (`--runtime-config-file`, Spin's flag): the
//! operator's settings that a Spin app's manifest leaves to the host.
//! Luge serves `[[client_tls]]` and `[outbound_networking]` (see
//! `luge_outbound::Config`) and `[sqlite_database.NAME]` (see
//! `luge_sqlite::Databases`); every other section is refused by name, so
//! a setting Luge would ignore never looks applied.

use std::path::Path;

use anyhow::{Context, bail};

/// Spin sections Luge does not serve yet, named in the refusal.
const NOT_SERVED: &[&str] = &[
    "key_value_store",
    "llm_compute",
    "variables_provider",
    "config_provider",
];

/// The outbound settings of `ca_file` (the operator's CA bundle) and
/// `runtime_config` (Spin's runtime config file), each named in its
/// errors.
pub fn outbound(
    ca_file: Option<&Path>,
    runtime_config: Option<&Path>,
) -> anyhow::Result<luge_outbound::Config> {
    let pem = ca_file
        .map(|file| std::fs::read(file).with_context(|| format!("--ca-file {}", file.display())))
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
    let text = std::fs::read_to_string(file).with_context(at)?;
    let table: toml::Table = toml::from_str(&text).with_context(at)?;
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
            // Read by `sqlite`.
            "sqlite_database" => config,
            name if NOT_SERVED.contains(&name) => {
                bail!("{}: [{name}] is not served by Luge yet", at())
            }
            name => bail!("{}: unknown section [{name}]", at()),
        };
    }
    Ok(config)
}

/// A `[sqlite_database.NAME]` section, as Spin's runtime config has it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SqliteDatabaseToml {
    /// `spin` (a local file); Spin's `libsql` (a remote server) is
    /// refused by name.
    r#type: String,
    /// The file, relative to the runtime config file.
    path: Option<std::path::PathBuf>,
    /// `libsql`'s; read only to refuse it by name.
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    token: Option<toml::Value>,
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
    let Some(file) = runtime_config else {
        return Ok(databases);
    };
    let at = || format!("--runtime-config-file {}", file.display());
    let text = std::fs::read_to_string(file).with_context(at)?;
    let mut table: toml::Table = toml::from_str(&text).with_context(at)?;
    let Some(sections) = table.remove("sqlite_database") else {
        return Ok(databases);
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let sections: std::collections::BTreeMap<String, SqliteDatabaseToml> = sections
        .try_into()
        .with_context(|| format!("{}: [sqlite_database]", at()))?;
    for (label, section) in sections {
        let here = || format!("{}: [sqlite_database.{label}]", at());
        if !luge_core::capabilities::sqlite::valid_label(&label) {
            bail!("{}: a label is 1-64 letters, digits, '_' or '-'", here());
        }
        match (section.r#type.as_str(), section.path) {
            ("spin", Some(path)) => databases.name(label, dir.join(path)),
            ("spin", None) => bail!(
                "{}: an in-memory database (no path) is not served by Luge; give a path",
                here()
            ),
            ("libsql", _) => {
                let _ = (section.url, section.token);
                bail!(
                    "{}: libsql (a remote database) is not served by Luge",
                    here()
                )
            }
            (other, _) => bail!("{}: unknown type {other:?} (Luge serves \"spin\")", here()),
        }
    }
    Ok(databases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_served_or_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rc.toml");
        let refused = |text: &str| {
            std::fs::write(&file, text).unwrap();
            format!("{:#}", outbound(None, Some(&file)).unwrap_err())
        };
        assert!(
            refused("[key_value_store.default]\ntype = \"spin\"\n")
                .contains("[key_value_store] is not served")
        );
        assert!(refused("[nonsense]\n").contains("unknown section [nonsense]"));
        assert!(
            refused("[outbound_networking]\nblock_networks = [\"nope\"]\n")
                .contains("neither an IP network")
        );
        assert!(
            refused("[outbound_networking]\nmax_socket_connections = 3\n")
                .contains("max_socket_connections")
        );
        assert!(
            refused("[[client_tls]]\ncomponent_ids = []\nhosts = [\"a\"]\n")
                .contains("'component_ids' list may not be empty")
        );
        assert!(refused("[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"a\"]\nclient_cert_file = \"c.pem\"\n").contains("without client_private_key_file"));
        assert!(refused("[[client_tls]]\ncomponent_ids = [\"a\"]\nhosts = [\"a\"]\nca_roots_file = \"missing.pem\"\n").contains("missing.pem"));
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
        assert!(refused("[sqlite_database.default]\ntype = \"spin\"\n").contains("in-memory"));
        assert!(
            refused("[sqlite_database.x]\ntype = \"libsql\"\nurl = \"https://a\"\ntoken = \"t\"\n")
                .contains("libsql")
        );
        assert!(
            refused("[sqlite_database.x]\ntype = \"pg\"\npath = \"a\"\n").contains("unknown type")
        );
        assert!(
            refused("[sqlite_database.\"a b\"]\ntype = \"spin\"\npath = \"a\"\n").contains("label")
        );
        assert!(
            refused("[sqlite_database.x]\ntype = \"spin\"\npath = \"a\"\nnope = 1\n")
                .contains("nope")
        );
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
}
