//! The headers Spin's HTTP trigger gives a handler about the route its
//! request took, set alike for requests from clients and chained ones.

use std::net::SocketAddr;

use bytes::Bytes;
use hyper::header::{self, HeaderName, HeaderValue};
use luge_host::RouteMatch;

/// The headers Spin's HTTP trigger gives a handler about its route, each
/// computed as Spin's `compute_default_headers` does and set by Luge alike
/// (a client's own values for them are replaced): the full URL, the route
/// with the app's base, the route as the manifest wrote it and without its
/// `/...`, the path the wildcard took, the app's base path (always `/`, as
/// Spin keeps it for backward compatibility), the client's address, and
/// one `spin-path-match-NAME` per `:name` segment. Names made once: a name
/// given as a string is parsed at every use.
const SPIN_FULL_URL: HeaderName = HeaderName::from_static("spin-full-url");
const SPIN_MATCHED_ROUTE: HeaderName = HeaderName::from_static("spin-matched-route");
const SPIN_RAW_COMPONENT_ROUTE: HeaderName = HeaderName::from_static("spin-raw-component-route");
const SPIN_COMPONENT_ROUTE: HeaderName = HeaderName::from_static("spin-component-route");
const SPIN_PATH_INFO: HeaderName = HeaderName::from_static("spin-path-info");
const SPIN_BASE_PATH: HeaderName = HeaderName::from_static("spin-base-path");
const SPIN_CLIENT_ADDR: HeaderName = HeaderName::from_static("spin-client-addr");

/// The prefix of a `:name` segment's header.
const PATH_MATCH: &str = "spin-path-match-";

/// The app's base path: Spin always says `/`.
const BASE_PATH: HeaderValue = HeaderValue::from_static("/");

/// Where a client's request came from, as the connection that read it
/// knows (a request extension).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) SocketAddr);

/// What the route headers say of a match (a [`RouteMatch`]'s strings).
struct Parts<'a> {
    matched_route: &'a str,
    raw_route: &'a str,
    component_route: &'a str,
    path_info: &'a str,
    captures: &'a [(Box<str>, String)],
}

/// Sets the route headers (see [`SPIN_PATH_INFO`] and the others).
pub(crate) fn set<B>(request: &mut hyper::Request<B>, matched: &RouteMatch) {
    let parts = Parts {
        matched_route: &matched.matched_route,
        raw_route: &matched.raw_route,
        component_route: &matched.component_route,
        path_info: &matched.path_info,
        captures: &matched.captures,
    };
    set_parts(request, &parts);
}

/// [`set`] for `matched`'s strings, captures included.
fn set_parts<B>(request: &mut hyper::Request<B>, matched: &Parts<'_>) {
    let full_url = full_url(request);
    let client = request
        .extensions()
        .get::<ClientAddr>()
        .and_then(|ClientAddr(addr)| value(&addr.to_string()));
    // A route without a base of its own: the same value, shared.
    let raw = value(matched.raw_route);
    let matched_route = if matched.matched_route == matched.raw_route {
        raw.clone()
    } else {
        value(matched.matched_route)
    };
    let component = if matched.component_route == matched.raw_route {
        raw.clone()
    } else {
        value(matched.component_route)
    };
    let headers = request.headers_mut();
    // Room for all at once: the map a request is parsed into has room
    // for the client's headers only, and would grow here twice.
    headers.reserve(7 + matched.captures.len());
    for (name, value) in [
        (SPIN_FULL_URL, full_url),
        (SPIN_MATCHED_ROUTE, matched_route),
        (SPIN_RAW_COMPONENT_ROUTE, raw),
        (SPIN_COMPONENT_ROUTE, component),
        (SPIN_PATH_INFO, value(matched.path_info)),
        (SPIN_BASE_PATH, Some(BASE_PATH)),
        (SPIN_CLIENT_ADDR, client),
    ] {
        put(headers, name, value);
    }
    set_captures(headers, matched.captures);
}

/// One `spin-path-match-NAME` per `:name` segment.
fn set_captures(headers: &mut hyper::HeaderMap, captures: &[(Box<str>, String)]) {
    for (param, captured) in captures {
        // As Spin: the name upper-cased, `_` for `-`, then lower-cased
        // as every header name is.
        let name = format!("{PATH_MATCH}{}", param.replace('_', "-")).to_ascii_lowercase();
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            put(headers, name, value(captured));
        }
    }
}

/// Replaces whatever values the client sent under `name` with `value`;
/// a value that cannot be a header leaves none of them. Every value comes
/// from the request line, the connection or a checked route.
fn put(headers: &mut hyper::HeaderMap, name: HeaderName, value: Option<HeaderValue>) {
    match value {
        Some(value) => {
            headers.insert(name, value);
        }
        None => {
            headers.remove(name);
        }
    }
}

/// `text` as a header value, if it can be one.
fn value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

/// As Spin: `http://`, the request's `Host` (`localhost` without one),
/// and its path with query, built in one buffer.
fn full_url<B>(request: &hyper::Request<B>) -> Option<HeaderValue> {
    let uri = request.uri();
    let host = request
        .headers()
        .get(header::HOST)
        .map_or(&b"localhost"[..], HeaderValue::as_bytes);
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path(), |p| p.as_str());
    let scheme = uri.scheme_str().unwrap_or("http");
    let mut url = Vec::with_capacity(scheme.len() + 3 + host.len() + path_and_query.len());
    url.extend_from_slice(scheme.as_bytes());
    url.extend_from_slice(b"://");
    url.extend_from_slice(host);
    url.extend_from_slice(path_and_query.as_bytes());
    HeaderValue::from_maybe_shared(Bytes::from(url)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seven route headers' values, in the order `set` lists them,
    /// each as every value the request has under the name.
    fn seven<B>(request: &hyper::Request<B>) -> [Vec<&str>; 7] {
        [
            SPIN_FULL_URL,
            SPIN_MATCHED_ROUTE,
            SPIN_RAW_COMPONENT_ROUTE,
            SPIN_COMPONENT_ROUTE,
            SPIN_PATH_INFO,
            SPIN_BASE_PATH,
            SPIN_CLIENT_ADDR,
        ]
        .map(|name| {
            request
                .headers()
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect()
        })
    }

    /// A match of `route` (as a manifest wrote it, under `base`).
    fn matched(
        base: &str,
        raw: &str,
        path_info: &str,
        captures: &[(&str, &str)],
    ) -> Parts<'static> {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let based = if base == "/" {
            raw.to_owned()
        } else {
            format!("{base}{raw}")
        };
        Parts {
            matched_route: leak(based.strip_suffix('/').unwrap_or(&based).to_owned()),
            raw_route: leak(raw.to_owned()),
            component_route: leak(raw.strip_suffix("/...").unwrap_or(raw).to_owned()),
            path_info: leak(path_info.to_owned()),
            captures: Box::leak(
                captures
                    .iter()
                    .map(|(n, v)| (Box::from(*n), (*v).to_owned()))
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            ),
        }
    }

    /// The conformance suite's `request-shape`, header for header.
    #[test]
    fn the_request_shape_of_spins_suite() {
        let mut request = hyper::Request::get("/base/path/end/rest?key=value")
            .header("host", "example.com")
            .header("spin-path-info", "/forged")
            .header("spin-path-info", "/forged-again")
            .header("spin-base-path", "/elsewhere")
            .body(())
            .unwrap();
        request
            .extensions_mut()
            .insert(ClientAddr("127.0.0.1:8777".parse().unwrap()));
        let route = "/base/:path_segment/:path_end/...";
        set_parts(
            &mut request,
            &matched(
                "/",
                route,
                "/rest",
                &[("path_segment", "path"), ("path_end", "end")],
            ),
        );
        assert_eq!(
            seven(&request),
            [
                vec!["http://example.com/base/path/end/rest?key=value"],
                vec![route],
                vec![route],
                vec!["/base/:path_segment/:path_end"],
                vec!["/rest"],
                vec!["/"],
                vec!["127.0.0.1:8777"],
            ]
        );
        assert_eq!(request.headers()["spin-path-match-path-segment"], "path");
        assert_eq!(request.headers()["spin-path-match-path-end"], "end");
        assert_eq!(request.headers()["host"], "example.com");
    }

    #[test]
    fn the_host_header_names_the_url_and_the_root_matches_empty() {
        let mut request = hyper::Request::get("http://from-uri.test/")
            .header("host", "from-host.test")
            .body(())
            .unwrap();
        set_parts(&mut request, &matched("/", "/", "", &[]));
        let [url, matched_route, raw, component, info, base, client] = seven(&request);
        assert_eq!(url, ["http://from-host.test/"]);
        assert_eq!(matched_route, [""]);
        assert_eq!((raw, component), (vec!["/"], vec!["/"]));
        assert_eq!((info, base), (vec![""], vec!["/"]));
        assert!(client.is_empty());
        // No Host: Spin says localhost.
        let mut request = hyper::Request::get("/x").body(()).unwrap();
        set_parts(&mut request, &matched("/api", "/x", "", &[]));
        let [url, matched_route, raw, ..] = seven(&request);
        assert_eq!(url, ["http://localhost/x"]);
        assert_eq!((matched_route, raw), (vec!["/api/x"], vec!["/x"]));
    }

    #[test]
    fn a_value_that_cannot_be_a_header_leaves_none() {
        let mut request = hyper::Request::get("/p")
            .header("spin-path-info", "/forged")
            .body(())
            .unwrap();
        set_parts(&mut request, &matched("/", "/p/...", "/bad\nline", &[]));
        let [.., component_route, path_info, _, _] = seven(&request);
        assert!(path_info.is_empty());
        assert_eq!(component_route, ["/p"]);
    }
}
