//! A client's TCP socket, able to leave its event loop: a TLS stream
//! (tokio-rustls) or an HTTP/2 connection (the h2 crate) owns its
//! transport and cannot be taken apart and rebuilt, so the transport
//! itself leaves one loop's poller and joins the next one's at its first
//! read or write there (see crate::child::loops and crate::child::roam):
//! when told to (`detach`), or when it finds itself polled from another
//! loop's thread than the one it is registered with.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::child::loops::here;

/// A TCP socket registered with a loop's poller (the loop's tag, see
/// `loops::here`), or in none.
pub enum Movable {
    On(TcpStream, usize),
    Off(std::net::TcpStream),
    /// Only while changing from one to the other.
    Changing,
}

impl Movable {
    /// A nonblocking socket registered with the current runtime's poller.
    pub fn register(s: std::net::TcpStream) -> io::Result<Movable> {
        Ok(Movable::On(TcpStream::from_std(s)?, here()))
    }

    /// Out of the runtime's poller (nonblocking, ready for another's).
    pub fn detach(&mut self) -> io::Result<()> {
        if let Movable::On(..) = self {
            let Movable::On(s, _) = std::mem::replace(self, Movable::Changing) else { unreachable!() };
            *self = Movable::Off(s.into_std()?);
        }
        Ok(())
    }

    /// The socket, in no runtime's poller.
    pub fn into_std(mut self) -> io::Result<std::net::TcpStream> {
        self.detach()?;
        match self {
            Movable::Off(s) => Ok(s),
            _ => Err(lost()),
        }
    }

    /// The socket in the current runtime's poller: registered now if it
    /// was in none, or in another loop's (whose poller it leaves; off the
    /// loops, where the tag is 0, it stays where it is).
    fn on(&mut self) -> io::Result<&mut TcpStream> {
        let here = here();
        if matches!(self, Movable::On(_, at) if *at != here && here != 0) {
            self.detach()?;
        }
        if let Movable::Off(_) = self {
            let Movable::Off(s) = std::mem::replace(self, Movable::Changing) else { unreachable!() };
            *self = Movable::On(TcpStream::from_std(s)?, here);
        }
        match self {
            Movable::On(s, _) => Ok(s),
            _ => Err(lost()),
        }
    }
}

fn lost() -> io::Error {
    io::Error::other("a socket lost while moving between event loops")
}

impl AsRawFd for Movable {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Movable::On(s, _) => s.as_raw_fd(),
            Movable::Off(s) => s.as_raw_fd(),
            Movable::Changing => -1,
        }
    }
}

/// An I/O call on the socket, registered with the current runtime first.
fn on<R>(me: Pin<&mut Movable>, io: impl FnOnce(Pin<&mut TcpStream>) -> Poll<io::Result<R>>) -> Poll<io::Result<R>> {
    match me.get_mut().on() {
        Ok(s) => io(Pin::new(s)),
        Err(e) => Poll::Ready(Err(e)),
    }
}

impl AsyncRead for Movable {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        on(self, |s| s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Movable {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        on(self, |s| s.poll_write(cx, buf))
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        on(self, |s| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on(self, |s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on(self, |s| s.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A TLS session set up on one runtime goes on on another: the socket
    /// detached from the first poller, registered with the second at its
    /// first read, the session's state (keys, sequence numbers) unchanged.
    #[test]
    fn a_tls_session_goes_on_on_another_runtime() {
        let ck = rcgen::generate_simple_self_signed(vec!["move.test".to_string()]).unwrap();
        let tls = crate::tls::Tls::new();
        tls.load("a", format!("{}{}", ck.cert.pem(), ck.key_pair.serialize_pem()).as_bytes()).unwrap();
        tls.commit();
        let server_cfg = tls.config(false);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ck.cert.der().clone()).unwrap();
        let client_cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The client, on a thread and runtime of its own: two exchanges.
        let client = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async move {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("move.test").unwrap();
                let mut c = tokio_rustls::TlsConnector::from(Arc::new(client_cfg)).connect(name, tcp).await.unwrap();
                let mut got = Vec::new();
                for msg in [&b"one"[..], b"two"] {
                    c.write_all(msg).await.unwrap();
                    let mut buf = [0u8; 8];
                    let n = c.read(&mut buf).await.unwrap();
                    got.push(buf[..n].to_vec());
                }
                got
            })
        });
        let rt = |name: &str| tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name(name).enable_all().build().unwrap();
        let (a, b) = (rt("a"), rt("b"));
        let (sock, _) = listener.accept().unwrap();
        sock.set_nonblocking(true).unwrap();
        let mut conn = a
            .block_on(a.spawn(async move {
                let tcp = TcpStream::from_std(sock).unwrap();
                let mut s = tokio_rustls::TlsAcceptor::from(server_cfg).accept(Movable::On(tcp, 0)).await.unwrap();
                let mut buf = [0u8; 8];
                let n = s.read(&mut buf).await.unwrap();
                s.write_all(&[&b"a:"[..], &buf[..n]].concat()).await.unwrap();
                s.get_mut().0.detach().unwrap();
                s
            }))
            .unwrap();
        assert!(matches!(conn.get_ref().0, Movable::Off(_)));
        let answered = b
            .block_on(b.spawn(async move {
                let mut buf = [0u8; 8];
                let n = conn.read(&mut buf).await.unwrap();
                conn.write_all(&[&b"b:"[..], &buf[..n]].concat()).await.unwrap();
                std::thread::current().name().map(String::from)
            }))
            .unwrap();
        assert_eq!(answered.as_deref(), Some("b"));
        assert_eq!(client.join().unwrap(), vec![b"a:one".to_vec(), b"b:two".to_vec()]);
    }
}
