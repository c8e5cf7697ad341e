//! The operator's settings for outgoing connections, set once per process:
//! which roots TLS trusts (the platform's, the operator's `--ca-file`), and
//! the parts of Spin's runtime config that shape connections, with Spin's
//! keys exactly:
//!
//! ```toml
//! [outbound_networking]
//! block_networks = ["1.1.1.1/32", "private"]
//!
//! [[client_tls]]
//! component_ids = ["example-component"]
//! hosts = ["example.com", "localhost:8443"]
//! ca_use_platform_roots = true      # default: true unless ca_roots_file
//! ca_use_webpki_roots = false       # Mozilla's roots, built in
//! ca_roots_file = "path/to/roots.crt"
//! client_cert_file = "path/to/client.crt"      # mTLS, with the key
//! client_private_key_file = "path/to/client.key"
//! ```
//!
//! Relative paths are relative to the runtime config's directory. A
//! component (a function: a Spin component's id, a route's or upload's
//! name) connecting to one of a rule's hosts uses that rule's roots and
//! client certificate; every other connection the default roots (the
//! platform's and the operator's bundle).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipnet::IpNet;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the outbound settings could not be built; each names its file or
/// key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file that could not be read (missing, not a regular file, too
    /// large).
    #[error(transparent)]
    File(#[from] luge_core::files::FileError),
    /// A certificate file that is not PEM certificates.
    #[error("{file}: {reason}")]
    Pem {
        /// The file (or `--ca-file`).
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// A file of certificates with none in it.
    #[error("{0}: holds no certificate")]
    Empty(String),
    /// A certificate or key rustls refused.
    #[error("{file}: {source}")]
    Rustls {
        /// The file.
        file: String,
        /// What rustls said.
        source: rustls::Error,
    },
    /// A `[[client_tls]]` entry that is incomplete or malformed.
    #[error("[[client_tls]] {0}")]
    ClientTls(String),
    /// A `block_networks` entry that is neither CIDR nor `private`.
    #[error(
        "[outbound_networking] block_networks: {0:?} is neither an IP network in CIDR notation nor 'private'"
    )]
    BlockNetwork(String),
}

/// One `[[client_tls]]` entry as Spin's runtime config writes it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTlsToml {
    /// The components (functions) it applies to.
    pub component_ids: Vec<String>,
    /// The hosts (`name` or `name:port`) it applies to.
    pub hosts: Vec<String>,
    /// Trust the platform's roots (and the operator's bundle).
    pub ca_use_platform_roots: Option<bool>,
    /// Trust Mozilla's roots, built into this binary.
    pub ca_use_webpki_roots: Option<bool>,
    /// PEM roots to trust.
    pub ca_roots_file: Option<PathBuf>,
    /// PEM client certificate chain (mTLS).
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of that certificate.
    pub client_private_key_file: Option<PathBuf>,
}

/// `[outbound_networking]` as Spin's runtime config writes it (the keys
/// Luge serves; Spin's connection limits are refused as unknown keys:
/// Luge bounds connections per invocation and pool instead).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundNetworkingToml {
    /// Networks no connection may reach, whatever a grant says: CIDR
    /// ranges, or `private` (every address that is not public).
    #[serde(default)]
    pub block_networks: Vec<String>,
}

/// A `[[client_tls]]` entry, loaded.
struct Rule {
    components: Vec<String>,
    /// Host (lower case) and, if given, port.
    hosts: Vec<(String, Option<u16>)>,
    client: Arc<rustls::ClientConfig>,
    trust: Arc<TrustPem>,
}

/// What a TLS client trusts and presents, as PEM: for a driver that builds
/// its own client from files (MySQL's), so that it trusts exactly what
/// Luge's own clients do.
#[derive(Debug, Clone, Default)]
pub struct TrustPem {
    /// The trusted certificates (the platform's and the operator's, or a
    /// `[[client_tls]]` rule's), PEM.
    pub roots: Vec<u8>,
    /// Whether the Mozilla roots (webpki-roots) are trusted too.
    pub webpki: bool,
    /// The client certificate chain and key for mTLS, PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// `certificates` as one PEM text.
fn pem(certificates: &[CertificateDer<'_>]) -> Vec<u8> {
    use base64::Engine as _;
    let mut out = String::new();
    for cert in certificates {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out.into_bytes()
}

/// The outgoing-connection settings of this process.
pub struct Config {
    default: Arc<rustls::ClientConfig>,
    default_trust: Arc<TrustPem>,
    rules: Vec<Rule>,
    /// The platform's roots and the operator's bundle, for rules that use
    /// the platform's.
    platform: Vec<CertificateDer<'static>>,
    blocked: Vec<IpNet>,
    block_private: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("client_tls_rules", &self.rules.len())
            .field("blocked", &self.blocked)
            .field("block_private", &self.block_private)
            .finish_non_exhaustive()
    }
}

/// Every certificate in the PEM text `pem` of `file`: at least one.
fn certificates(file: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::Pem {
            file: file.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(ConfigError::Empty(file.to_owned()));
    }
    Ok(certs)
}

/// A PEM file the operator names: a regular file, at most
/// `MAX_CONFIG_FILE_BYTES`; an error names it, never its content.
fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    Ok(luge_core::files::read_bounded(
        path,
        luge_core::files::MAX_CONFIG_FILE_BYTES,
    )?)
}

/// A client config trusting `roots`, offering HTTP/2 and HTTP/1.1, with
/// `identity` as its client certificate if given.
fn client(
    roots: rustls::RootCertStore,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String)>,
) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| ConfigError::Rustls {
            file: "TLS protocol versions".to_owned(),
            source,
        })?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key, file)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|source| ConfigError::Rustls { file, source })?,
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client trusting only the certificates of `pem`, without ALPN.
pub(crate) fn trusting(pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates("the CA root", pem)? {
        roots.add(cert).map_err(|source| ConfigError::Rustls {
            file: "the CA root".to_owned(),
            source,
        })?;
    }
    let mut config = (*client(roots, None)?).clone();
    config.alpn_protocols.clear();
    Ok(Arc::new(config))
}

impl Config {
    /// Trusts the platform's roots (as `rustls-native-certs` finds them;
    /// none is fine, on a scratch image) and every certificate in
    /// `ca_pem`, the operator's bundle (`--ca-file`); blocks nothing.
    pub fn new(ca_pem: Option<&[u8]>) -> Result<Self, ConfigError> {
        // Certificates the platform has that rustls cannot parse are
        // skipped, as browsers do: one bad file does not stop the rest.
        let mut platform = rustls_native_certs::load_native_certs().certs;
        if let Some(pem) = ca_pem {
            platform.extend(certificates("--ca-file", pem)?);
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(platform.iter().cloned());
        Ok(Self {
            default: client(roots, None)?,
            default_trust: Arc::new(TrustPem {
                roots: pem(&platform),
                webpki: false,
                identity: None,
            }),
            rules: Vec::new(),
            platform,
            blocked: Vec::new(),
            block_private: false,
        })
    }

    /// Adds Spin's `[[client_tls]]` entries, their files relative to `dir`.
    pub fn client_tls(
        mut self,
        entries: &[ClientTlsToml],
        dir: &Path,
    ) -> Result<Self, ConfigError> {
        for entry in entries {
            if entry.component_ids.is_empty() {
                return Err(ConfigError::ClientTls(
                    "'component_ids' list may not be empty".to_owned(),
                ));
            }
            if entry.hosts.is_empty() {
                return Err(ConfigError::ClientTls(
                    "'hosts' list may not be empty".to_owned(),
                ));
            }
            let hosts = entry
                .hosts
                .iter()
                .map(|host| parse_host(host))
                .collect::<Result<Vec<_>, _>>()?;
            let (platform, webpki) = match (entry.ca_use_platform_roots, entry.ca_use_webpki_roots)
            {
                (Some(platform), Some(webpki)) => (platform, webpki),
                (Some(platform), None) => (platform, false),
                (None, Some(webpki)) => (false, webpki),
                (None, None) => (entry.ca_roots_file.is_none(), false),
            };
            let mut roots = rustls::RootCertStore::empty();
            let mut trusted: Vec<CertificateDer<'static>> = Vec::new();
            if platform {
                roots.add_parsable_certificates(self.platform.iter().cloned());
                trusted.extend(self.platform.iter().cloned());
            }
            if webpki {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            if let Some(file) = &entry.ca_roots_file {
                let path = dir.join(file);
                let name = path.display().to_string();
                for cert in certificates(&name, &read(&path)?)? {
                    trusted.push(cert.clone());
                    roots.add(cert).map_err(|source| ConfigError::Rustls {
                        file: name.clone(),
                        source,
                    })?;
                }
            }
            let mut identity_pem = None;
            let identity = match (&entry.client_cert_file, &entry.client_private_key_file) {
                (Some(cert), Some(key)) => {
                    let cert = dir.join(cert);
                    let key = dir.join(key);
                    let name = key.display().to_string();
                    let (cert_pem, key_pem) = (read(&cert)?, read(&key)?);
                    let chain = certificates(&cert.display().to_string(), &cert_pem)?;
                    let key =
                        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| ConfigError::Pem {
                            file: name.clone(),
                            reason: e.to_string(),
                        })?;
                    identity_pem = Some((cert_pem, key_pem));
                    Some((chain, key, name))
                }
                (None, None) => None,
                (Some(_), None) => {
                    return Err(ConfigError::ClientTls(
                        "client_cert_file specified without client_private_key_file".to_owned(),
                    ));
                }
                (None, Some(_)) => {
                    return Err(ConfigError::ClientTls(
                        "client_private_key_file specified without client_cert_file".to_owned(),
                    ));
                }
            };
            self.rules.push(Rule {
                components: entry.component_ids.clone(),
                hosts,
                client: client(roots, identity)?,
                trust: Arc::new(TrustPem {
                    roots: pem(&trusted),
                    webpki,
                    identity: identity_pem,
                }),
            });
        }
        Ok(self)
    }

    /// Adds Spin's `[outbound_networking]`.
    pub fn outbound_networking(
        mut self,
        table: &OutboundNetworkingToml,
    ) -> Result<Self, ConfigError> {
        for network in &table.block_networks {
            if network == "private" {
                self.block_private = true;
                continue;
            }
            let net = network
                .parse::<IpNet>()
                .or_else(|_| network.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| ConfigError::BlockNetwork(network.clone()))?;
            self.blocked.push(net.trunc());
        }
        Ok(self)
    }

    /// The TLS client `component` uses for `host:port`: its first rule
    /// naming both, else the default.
    pub(crate) fn client_for(
        &self,
        component: &str,
        host: &str,
        port: u16,
    ) -> &Arc<rustls::ClientConfig> {
        self.rule_for(component, host, port)
            .map_or(&self.default, |rule| &rule.client)
    }

    /// [`Config::client_for`]'s trust, as PEM.
    pub(crate) fn trust_for(&self, component: &str, host: &str, port: u16) -> &Arc<TrustPem> {
        self.rule_for(component, host, port)
            .map_or(&self.default_trust, |rule| &rule.trust)
    }

    /// The `[[client_tls]]` rule for `component` reaching `host:port`.
    fn rule_for(&self, component: &str, host: &str, port: u16) -> Option<&Rule> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.rules.iter().find(|rule| {
            rule.components.iter().any(|c| c == component)
                && rule
                    .hosts
                    .iter()
                    .any(|(h, p)| *h == host && p.is_none_or(|p| p == port))
        })
    }

    /// Whether the operator blocks every connection to `addr`: any address
    /// it reaches (`luge_core::capabilities::outbound::reached`: an
    /// unspecified address is this host's loopback) blocked.
    pub(crate) fn blocks(&self, addr: std::net::IpAddr) -> bool {
        luge_core::capabilities::outbound::reached(addr).any(|addr| {
            (self.block_private && !luge_core::capabilities::outbound::is_public(addr))
                || self.blocked.iter().any(|net| net.contains(&addr))
        })
    }
}

/// A `hosts` entry: `name` or `name:port` (an IPv6 literal in brackets).
fn parse_host(host: &str) -> Result<(String, Option<u16>), ConfigError> {
    let bad = || ConfigError::ClientTls(format!("invalid host {host:?} (name or name:port)"));
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') || name.ends_with(']') => {
            (name, Some(port.parse::<u16>().map_err(|_| bad())?))
        }
        _ => (host, None),
    };
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    if name.is_empty() || name.contains(['/', '@', '*', ' ']) {
        return Err(bad());
    }
    Ok((name.trim_end_matches('.').to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a driver is handed as PEM is exactly what Luge's own clients
    /// trust: the operator's bundle read back certificate for
    /// certificate, and a `[[client_tls]]` rule's own roots and identity.
    /// Every spelling of this host is blocked with its loopback network:
    /// the unspecified addresses, IPv4-mapped or not.
    #[test]
    fn every_spelling_of_this_host_is_blocked_with_loopback() {
        let config = Config::new(None)
            .expect("config")
            .outbound_networking(&OutboundNetworkingToml {
                block_networks: vec!["127.0.0.0/8".to_owned(), "::1/128".to_owned()],
            })
            .expect("blocks");
        for blocked in [
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "0.0.0.0",
            "::",
            "::ffff:0.0.0.0",
            "::ffff:127.0.0.1",
        ] {
            assert!(config.blocks(blocked.parse().unwrap()), "{blocked}");
        }
        for open in ["93.184.216.34", "10.0.0.1", "::ffff:93.184.216.34"] {
            assert!(!config.blocks(open.parse().unwrap()), "{open}");
        }
        // Only the IPv4 loopback blocked: `::` still reaches this host.
        let v4_only = Config::new(None)
            .expect("config")
            .outbound_networking(&OutboundNetworkingToml {
                block_networks: vec!["127.0.0.0/8".to_owned()],
            })
            .expect("blocks");
        assert!(v4_only.blocks("::".parse().unwrap()));
        // `private` blocks them all.
        let private = Config::new(None)
            .expect("config")
            .outbound_networking(&OutboundNetworkingToml {
                block_networks: vec!["private".to_owned()],
            })
            .expect("blocks");
        for blocked in ["0.0.0.0", "::", "::ffff:0.0.0.0", "127.0.0.1"] {
            assert!(private.blocks(blocked.parse().unwrap()), "{blocked}");
        }
    }

    #[test]
    fn trust_as_pem_is_what_the_clients_trust() {
        let ca = rcgen::generate_simple_self_signed(vec!["ca.example".to_owned()]).expect("ca");
        let ca_pem = ca.cert.pem();
        let config = Config::new(Some(ca_pem.as_bytes())).expect("config");
        let default = config.trust_for("f", "db.example", 3306);
        let read_back = certificates("pem", &default.roots).expect("pem");
        assert!(
            read_back
                .iter()
                .any(|c| c.as_ref() == ca.cert.der().as_ref())
        );
        assert_eq!(read_back.len(), config.platform.len());
        assert!(!default.webpki && default.identity.is_none());

        let dir = tempfile_dir();
        std::fs::write(dir.join("roots.pem"), &ca_pem).expect("write");
        let key = ca.signing_key.serialize_pem();
        std::fs::write(dir.join("client.pem"), &ca_pem).expect("write");
        std::fs::write(dir.join("client.key"), &key).expect("write");
        let rule = ClientTlsToml {
            component_ids: vec!["f".to_owned()],
            hosts: vec!["db.example:3306".to_owned()],
            ca_roots_file: Some("roots.pem".into()),
            ca_use_webpki_roots: Some(true),
            client_cert_file: Some("client.pem".into()),
            client_private_key_file: Some("client.key".into()),
            ca_use_platform_roots: None,
        };
        let config = config.client_tls(&[rule], &dir).expect("rule");
        let trust = config.trust_for("f", "DB.example.", 3306);
        assert_eq!(
            certificates("pem", &trust.roots).expect("pem"),
            vec![ca.cert.der().clone()]
        );
        assert!(trust.webpki);
        assert_eq!(
            trust.identity,
            Some((ca_pem.into_bytes(), key.into_bytes()))
        );
        // Another component, or another port: the default.
        assert!(!config.trust_for("g", "db.example", 3306).webpki);
        assert!(!config.trust_for("f", "db.example", 3307).webpki);
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("luge-outbound-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }
}
