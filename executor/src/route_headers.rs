//! The headers Spin's HTTP trigger gives a handler about the route its
//! request took, set alike for requests from clients and chained ones.

use hyper::header::{self, HeaderName};
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

/// Sets the route headers (see [`SPIN_PATH_INFO`] and the others).
pub(crate) fn set<B>(request: &mut hyper::Request<B>, matched: &RouteMatch) {
    let authority = request
        .uri()
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let path_and_query = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_owned(), |p| p.to_string());
    let full_url = format!("http://{authority}{path_and_query}");
    let headers = request.headers_mut();
    for (name, value) in [
        (SPIN_FULL_URL, full_url.as_str()),
        (SPIN_MATCHED_ROUTE, matched.route.as_str()),
        (SPIN_RAW_COMPONENT_ROUTE, matched.route.as_str()),
        (SPIN_COMPONENT_ROUTE, matched.base.as_str()),
        (SPIN_PATH_INFO, matched.path_info.as_str()),
        (SPIN_BASE_PATH, "/"),
    ] {
        // Every value comes from the request line or a checked route; an
        // insert replaces whatever values the client sent under the name,
        // and a value that cannot be a header leaves none of them.
        match header::HeaderValue::from_str(value) {
            Ok(value) => {
                headers.insert(name, value);
            }
            Err(_) => {
                headers.remove(name);
            }
        }
    }
}
