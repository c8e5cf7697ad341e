//! The outbound-networking slice: `allowed_outbound_hosts`, exactly as
//! Spin defines it, in every place a grant is written (luge.toml routes,
//! uploads, the OpenWhisk annotation `http.allowed_outbound_hosts`,
//! spin.toml), and the checks every outgoing connection passes.
//!
//! A grant is `scheme://host[:port]`:
//!
//! - scheme: one word (`http`, `https`, `postgres`, `mysql`, `redis`,
//!   `mqtt`, `tcp`, `udp`, ...) or `*`;
//! - host: a name, an IP literal (`[::1]` for IPv6), a CIDR range
//!   (`10.0.0.0/8`), `*.example.com` (any name below it, not the domain
//!   itself), `*` (any host), or `self` (`self.alt`): relative URLs,
//!   which reach this host's own routes;
//! - port: a number, `*`, or a range `start..end` (end excluded, as in
//!   Spin); absent, the scheme's well-known port (`http` 80, `https` 443,
//!   `postgres` 5432, `mysql` 3306, `redis` 6379, `mqtt` 1883), and a scheme
//!   without one must name its port;
//! - no path, no user info; `{{ name }}` templates are expanded from the
//!   function's variables before parsing.
//!
//! Names are compared lower-case without a trailing dot, IP literals as
//! addresses (so `127.1` or `2130706433` never match `127.0.0.1`: they
//! are names, and a name that looks like a number is refused at
//! connection). Beyond Spin, one rule about where a connection may land
//! (see [`AllowedHosts::permits_address`] and docs/SECURITY.md): an
//! address that is not globally routable (loopback, private, link-local,
//! ...) is reached only through a grant that names that host or address
//! exactly, or a CIDR range holding it; a wildcard grant (`*`,
//! `*.example.com`) reaches public addresses only, whatever DNS answers.
//!
//! Service chaining: `http://NAME.spin.internal` (or `NAME.luge.internal`)
//! granted exactly lets a handler call function NAME in process; no
//! wildcard grants it (the Spin loader expands `*.spin.internal` to the
//! app's own components, which is what it means on Spin).

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use super::error::{GrantError, bad};
use super::variables::{TemplateError, Variables, expand};

/// Most `allowed_outbound_hosts` entries one function may be granted.
pub const MAX_OUTBOUND_GRANTS: usize = 64;

/// The domains whose hosts name functions of this host (service
/// chaining): `http://NAME.luge.internal/...` is function NAME, and Spin's
/// `NAME.spin.internal` the same, so Spin apps chain unchanged.
pub const CHAINING_DOMAINS: [&str; 2] = [".luge.internal", ".spin.internal"];

/// How a sandbox's `wasi:sockets` reach the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Network {
    /// Where its [`AllowedHosts`] grant, each address checked, no
    /// listener (see `luge_outbound::Sockets`): every tenant's, and the
    /// default.
    #[default]
    Granted,
    /// The host's network as the process has it, as `wasmtime run -S
    /// inherit-network`: bind, listen, accept and connect anywhere,
    /// loopback included. Only `luge run --inherit-network` sets it (an
    /// operator running a module of their own on their own terminal, a
    /// conformance suite's servers among them); no annotation, manifest
    /// key or API can, and engines without `wasi:sockets` ignore it.
    Inherit,
}

/// The parsed `allowed_outbound_hosts` of one function; empty (nothing
/// reachable) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts(Vec<AllowedHost>);

/// One `allowed_outbound_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// As written (templates expanded), for a spec that is stored or shown.
    written: String,
    scheme: SchemePattern,
    host: HostPattern,
    port: PortPattern,
}

/// One `allowed_outbound_hosts` entry on its way to a grant
/// ([`AllowedHosts::parse`]): as written, its `{{ name }}` templates filled
/// in from the function's own variables when it is granted (an annotation,
/// luge.toml, an upload); or checked already where it was read (a Spin
/// manifest's, its templates filled in from the app's variables there), so
/// that it is parsed once and never expanded twice. Either is stored and
/// shown as its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboundEntry {
    /// As written.
    Written(String),
    /// Parsed and checked.
    Checked(AllowedHost),
}

impl OutboundEntry {
    /// Its text: as written, or the checked entry's.
    pub fn text(&self) -> &str {
        match self {
            Self::Written(text) => text,
            Self::Checked(host) => &host.written,
        }
    }
}

impl From<&str> for OutboundEntry {
    fn from(text: &str) -> Self {
        Self::Written(text.to_owned())
    }
}

impl From<String> for OutboundEntry {
    fn from(text: String) -> Self {
        Self::Written(text)
    }
}

impl PartialEq<&str> for OutboundEntry {
    fn eq(&self, other: &&str) -> bool {
        self.text() == *other
    }
}

impl serde::Serialize for OutboundEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.text())
    }
}

/// Read back as written: checked again when granted, against the variables
/// of the spec it is read with.
impl<'de> serde::Deserialize<'de> for OutboundEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::Written)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SchemePattern {
    Any,
    Is(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Any,
    /// `*.example.com`, kept as `.example.com`.
    Below(String),
    Name(String),
    Ip(IpAddr),
    Cidr(IpNet),
    ToSelf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortPattern {
    Any,
    /// `start..end`, end excluded; a single port is `p..p+1`.
    Range(u16, u32),
}

/// A host that cannot be granted, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin:?}: {why}")]
pub struct OriginError {
    /// The entry as written.
    pub origin: String,
    /// Why it was refused.
    pub why: OriginRefusal,
}

/// Why an `allowed_outbound_hosts` entry cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginRefusal {
    /// No `scheme://`.
    #[error(
        "expected <scheme>://<host>[:<port>] ('*' allowed in each; '*://*:*' allows everything)"
    )]
    Shape,
    /// A scheme that is not one word or `*`.
    #[error("scheme {0:?} is not a word of letters or '*'")]
    Scheme(String),
    /// Spin's old `insecure:allow-all`.
    #[error("'insecure:allow-all' is not allowed: use '*://*:*' to allow all outbound traffic")]
    AllowAll,
    /// A path after the authority.
    #[error("a path is not allowed")]
    Path,
    /// User info, an empty host, a misplaced wildcard or other characters.
    #[error("invalid host (a name, an IP address, a CIDR range, '*.domain', '*' or 'self')")]
    Host,
    /// A port that is not a number, `*` or `start..end`.
    #[error("invalid port {0:?} (a number, '*' or 'start..end')")]
    Port(String),
    /// No port, and the scheme has no well-known one.
    #[error("no port, and scheme {0:?} has no well-known port")]
    NoDefaultPort(String),
    /// A `{{ variable }}` that could not be expanded.
    #[error("{0}")]
    Template(TemplateError),
}

/// The well-known port of `scheme`, as Spin knows them.
pub fn well_known_port(scheme: &str) -> Option<u16> {
    Some(match scheme {
        "http" => 80,
        "https" => 443,
        "postgres" => 5432,
        "mysql" => 3306,
        "redis" => 6379,
        "mqtt" => 1883,
        "nats" => 4222,
        "kafka" => 9092,
        _ => return None,
    })
}

/// A host as a request names it: lower case, no trailing dot, an IPv6
/// literal without its brackets.
fn normalise_host(host: &str) -> String {
    let host = host.trim_end_matches('.');
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

impl AllowedHost {
    /// Parses one entry (templates already expanded).
    pub fn parse(entry: &str) -> Result<Self, OriginError> {
        let refused = |why| OriginError {
            origin: entry.to_owned(),
            why,
        };
        let text = entry.trim();
        if text == "insecure:allow-all" {
            return Err(refused(OriginRefusal::AllowAll));
        }
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| refused(OriginRefusal::Shape))?;
        let scheme = if scheme == "*" {
            SchemePattern::Any
        } else if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphabetic()) {
            SchemePattern::Is(scheme.to_ascii_lowercase())
        } else {
            return Err(refused(OriginRefusal::Scheme(scheme.to_owned())));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('@') || rest.contains('?') || rest.contains('#') {
            return Err(refused(OriginRefusal::Host));
        }
        let (host, port) = match rest.split_once('/') {
            // A CIDR range's prefix length, not a path.
            Some((net, after)) => {
                let digits = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                let tail = &after[digits..];
                let bare = net.trim_start_matches('[').trim_end_matches(']');
                if digits == 0
                    || !(tail.is_empty() || tail.starts_with(':'))
                    || bare.parse::<IpAddr>().is_err()
                {
                    return Err(refused(OriginRefusal::Path));
                }
                (
                    &rest[..net.len() + 1 + digits],
                    tail.strip_prefix(':').unwrap_or(""),
                )
            }
            None => split_port(rest),
        };
        let host = parse_host(host).ok_or_else(|| refused(OriginRefusal::Host))?;
        let port = match port {
            "" => {
                let scheme = match &scheme {
                    SchemePattern::Is(s) => s.as_str(),
                    SchemePattern::Any => "*",
                };
                let p = well_known_port(scheme)
                    .ok_or_else(|| refused(OriginRefusal::NoDefaultPort(scheme.to_owned())))?;
                PortPattern::Range(p, u32::from(p) + 1)
            }
            "*" => PortPattern::Any,
            port => {
                parse_port(port).ok_or_else(|| refused(OriginRefusal::Port(port.to_owned())))?
            }
        };
        Ok(Self {
            written: text.to_owned(),
            scheme,
            host,
            port,
        })
    }

    fn allows(&self, scheme: &str, host: &Target, port: u16) -> bool {
        let scheme_ok = match &self.scheme {
            SchemePattern::Any => true,
            SchemePattern::Is(s) => s == scheme,
        };
        let port_ok = match self.port {
            PortPattern::Any => true,
            PortPattern::Range(start, end) => port >= start && u32::from(port) < end,
        };
        let host_ok = match (&self.host, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Below(suffix), Target::Name(name)) => name.ends_with(suffix.as_str()),
            (HostPattern::Name(n), Target::Name(name)) => n == name,
            (HostPattern::Ip(ip), Target::Ip(addr)) => ip == addr,
            (HostPattern::Cidr(net), Target::Ip(addr)) => net.contains(addr),
            _ => false,
        };
        scheme_ok && port_ok && host_ok
    }

    /// Whether this entry names `host` itself (a name or address, not a
    /// wildcard) or a range holding `addr`: such a grant may reach a
    /// non-public address.
    fn names(&self, host: &Target, addr: IpAddr) -> bool {
        match (&self.host, host) {
            (HostPattern::Name(n), Target::Name(name)) => n == name,
            (HostPattern::Ip(ip), _) => *ip == addr,
            (HostPattern::Cidr(net), _) => net.contains(&addr),
            _ => false,
        }
    }
}

/// `host[:port]` split at the port's colon (an IPv6 literal in brackets
/// keeps its own; a bare IPv6 address has no port).
fn split_port(authority: &str) -> (&str, &str) {
    let host_end = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => i + 1,
            None => return (authority, ""),
        }
    } else if authority.matches(':').count() > 1 {
        return (authority, "");
    } else {
        0
    };
    match authority[host_end..].find(':') {
        Some(i) => (&authority[..host_end + i], &authority[host_end + i + 1..]),
        None => (authority, ""),
    }
}

fn parse_host(host: &str) -> Option<HostPattern> {
    let host = host.trim();
    match host {
        "*" => return Some(HostPattern::Any),
        "self" | "self.alt" => return Some(HostPattern::ToSelf),
        "" => return None,
        _ => {}
    }
    if host.contains('/') {
        let bare = host.trim_start_matches('[').replace(']', "");
        return bare
            .parse::<IpNet>()
            .ok()
            .map(|n| HostPattern::Cidr(n.trunc()));
    }
    let name = normalise_host(host);
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(HostPattern::Ip(ip));
    }
    if host.starts_with('[') {
        return None;
    }
    let (below, labels) = match name.strip_prefix("*.") {
        Some(domain) => (true, domain),
        None => (false, name.as_str()),
    };
    let valid = !labels.is_empty()
        && labels.len() <= 253
        && labels.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !valid {
        return None;
    }
    Some(if below {
        HostPattern::Below(format!(".{labels}"))
    } else {
        HostPattern::Name(labels.to_owned())
    })
}

fn parse_port(port: &str) -> Option<PortPattern> {
    let number = |s: &str| s.parse::<u16>().ok().filter(|&p| p > 0);
    match port.split_once("..") {
        Some((start, end)) => {
            let (start, end) = (number(start)?, u32::from(number(end)?));
            (u32::from(start) < end).then_some(PortPattern::Range(start, end))
        }
        None => number(port).map(|p| PortPattern::Range(p, u32::from(p) + 1)),
    }
}

/// A request's host, as the grants compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Name(String),
    Ip(IpAddr),
}

impl Target {
    fn of(host: &str) -> Self {
        let host = normalise_host(host);
        match host.parse::<IpAddr>() {
            Ok(ip) => Self::Ip(ip),
            Err(_) => Self::Name(host),
        }
    }
}

/// Whether `host` (a request's, as written) is a name that some resolver
/// would read as an IPv4 address in another encoding (`127.1`,
/// `2130706433`, `0x7f.1`): such names are never looked up, so no
/// encoding reaches an address its grant does not name.
pub fn numeric_name(host: &str) -> bool {
    let host = normalise_host(host);
    host.parse::<IpAddr>().is_err()
        && host.split('.').next_back().is_some_and(|last| {
            !last.is_empty()
                && (last.bytes().all(|b| b.is_ascii_digit())
                    || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit())))
        })
}

/// The addresses a connection to `addr` reaches, as the kernel takes
/// them: an IPv4-mapped IPv6 address is its IPv4 address, and an
/// unspecified address (`0.0.0.0`, `::`, `::ffff:0.0.0.0`) means this
/// host, so both loopback addresses. Every check of an address a function
/// names (a grant's range, the operator's blocks) looks at each of these:
/// one spelling of this host is never let through where another is
/// refused.
pub fn reached(addr: IpAddr) -> impl Iterator<Item = IpAddr> {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    };
    let (first, second) = if addr.is_unspecified() {
        (
            IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            Some(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
        )
    } else {
        (addr, None)
    };
    std::iter::once(first).chain(second)
}

/// Whether `addr` is globally routable: not loopback, private, shared,
/// link-local, unique-local, unspecified, multicast, broadcast,
/// documentation or reserved (an IPv4-mapped IPv6 address as its IPv4).
pub fn is_public(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || (s[0] == 0x64 && s[1] == 0xff9b)
                || s[..6] == [0; 6])
        }
    }
}

impl AllowedHosts {
    /// Parses `entries`, each written one's `{{ name }}` expanded from
    /// `variables`, each checked one as it is: at most
    /// [`MAX_OUTBOUND_GRANTS`].
    pub fn parse(entries: &[OutboundEntry], variables: &Variables) -> Result<Self, GrantError> {
        const KEY: &str = "http.allowed_outbound_hosts";
        if entries.len() > MAX_OUTBOUND_GRANTS {
            return Err(bad(KEY, format!("at most {MAX_OUTBOUND_GRANTS} entries")));
        }
        let mut hosts = Vec::with_capacity(entries.len());
        for entry in entries {
            let entry = match entry {
                OutboundEntry::Checked(host) => {
                    hosts.push(host.clone());
                    continue;
                }
                OutboundEntry::Written(entry) => entry,
            };
            let expanded = expand(entry, |name| variables.get(name)).map_err(|e| {
                bad(
                    KEY,
                    OriginError {
                        origin: entry.clone(),
                        why: OriginRefusal::Template(e),
                    }
                    .to_string(),
                )
            })?;
            hosts.push(AllowedHost::parse(&expanded).map_err(|e| bad(KEY, e.to_string()))?);
        }
        Ok(Self(hosts))
    }

    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some grant allows `scheme://host:port` (`host` as the
    /// request wrote it; `port` its own or the scheme's well-known one).
    /// Names that read as numbers ([`numeric_name`]) are never allowed.
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        if numeric_name(host) {
            return false;
        }
        let scheme = scheme.to_ascii_lowercase();
        let target = Target::of(host);
        self.0.iter().any(|h| h.allows(&scheme, &target, port))
    }

    /// Whether a connection for `scheme://host:port` may go to `addr`,
    /// one of the addresses `host` resolved to: a public address through
    /// any grant that allows the request; any other only through a grant
    /// that names `host` or `addr` itself, or a range holding `addr`.
    pub fn permits_address(&self, scheme: &str, host: &str, port: u16, addr: IpAddr) -> bool {
        if numeric_name(host) {
            return false;
        }
        let scheme = scheme.to_ascii_lowercase();
        let target = Target::of(host);
        if let Target::Ip(ip) = target
            && ip != addr
        {
            return false;
        }
        self.0.iter().any(|h| {
            h.allows(&scheme, &target, port) && (is_public(addr) || h.names(&target, addr))
        })
    }

    /// The servers granted for `scheme` by name, as (host, port): each
    /// entry whose scheme is `scheme` itself and whose host is one name
    /// or address on one port (`nats://broker.local:4222`). Wildcards,
    /// ranges and a `*` scheme name no server. For an interface that
    /// names no address (wasmCloud's messaging `consumer`), the one server
    /// its grant names is where it goes.
    pub fn named_servers(&self, scheme: &str) -> Vec<(String, u16)> {
        self.0
            .iter()
            .filter(|h| matches!(&h.scheme, SchemePattern::Is(s) if s == scheme))
            .filter_map(|h| {
                let host = match &h.host {
                    HostPattern::Name(name) => name.clone(),
                    HostPattern::Ip(ip) => ip.to_string(),
                    _ => return None,
                };
                match h.port {
                    PortPattern::Range(start, end) if u32::from(start) + 1 == end => {
                        Some((host, start))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Whether some entry's scheme is `scheme` or `*`: the sandbox gets
    /// that kind of socket at all (each use still checked).
    pub fn grants_scheme(&self, scheme: &str) -> bool {
        self.0.iter().any(|h| match &h.scheme {
            SchemePattern::Any => true,
            SchemePattern::Is(s) => s == scheme,
        })
    }

    /// Whether a relative URL (no authority: this host's own routes) is
    /// granted, by a `self` entry whose scheme allows `http`.
    pub fn allows_self(&self) -> bool {
        self.0.iter().any(|h| {
            h.host == HostPattern::ToSelf
                && match &h.scheme {
                    SchemePattern::Any => true,
                    SchemePattern::Is(s) => s == "http" || s == "https",
                }
        })
    }

    /// Whether chaining to function `name` is granted: its internal host
    /// (`http://NAME.spin.internal` or `NAME.luge.internal`) named
    /// exactly; no wildcard grants it.
    pub fn chains_to(&self, name: &str) -> bool {
        CHAINING_DOMAINS.iter().any(|domain| {
            let target = Target::Name(format!("{}{domain}", name.to_ascii_lowercase()));
            self.0
                .iter()
                .any(|h| matches!(&h.host, HostPattern::Name(_)) && h.allows("http", &target, 80))
        })
    }
}

/// The function an outgoing request to `host` (its authority's host, any
/// case) chains to, if `host` is in a [`CHAINING_DOMAINS`] domain: the
/// single label before it. Nothing else is looked at (never a Host header,
/// which a guest could set to anything: Spin's CVE-2024-32980).
pub fn chained_function(host: &str) -> Option<String> {
    let host = normalise_host(host);
    CHAINING_DOMAINS.iter().find_map(|domain| {
        let name = host.strip_suffix(domain)?;
        (!name.is_empty() && !name.contains('.')).then(|| name.to_owned())
    })
}

/// This slice's annotation key: `http.allowed_outbound_hosts`, a list of
/// strings (parsed at grant time, when the variables are known). Whether
/// `key` was this slice's.
pub(super) fn annotate(
    out: &mut Vec<OutboundEntry>,
    key: &str,
    value: &Value,
) -> Result<bool, GrantError> {
    if key != "http.allowed_outbound_hosts" {
        return Ok(false);
    }
    let list = value
        .as_array()
        .ok_or_else(|| bad(key, "expected a list"))?;
    for origin in list {
        let origin = origin
            .as_str()
            .ok_or_else(|| bad(key, "expected strings"))?;
        out.push(OutboundEntry::from(origin));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {

    #[test]
    fn every_spelling_of_this_host_reaches_its_loopback() {
        let reached = |addr: &str| super::reached(addr.parse().unwrap()).collect::<Vec<_>>();
        let both: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        for unspecified in ["0.0.0.0", "::", "::ffff:0.0.0.0"] {
            assert_eq!(reached(unspecified), both, "{unspecified}");
        }
        assert_eq!(
            reached("::ffff:10.1.2.3"),
            ["10.1.2.3".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            reached("93.184.216.34"),
            ["93.184.216.34".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(reached("::1"), ["::1".parse::<IpAddr>().unwrap()]);
    }

    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn hosts(entries: &[&str]) -> AllowedHosts {
        let entries: Vec<OutboundEntry> = entries.iter().map(|s| (*s).into()).collect();
        AllowedHosts::parse(&entries, &Variables::default()).unwrap()
    }

    #[test]
    fn named_servers_are_exact_grants_of_their_scheme_only() {
        let granted = hosts(&[
            "nats://Broker.Local",
            "nats://127.0.0.1:4223",
            "nats://*.example.com",
            "nats://10.0.0.0/8:4222",
            "nats://host:4000..4002",
            "nats://any:*",
            "*://other:4222",
            "mqtt://mq:1883",
        ]);
        assert_eq!(
            granted.named_servers("nats"),
            [
                ("broker.local".to_owned(), 4222),
                ("127.0.0.1".to_owned(), 4223)
            ]
        );
        assert_eq!(granted.named_servers("mqtt"), [("mq".to_owned(), 1883)]);
        assert!(granted.named_servers("kafka").is_empty());
    }

    #[test]
    fn spins_grammar_parses_and_refuses_by_reason() {
        for ok in [
            "http://example.com",
            "https://Example.COM.:8443",
            "https://*.example.com",
            "*://*:*",
            "postgres://db.internal",
            "mysql://127.0.0.1:3306",
            "redis://[::1]:6379",
            "mqtt://broker:1883",
            "tcp://10.0.0.0/8:5000..6000",
            "udp://192.168.0.1:53",
            "http://self",
            "http://self.alt",
            "https://example.com:*",
            "http://example.com/",
            "tcp://[fd00::]/8:*",
        ] {
            AllowedHost::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let why = |entry: &str| AllowedHost::parse(entry).unwrap_err().why;
        assert_eq!(why("example.com"), OriginRefusal::Shape);
        assert_eq!(why("insecure:allow-all"), OriginRefusal::AllowAll);
        assert_eq!(why("ht-tp://x"), OriginRefusal::Scheme("ht-tp".into()));
        assert_eq!(why("http://example.com/path"), OriginRefusal::Path);
        assert_eq!(why("http://user@example.com"), OriginRefusal::Host);
        assert_eq!(why("http://ex*ample.com"), OriginRefusal::Host);
        assert_eq!(why("http://*.*.com"), OriginRefusal::Host);
        assert_eq!(why("http://"), OriginRefusal::Host);
        assert_eq!(why("http://x:0"), OriginRefusal::Port("0".into()));
        assert_eq!(why("http://x:99999"), OriginRefusal::Port("99999".into()));
        assert_eq!(why("http://x:9..9"), OriginRefusal::Port("9..9".into()));
        assert_eq!(why("tcp://x"), OriginRefusal::NoDefaultPort("tcp".into()));
        assert_eq!(why("*://x"), OriginRefusal::NoDefaultPort("*".into()));
    }

    #[test]
    fn requests_match_scheme_host_and_port() {
        let h = hosts(&[
            "https://*.example.com",
            "http://api.test:8000..8002",
            "redis://cache",
            "tcp://10.0.0.0/8:*",
        ]);
        assert!(h.allows("https", "a.example.com", 443));
        assert!(h.allows("HTTPS", "A.b.Example.com.", 443));
        assert!(!h.allows("https", "example.com", 443), "the domain itself");
        assert!(!h.allows("https", "evilexample.com", 443));
        assert!(!h.allows("http", "a.example.com", 80), "another scheme");
        assert!(!h.allows("https", "a.example.com", 8443), "another port");
        assert!(h.allows("http", "api.test", 8001));
        assert!(
            !h.allows("http", "api.test", 8002),
            "a range's end is excluded"
        );
        assert!(h.allows("redis", "cache", 6379));
        assert!(h.allows("tcp", "10.1.2.3", 22));
        assert!(!h.allows("tcp", "11.1.2.3", 22));
        // Other encodings of an address are names, and refused.
        let ip = hosts(&["http://127.0.0.1:8080", "http://*:9000"]);
        assert!(ip.allows("http", "127.0.0.1", 8080));
        for encoded in ["127.1", "2130706433", "0x7f.0.0.1", "127.0.0.01"] {
            assert!(!ip.allows("http", encoded, 8080), "{encoded}");
            assert!(!ip.allows("http", encoded, 9000), "{encoded}");
        }
    }

    #[test]
    fn non_public_addresses_need_a_grant_that_names_them() {
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let public = IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34));
        let any = hosts(&["https://*:*"]);
        assert!(any.permits_address("https", "example.com", 443, public));
        assert!(!any.permits_address("https", "example.com", 443, loopback));
        assert!(!any.permits_address("https", "127.0.0.1", 443, loopback));
        let below = hosts(&["https://*.example.com"]);
        assert!(!below.permits_address("https", "a.example.com", 443, loopback));
        let metadata = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
        assert!(!any.permits_address("https", "metadata", 443, metadata));
        let named = hosts(&[
            "https://localhost:8443",
            "http://[::1]:80",
            "tcp://127.0.0.0/8:*",
        ]);
        assert!(named.permits_address("https", "localhost", 8443, loopback));
        assert!(named.permits_address("http", "[::1]", 80, IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(named.permits_address("tcp", "127.0.0.1", 5, loopback));
        // A range holds addresses as written, as on Spin: not names.
        assert!(!named.permits_address("tcp", "db.test", 5, loopback));
        // An IP literal connects to itself only.
        assert!(!named.permits_address("http", "[::1]", 80, loopback));
        for addr in [
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(addr.parse().unwrap()), "{addr}");
        }
        for addr in ["1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(addr.parse().unwrap()), "{addr}");
        }
    }

    /// An entry checked where it was read is granted as it is, beside
    /// written ones expanded from the function's variables; either is
    /// stored as its text.
    #[test]
    fn checked_entries_are_granted_as_they_are() {
        let vars = Variables(vec![("b".into(), "b.test".into())]);
        let checked = OutboundEntry::Checked(AllowedHost::parse("https://a.test").unwrap());
        let entries = [checked.clone(), "http://{{ b }}".into()];
        let h = AllowedHosts::parse(&entries, &vars).unwrap();
        assert!(h.allows("https", "a.test", 443));
        assert!(h.allows("http", "b.test", 80));
        assert!(!h.allows("http", "a.test", 80));
        assert_eq!(
            serde_json::to_value(&entries).unwrap(),
            serde_json::json!(["https://a.test", "http://{{ b }}"])
        );
    }

    #[test]
    fn templates_expand_from_the_functions_variables() {
        let vars = Variables(vec![("db".into(), "db.test:5433".into())]);
        let h = AllowedHosts::parse(&["postgres://{{ db }}".into()], &vars).unwrap();
        assert!(h.allows("postgres", "db.test", 5433));
        let err = AllowedHosts::parse(&["postgres://{{ nope }}".into()], &vars).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let many: Vec<OutboundEntry> = (0..=MAX_OUTBOUND_GRANTS)
            .map(|i| format!("http://h{i}").into())
            .collect();
        assert!(AllowedHosts::parse(&many, &vars).is_err());
    }

    #[test]
    fn chaining_needs_the_internal_host_named_exactly() {
        let h = hosts(&[
            "http://b.spin.internal",
            "http://*.luge.internal",
            "*://*:*",
        ]);
        assert!(h.chains_to("b"));
        assert!(!h.chains_to("c"), "no wildcard grants chaining");
        assert_eq!(chained_function("B.Spin.Internal."), Some("b".into()));
        assert_eq!(chained_function("a.b.luge.internal"), None);
        assert!(hosts(&["http://self"]).allows_self());
        assert!(hosts(&["tcp://10.0.0.1:5"]).grants_scheme("tcp"));
        assert!(!hosts(&["tcp://10.0.0.1:5"]).grants_scheme("udp"));
        assert!(hosts(&["*://*:*"]).grants_scheme("udp"));
        assert!(!hosts(&["redis://self:1"]).allows_self());
    }
}
