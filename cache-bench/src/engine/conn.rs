//! The connection to the target, plain or TLS, for either client.

use tokio::net::TcpStream;

/// A connection to the target, plain or TLS (its handshake done).
pub(super) enum BenchStream {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Connect (and shake hands for https): a failure counts as a connect error.
pub(super) async fn connect(t: &crate::plan::Target) -> std::io::Result<BenchStream> {
    let s = TcpStream::connect(t.addr).await?;
    let _ = s.set_nodelay(true);
    match &t.tls {
        None => Ok(BenchStream::Tcp(s)),
        Some(tls) => {
            let c = tokio_rustls::TlsConnector::from(tls.config.clone());
            Ok(BenchStream::Tls(Box::new(c.connect(tls.name.clone(), s).await?)))
        }
    }
}

impl tokio::io::AsyncRead for BenchStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for BenchStream {
    fn poll_write(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}
