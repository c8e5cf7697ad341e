//! The executor's own HTTP API, routed with `matchit`: which endpoint a
//! path names, and so which paths a function route may not take (a route
//! that would shadow an endpoint is refused where it is declared, naming
//! both; see [`Api::shadowed_by`]).

use hyper::Method;

/// One endpoint of the executor's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `GET /healthz`.
    Health,
    /// `GET /livez`: Kubernetes' liveness probe.
    Live,
    /// `GET /readyz`: Kubernetes' readiness probe.
    Ready,
    /// `GET /metrics`.
    Metrics,
    /// `luge proxy`: `POST /init`.
    ProxyInit,
    /// `luge proxy`: `POST /run`.
    ProxyRun,
    /// `luge serve`: `GET /v1/functions`.
    Functions,
    /// `luge serve`: `GET|PUT|DELETE /v1/functions/{name}`.
    Function,
    /// `luge serve`: `GET|DELETE /containers?prefix=P`.
    Containers,
    /// `luge serve`: `POST /{id}/init`.
    ContainerInit,
    /// `luge serve`: `POST /{id}/run`.
    ContainerRun,
    /// `luge serve`: `POST /{id}/destroy`.
    ContainerDestroy,
    /// `luge serve`: `GET /{id}/logs`.
    ContainerLogs,
}

impl Endpoint {
    /// The pattern it is routed by, as the API documents it.
    pub(crate) fn pattern(self) -> &'static str {
        match self {
            Self::Health => "/healthz",
            Self::Live => "/livez",
            Self::Ready => "/readyz",
            Self::Metrics => "/metrics",
            Self::ProxyInit => "/init",
            Self::ProxyRun => "/run",
            Self::Functions => "/v1/functions",
            Self::Function => "/v1/functions/{name}",
            Self::Containers => "/containers",
            Self::ContainerInit => "/{id}/init",
            Self::ContainerRun => "/{id}/run",
            Self::ContainerDestroy => "/{id}/destroy",
            Self::ContainerLogs => "/{id}/logs",
        }
    }

    /// Whether it answers `method`.
    pub(crate) fn allows(self, method: &Method) -> bool {
        match self {
            Self::Health
            | Self::Live
            | Self::Ready
            | Self::Metrics
            | Self::Functions
            | Self::ContainerLogs => method == Method::GET,
            Self::ProxyInit
            | Self::ProxyRun
            | Self::ContainerInit
            | Self::ContainerRun
            | Self::ContainerDestroy => method == Method::POST,
            Self::Containers => method == Method::GET || method == Method::DELETE,
            Self::Function => {
                method == Method::GET || method == Method::PUT || method == Method::DELETE
            }
        }
    }
}

/// The endpoints one mode serves, routed.
pub(crate) struct Api {
    router: matchit::Router<Endpoint>,
}

impl Api {
    /// `luge proxy`'s API.
    pub(crate) fn proxy() -> Self {
        Self::of(&[
            Endpoint::Health,
            Endpoint::Live,
            Endpoint::Ready,
            Endpoint::Metrics,
            Endpoint::ProxyInit,
            Endpoint::ProxyRun,
        ])
    }

    /// `luge serve`'s API.
    pub(crate) fn serve() -> Self {
        Self::of(&[
            Endpoint::Health,
            Endpoint::Live,
            Endpoint::Ready,
            Endpoint::Metrics,
            Endpoint::Functions,
            Endpoint::Function,
            Endpoint::Containers,
            Endpoint::ContainerInit,
            Endpoint::ContainerRun,
            Endpoint::ContainerDestroy,
            Endpoint::ContainerLogs,
        ])
    }

    fn of(endpoints: &[Endpoint]) -> Self {
        let mut router = matchit::Router::new();
        for &endpoint in endpoints {
            // The patterns above are distinct and well formed: a conflict
            // is a bug in this table, caught by its tests.
            if let Err(e) = router.insert(endpoint.pattern(), endpoint) {
                tracing::error!(pattern = endpoint.pattern(), error = %e, "API route not inserted");
            }
        }
        Self { router }
    }

    /// The endpoint at `path`, with its parameter (`id` or `name`) if it
    /// has one.
    pub(crate) fn at<'p>(&self, path: &'p str) -> Option<(Endpoint, Option<&'p str>)> {
        let found = self.router.at(path).ok()?;
        let param = found.params.get("id").or_else(|| found.params.get("name"));
        Some((*found.value, param))
    }

    /// The endpoint a function route at `path` would shadow, in words; a
    /// route there is refused.
    pub(crate) fn shadowed_by(&self, path: &str) -> Option<String> {
        self.at(path)
            .map(|(endpoint, _)| format!("the executor's endpoint {}", endpoint.pattern()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_routed() {
        let serve = Api::serve();
        assert_eq!(serve.at("/healthz"), Some((Endpoint::Health, None)));
        assert_eq!(
            serve.at("/c1/run"),
            Some((Endpoint::ContainerRun, Some("c1")))
        );
        assert_eq!(
            serve.at("/v1/functions/fib"),
            Some((Endpoint::Function, Some("fib")))
        );
        assert_eq!(serve.at("/v1/functions"), Some((Endpoint::Functions, None)));
        assert_eq!(serve.at("/containers"), Some((Endpoint::Containers, None)));
        assert_eq!(serve.at("/fib"), None);
        assert_eq!(serve.at("/a/b/run"), None);
        assert_eq!(serve.at("/init"), None);
        let proxy = Api::proxy();
        assert_eq!(proxy.at("/init"), Some((Endpoint::ProxyInit, None)));
        assert_eq!(proxy.at("/c1/run"), None);
    }

    #[test]
    fn routes_that_would_shadow_an_endpoint_are_named() {
        let serve = Api::serve();
        assert_eq!(
            serve.shadowed_by("/x/run").as_deref(),
            Some("the executor's endpoint /{id}/run")
        );
        assert!(serve.shadowed_by("/fn/logs").is_some());
        assert!(serve.shadowed_by("/echo").is_none());
        assert!(serve.shadowed_by("/api/v2/run/now").is_none());
    }
}
