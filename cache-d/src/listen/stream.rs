//! A client's connection, whichever kind of listener accepted it: one
//! type for the transport and the request steps, with static dispatch (a
//! match per read or write, no boxing).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

use crate::listen::movable::Movable;

/// A TLS session over a socket that can change event loops.
pub type TlsConn = tokio_rustls::server::TlsStream<Movable>;

pub enum ClientStream {
    Tcp(Movable),
    Unix(UnixStream),
    /// A TLS connection, its handshake done.
    Tls(Box<TlsConn>),
}

impl ClientStream {
    pub fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            ClientStream::Tcp(s) => s.as_raw_fd(),
            ClientStream::Unix(s) => s.as_raw_fd(),
            ClientStream::Tls(s) => s.get_ref().0.as_raw_fd(),
        }
    }

    /// The connection out of this runtime's poller, to be registered with
    /// another's.
    pub fn detach(self) -> io::Result<Detached> {
        match self {
            ClientStream::Tcp(s) => Ok(Detached::Tcp(s.into_std()?)),
            ClientStream::Unix(s) => Ok(Detached::Unix(s.into_std()?)),
            ClientStream::Tls(mut s) => {
                s.get_mut().0.detach()?;
                Ok(Detached::Tls(s))
            }
        }
    }

    /// Whether it can change event loops while its owner (TLS, HTTP/2)
    /// holds it: TCP can, a Unix socket stays on its loop.
    pub fn can_roam(&self) -> bool {
        !matches!(self, ClientStream::Unix(_))
    }

    /// The protocol TLS's ALPN chose (None: not TLS, or none chosen).
    pub fn alpn(&self) -> Option<&[u8]> {
        match self {
            ClientStream::Tls(s) => s.get_ref().1.alpn_protocol(),
            _ => None,
        }
    }
}

/// A connection in no runtime's poller (accepted, or moving between
/// event loops), nonblocking.
pub enum Detached {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
    /// Its socket is registered again at its first read or write.
    Tls(Box<TlsConn>),
}

impl Detached {
    /// The connection registered with the current runtime's poller.
    pub fn into_stream(self) -> io::Result<ClientStream> {
        Ok(match self {
            Detached::Tcp(s) => ClientStream::Tcp(Movable::register(s)?),
            Detached::Unix(s) => ClientStream::Unix(UnixStream::from_std(s)?),
            Detached::Tls(s) => ClientStream::Tls(s),
        })
    }
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self.get_mut() {
            ClientStream::Tcp($s) => $e,
            ClientStream::Unix($s) => $e,
            ClientStream::Tls($s) => $e,
        }
    };
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}
