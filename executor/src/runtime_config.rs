//! Spin's runtime config file (`--runtime-config-file`, Spin's flag): the
//! operator's settings that a Spin app's manifest leaves to the host.
//! Luge serves `[[client_tls]]` and `[outbound_networking]` (see
//! `luge_outbound::Config`); every other section is refused by name, so
//! a setting Luge would ignore never looks applied.

use std::path::Path;

use anyhow::{Context, bail};

/// Spin sections Luge does not serve yet, named in the refusal.
const NOT_SERVED: &[&str] = &[
    "key_value_store",
    "sqlite_database",
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
            name if NOT_SERVED.contains(&name) => {
                bail!("{}: [{name}] is not served by Luge yet", at())
            }
            name => bail!("{}: unknown section [{name}]", at()),
        };
    }
    Ok(config)
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
            refused("[sqlite_database.default]\ntype = \"spin\"\n")
                .contains("[sqlite_database] is not served")
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
}
