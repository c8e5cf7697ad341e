//! TLS to a PostgreSQL server (`sslmode=require`): tokio-postgres's
//! `TlsConnect` over rustls, with the TLS client the operator configured
//! for outgoing connections (`luge_outbound::tls_client`: the platform's
//! roots, `--ca-file`, Spin's `[[client_tls]]`). The chain and the
//! server's name are always verified (libpq's `verify-full`): Luge has no
//! mode that encrypts to an unverified peer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect};

/// Connects a stream with TLS to the server `name`.
#[derive(Clone)]
pub(crate) struct Rustls {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) name: ServerName<'static>,
}

impl<S> TlsConnect<S> for Rustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Tls<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Tls<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let connector = tokio_rustls::TlsConnector::from(self.config);
            Ok(Tls(connector.connect(self.name, stream).await?))
        })
    }
}

/// A TLS session with the server.
pub(crate) struct Tls<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tls<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tls<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for Tls<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM without channel binding (what the server then asks for
        // unless it requires `channel_binding`): the session is already
        // bound to a verified certificate.
        ChannelBinding::none()
    }
}
