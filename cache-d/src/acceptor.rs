//! The accept side of the child: listeners (`-a`), the connection limit,
//! one task per connection through the client transport, the once-a-second
//! housekeeping (expiry, idle backend connections, the ban lurker), and
//! shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;
use common::instance;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::error::StartError;
use crate::http1::transport::Http1;
use crate::listen::stream::ClientStream;
use crate::listen::{Listener, On, Proto, Socket};
use crate::req::contain::contain;
use crate::req::Served;
use crate::shared::Shared;

/// Serve until `stop` turns true, then stop accepting, let open sessions
/// finish their current request (up to `drain`), and return.
pub async fn serve(sh: Arc<Shared>, listeners: Vec<Listener>, mut stop: watch::Receiver<bool>, drain: Duration) {
    let limit = Arc::new(Semaphore::new(sh.params().max_connections));
    let mut accepts = Vec::new();
    for l in listeners {
        let socket = match Accepting::from_std(l.socket) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cache-d: listener {}: {e}", l.name);
                continue;
            }
        };
        let on = On { name: l.name, proto: l.proto };
        accepts.push(tokio::spawn(accept_loop(sh.clone(), socket, on, limit.clone(), stop.clone())));
    }
    let ticker = tokio::spawn(tick(sh.clone()));
    let _ = stop.wait_for(|s| *s).await;
    for a in &accepts {
        a.abort();
    }
    // Wait for sessions to hand back their permits.
    let all = sh.params().max_connections as u32;
    let _ = tokio::time::timeout(drain, limit.acquire_many(all)).await;
    ticker.abort();
}

/// A listening socket in the runtime.
enum Accepting {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Accepting {
    fn from_std(s: Socket) -> std::io::Result<Accepting> {
        Ok(match s {
            Socket::Tcp(s) => {
                s.set_nonblocking(true)?;
                Accepting::Tcp(TcpListener::from_std(s)?)
            }
            Socket::Unix(s) => {
                s.set_nonblocking(true)?;
                Accepting::Unix(UnixListener::from_std(s)?)
            }
        })
    }

    /// The next connection and its two ends (0.0.0.0:0 for both on a
    /// Unix socket, as Varnish shows them).
    async fn accept(&self) -> std::io::Result<(ClientStream, SocketAddr, SocketAddr)> {
        match self {
            Accepting::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                let local = stream.local_addr().unwrap_or(NOWHERE);
                Ok((ClientStream::Tcp(stream), peer, local))
            }
            Accepting::Unix(l) => {
                let (stream, _) = l.accept().await?;
                Ok((ClientStream::Unix(stream), NOWHERE, NOWHERE))
            }
        }
    }
}

/// The address Varnish gives both ends of a Unix-socket connection.
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

async fn accept_loop(sh: Arc<Shared>, socket: Accepting, on: On, limit: Arc<Semaphore>, stop: watch::Receiver<bool>) {
    loop {
        let (stream, peer, local) = match socket.accept().await {
            Ok(x) => x,
            Err(e) => {
                sh.seg.add(C::SessFail, 1);
                // Out of file descriptors and the like: back off briefly.
                if !matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::Interrupted) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                continue;
            }
        };
        sh.seg.add(C::SessConn, 1);
        sh.seg.add(C::SSess, 1);
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            sh.seg.add(C::SessDropped, 1);
            drop(stream);
            continue;
        };
        let (sh, on, stop) = (sh.clone(), on.clone(), stop.clone());
        tokio::spawn(async move {
            let stream = match on.proto {
                Proto::Https => match handshake(&sh, stream).await {
                    Ok(s) => s,
                    Err(why) => {
                        crate::req::no_session(&sh, peer, local, &on, &why);
                        return;
                    }
                },
                _ => stream,
            };
            if let Err(why) = contain(serve_conn(sh.clone(), stream, peer, local, on, stop)).await {
                crate::req::failed(&sh, peer, &why);
            }
            drop(permit);
        });
    }
}

/// Serve an accepted connection: HTTP/2 when TLS chose it by ALPN, else
/// HTTP/1 (which may turn to HTTP/2 by preface or upgrade).
async fn serve_conn(sh: Arc<Shared>, stream: ClientStream, peer: SocketAddr, local: SocketAddr, on: On, stop: watch::Receiver<bool>) {
    if stream.alpn() == Some(b"h2") {
        let conn = Http1::new(stream);
        let tls = crate::req::transport::Transport::tls_info(&conn).map(Arc::new);
        let sess = crate::req::state::Sess::open(sh, peer, local, &on, crate::req::transport::Transport::fd(&conn), tls);
        let (stream, pre) = conn.into_parts();
        return crate::h2::serve(sess, stream, pre, None, stop).await;
    }
    let mut conn = Http1::new(stream);
    if let Served::H2 { sess, upgrade } = crate::req::session(sh, &mut conn, peer, local, on, stop.clone()).await {
        let (stream, pre) = conn.into_parts();
        crate::h2::serve(*sess, stream, pre, upgrade, stop).await;
    }
}

/// A TLS handshake on an accepted connection, within timeout_idle.
async fn handshake(sh: &Shared, stream: ClientStream) -> Result<ClientStream, String> {
    let ClientStream::Tcp(tcp) = stream else { return Err("TLS on a connection that is not TCP".into()) };
    let acceptor = tokio_rustls::TlsAcceptor::from(sh.tls.config(sh.params().has_feature("http2")));
    let timeout = sh.params().timeout_idle.max(Duration::from_millis(1));
    let done = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Ok(ClientStream::Tls(Box::new(tls))),
        Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
        Err(_) => Err("TLS handshake timed out".into()),
    };
    sh.seg.add(if done.is_ok() { C::TlsHandshakes } else { C::TlsHandshakeFail }, 1);
    done
}

/// Once a second: the child's uptime and expiry of dead objects (the
/// manager keeps MGT.uptime and the heartbeat).
async fn tick(sh: Arc<Shared>) {
    let start = tokio::time::Instant::now();
    let mut iv = tokio::time::interval(Duration::from_secs(1));
    tokio::spawn(lurker(sh.clone()));
    loop {
        iv.tick().await;
        sh.seg.set(C::MainUptime, start.elapsed().as_secs());
        sh.cache.expire(crate::util::now());
        // Idle backend connections past backend_idle_timeout are closed.
        let idle = sh.params().backend_idle_timeout;
        sh.backend.reap_idle(idle);
        for b in sh.policy().policy.backends() {
            b.reap_idle(idle);
        }
    }
}

/// The ban lurker (see crate::cache::ban::lurker), with the parameters
/// in force at each pass.
async fn lurker(sh: Arc<Shared>) {
    let cache = sh.cache.clone();
    crate::cache::ban::lurker::run(cache, move || (sh.params().ban_lurker_sleep, sh.params().ban_lurker_age)).await;
}

/// Publish the bound addresses (`name ip port` lines), so that tools and
/// tests that asked for port 0 can find the port (like varnishd's
/// `debug.listen_address`).
pub fn write_listen_file(dir: &std::path::Path, listeners: &[Listener]) -> Result<(), StartError> {
    let mut text = String::new();
    for l in listeners {
        text.push_str(&crate::listen::listen_line(l)?);
    }
    instance::write_file(dir, instance::LISTEN_FILE, text.as_bytes(), 0o644)?;
    Ok(())
}
