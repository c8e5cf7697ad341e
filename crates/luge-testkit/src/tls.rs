//! HTTPS peers for the outbound tests and benchmarks: a private CA made
//! on the spot, certificates it signs (servers, clients, expired ones),
//! and servers on 127.0.0.1 (hyper, over rustls or plain), HTTP/2 or
//! HTTP/1.1 as ALPN chooses. Test support: every failure panics.

use std::net::TcpListener;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;

/// A private certificate authority, made for one test or run.
pub struct PrivateCa {
    /// Its certificate, PEM: what a client trusts (`--ca-file`).
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Default for PrivateCa {
    fn default() -> Self {
        Self::new()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl PrivateCa {
    /// A new CA with a fresh key.
    pub fn new() -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Luge test CA");
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `name` this CA signed (valid in 2020 only when
    /// `expired`), with its key.
    fn signed(&self, name: &str, expired: bool) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec![name.to_owned()]).expect("params");
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        (cert, key)
    }

    /// A client certificate for `name` and its key, PEM (mTLS).
    pub fn client(&self, name: &str) -> (String, String) {
        let (cert, key) = self.signed(name, false);
        (cert.pem(), key.serialize_pem())
    }

    /// A server certificate for `name` and its key, PEM (for servers that
    /// read files: PostgreSQL's `ssl_cert_file` and `ssl_key_file`).
    pub fn server_pem(&self, name: &str) -> (String, String) {
        let (cert, key) = self.signed(name, false);
        (cert.pem(), key.serialize_pem())
    }

    /// A server config for `name` (expired or not) offering `alpn`,
    /// requiring a client certificate this CA signed when `mutual`.
    pub fn server(
        &self,
        name: &str,
        expired: bool,
        mutual: bool,
        alpn: &[&[u8]],
    ) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.signed(name, expired);
        let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = if mutual {
            let mut roots = rustls::RootCertStore::empty();
            for ca in rustls::pki_types::CertificateDer::pem_slice_iter(self.pem.as_bytes()) {
                roots.add(ca.expect("CA PEM")).expect("CA root");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder
            .with_single_cert(vec![cert.der().clone()], key)
            .expect("server certificate");
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

/// What a server answers: the body, given the request's HTTP version.
pub type Answer = fn(http::Version) -> String;

/// A server on 127.0.0.1, over TLS with `tls` or plain, answering every
/// request with `answer`; it runs until the process ends. Its port.
pub fn serve(tls: Option<Arc<rustls::ServerConfig>>, answer: Answer) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                tokio::spawn(connection(tcp, tls.clone(), answer));
            }
        });
    });
    port
}

async fn connection(
    tcp: tokio::net::TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: Answer,
) {
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let body = answer(request.version());
        async move {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                bytes::Bytes::from(body),
            )))
        }
    });
    let Some(config) = tls else {
        let io = hyper_util::rt::TokioIo::new(tcp);
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await;
        return;
    };
    let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await else {
        return;
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = hyper_util::rt::TokioIo::new(stream);
    if h2 {
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(io, service)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await;
    }
}
