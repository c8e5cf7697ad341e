//! The headers Spin's HTTP trigger gives a handler about the route its
//! request took, set alike for requests from clients and chained ones.

use bytes::Bytes;
use hyper::header::{self, HeaderName, HeaderValue};
use luge_host::RouteMatch;

/// The headers Spin's HTTP trigger gives a handler about its route, set
/// by Luge alike (a client's own values for them are dropped): the full
/// URL, the route as declared (`/api/...`), the route's base (`/api`),
/// the path after it, and the app's base path (always `/`). Names made
/// once: a name given as a string is parsed at every use.
const SPIN_FULL_URL: HeaderName = HeaderName::from_static("spin-full-url");
const SPIN_MATCHED_ROUTE: HeaderName = HeaderName::from_static("spin-matched-route");
const SPIN_RAW_COMPONENT_ROUTE: HeaderName = HeaderName::from_static("spin-raw-component-route");
const SPIN_COMPONENT_ROUTE: HeaderName = HeaderName::from_static("spin-component-route");
const SPIN_PATH_INFO: HeaderName = HeaderName::from_static("spin-path-info");
const SPIN_BASE_PATH: HeaderName = HeaderName::from_static("spin-base-path");

/// The app's base path: Luge serves every app at the root.
const BASE_PATH: HeaderValue = HeaderValue::from_static("/");

/// Sets the route headers (see [`SPIN_PATH_INFO`] and the others).
pub(crate) fn set<B>(request: &mut hyper::Request<B>, matched: &RouteMatch) {
    set_for(request, &matched.route, &matched.base, &matched.path_info);
}

/// [`set`] for a request that took `route`, based at `base`, with
/// `path_info` after it.
fn set_for<B>(request: &mut hyper::Request<B>, route: &str, base: &str, path_info: &str) {
    let full_url = full_url(request);
    // An exact route is its own base: the same value, shared.
    let (route, base) = match value(route) {
        Some(shared) if base == route => (Some(shared.clone()), Some(shared)),
        route => (route, value(base)),
    };
    let headers = request.headers_mut();
    // Room for all six at once: the map a request is parsed into has
    // room for the client's headers only, and would grow here twice.
    headers.reserve(6);
    for (name, value) in [
        (SPIN_FULL_URL, full_url),
        (SPIN_MATCHED_ROUTE, route.clone()),
        (SPIN_RAW_COMPONENT_ROUTE, route),
        (SPIN_COMPONENT_ROUTE, base),
        (SPIN_PATH_INFO, value(path_info)),
        (SPIN_BASE_PATH, Some(BASE_PATH)),
    ] {
        // Every value comes from the request line or a checked route; an
        // insert replaces whatever values the client sent under the name,
        // and a value that cannot be a header leaves none of them.
        match value {
            Some(value) => {
                headers.insert(name, value);
            }
            None => {
                headers.remove(name);
            }
        }
    }
}

/// `text` as a header value, if it can be one.
fn value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

/// `http://` and the request's authority (from its URI, or else its
/// `Host`) and path with query, built in one buffer.
fn full_url<B>(request: &hyper::Request<B>) -> Option<HeaderValue> {
    let uri = request.uri();
    let authority = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or_default();
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path(), |p| p.as_str());
    const SCHEME: &[u8] = b"http://";
    let mut url = Vec::with_capacity(SCHEME.len() + authority.len() + path_and_query.len());
    url.extend_from_slice(SCHEME);
    url.extend_from_slice(authority.as_bytes());
    url.extend_from_slice(path_and_query.as_bytes());
    HeaderValue::from_maybe_shared(Bytes::from(url)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The six route headers' values, in the order `set` lists them, each
    /// as every value the request has under the name.
    fn six<B>(request: &hyper::Request<B>) -> [Vec<&str>; 6] {
        [
            SPIN_FULL_URL,
            SPIN_MATCHED_ROUTE,
            SPIN_RAW_COMPONENT_ROUTE,
            SPIN_COMPONENT_ROUTE,
            SPIN_PATH_INFO,
            SPIN_BASE_PATH,
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

    #[test]
    fn a_prefix_route_sets_all_six_and_replaces_the_clients_values() {
        let mut request = hyper::Request::get("/h/a/b?q=1")
            .header("host", "example.test:8080")
            .header("spin-path-info", "/forged")
            .header("spin-path-info", "/forged-again")
            .header("spin-base-path", "/elsewhere")
            .body(())
            .unwrap();
        set_for(&mut request, "/h/...", "/h", "/a/b");
        assert_eq!(
            six(&request),
            [
                vec!["http://example.test:8080/h/a/b?q=1"],
                vec!["/h/..."],
                vec!["/h/..."],
                vec!["/h"],
                vec!["/a/b"],
                vec!["/"],
            ]
        );
        assert_eq!(request.headers()["host"], "example.test:8080");
    }

    #[test]
    fn an_exact_route_is_its_own_base_and_the_uris_authority_comes_first() {
        let mut request = hyper::Request::get("http://from-uri.test/hello")
            .header("host", "from-host.test")
            .body(())
            .unwrap();
        set_for(&mut request, "/hello", "/hello", "");
        assert_eq!(
            six(&request),
            [
                vec!["http://from-uri.test/hello"],
                vec!["/hello"],
                vec!["/hello"],
                vec!["/hello"],
                vec![""],
                vec!["/"],
            ]
        );
    }

    #[test]
    fn a_value_that_cannot_be_a_header_leaves_none() {
        let mut request = hyper::Request::get("/p")
            .header("spin-path-info", "/forged")
            .body(())
            .unwrap();
        set_for(&mut request, "/p/...", "/p", "/bad\nline");
        let [.., component_route, path_info, _] = six(&request);
        assert!(path_info.is_empty());
        assert_eq!(component_route, ["/p"]);
    }
}
