//! The accept side of the child: listeners (`-a`), the connection limit,
//! one task per connection through the client transport, the once-a-second
//! housekeeping (expiry, idle backend connections, the ban lurker), and
//! shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;
use common::instance;
use tokio::io::unix::AsyncFd;
use tokio::sync::{watch, Semaphore};

use crate::child::loops::Loops;
use crate::child::roam::Roaming;
use crate::error::StartError;
use crate::http1::transport::Http1;
use crate::listen::stream::{ClientStream, Detached as Accepted};
use crate::listen::{Listener, On, Proto, Socket};
use crate::req::contain::contain;
use crate::req::Served;
use crate::shared::Shared;

/// Serve until `stop` turns true, then stop accepting, let open sessions
/// finish their current request (up to `drain`), and return. Listeners
/// and housekeeping run on the caller's runtime; each connection on one
/// of `loops`.
pub async fn serve(sh: Arc<Shared>, listeners: Vec<Listener>, loops: Arc<Loops>, mut stop: watch::Receiver<bool>, drain: Duration) {
    let limit = Arc::new(Semaphore::new(sh.params().max_connections));
    let mut accepts = Vec::new();
    for l in listeners {
        if let Socket::Udp(udp) = l.socket {
            let on = On { name: l.name, proto: l.proto };
            sh.note_quic(&on.name);
            crate::h3::start(sh.clone(), udp, on, &loops, limit.clone(), stop.clone());
            continue;
        }
        let socket = match Accepting::from_std(l.socket) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cache-d: listener {}: {e}", l.name);
                continue;
            }
        };
        let on = On { name: l.name, proto: l.proto };
        accepts.push(tokio::spawn(accept_loop(sh.clone(), socket, on, loops.clone(), limit.clone(), stop.clone())));
    }
    let ticker = tokio::spawn(tick(sh.clone(), loops.clone()));
    let _ = stop.wait_for(|s| *s).await;
    for a in &accepts {
        a.abort();
    }
    // Wait for sessions to hand back their permits.
    let all = sh.params().max_connections as u32;
    let _ = tokio::time::timeout(drain, limit.acquire_many(all)).await;
    ticker.abort();
}

/// A listening socket in the runtime. Accepted here, a connection's
/// socket is registered with the loop that serves it, not with this
/// runtime's poller.
enum Accepting {
    Tcp(AsyncFd<std::net::TcpListener>),
    Unix(AsyncFd<std::os::unix::net::UnixListener>),
}

impl Accepting {
    fn from_std(s: Socket) -> std::io::Result<Accepting> {
        Ok(match s {
            Socket::Tcp(s) => {
                s.set_nonblocking(true)?;
                // SAFETY: the listener owns its descriptor, and nothing
                // closes or replaces it while the AsyncFd holds it.
                Accepting::Tcp(unsafe { AsyncFd::register(s)? })
            }
            Socket::Unix(s) => {
                s.set_nonblocking(true)?;
                // SAFETY: as above.
                Accepting::Unix(unsafe { AsyncFd::register(s)? })
            }
            Socket::Udp(_) => return Err(std::io::Error::other("a UDP socket is served by QUIC, not accepted")),
        })
    }

    /// The next connection and its two ends (0.0.0.0:0 for both on a
    /// Unix socket, as Varnish shows them).
    async fn accept(&self) -> std::io::Result<(Accepted, SocketAddr, SocketAddr)> {
        match self {
            Accepting::Tcp(l) => {
                let (stream, peer) = l.async_io(tokio::io::Interest::READABLE, |l| l.accept()).await?;
                stream.set_nonblocking(true)?;
                let _ = stream.set_nodelay(true);
                let local = stream.local_addr().unwrap_or(NOWHERE);
                Ok((Accepted::Tcp(stream), peer, local))
            }
            Accepting::Unix(l) => {
                let (stream, _) = l.async_io(tokio::io::Interest::READABLE, |l| l.accept()).await?;
                stream.set_nonblocking(true)?;
                Ok((Accepted::Unix(stream), NOWHERE, NOWHERE))
            }
        }
    }
}

/// Ask for a fixed kernel send buffer of `bytes` (the send_buffer
/// parameter; 0 leaves the kernel's autotuning). On loopback, with a
/// large body written at once into an autotuned buffer (megabytes),
/// segments arrived out of order (why is inferred, not traced: probably
/// sent from two CPUs, the writer's and the ACK-processing one), and
/// were retransmitted: 1 MiB hits at 1,700/s from one epoll
/// thread (cache-d's, or the benchmark floor's, which does nothing but
/// write) had a p99 of 71-73 ms, and under 1 ms
/// with 512k (`scripts/bench-cpu.sh` tail rows; README).
fn send_buffer(s: &std::net::TcpStream, bytes: usize) {
    if bytes == 0 {
        return;
    }
    let n = bytes.min(i32::MAX as usize) as libc::c_int;
    crate::util::set_int_sockopt(std::os::fd::AsRawFd::as_raw_fd(s), libc::SOL_SOCKET, libc::SO_SNDBUF, n);
}

/// The address Varnish gives both ends of a Unix-socket connection.
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

async fn accept_loop(sh: Arc<Shared>, socket: Accepting, on: On, loops: Arc<Loops>, limit: Arc<Semaphore>, stop: watch::Receiver<bool>) {
    loop {
        let (accepted, peer, local) = match socket.accept().await {
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
        if let Accepted::Tcp(s) = &accepted {
            send_buffer(s, sh.params().send_buffer);
        }
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            sh.seg.add(C::SessDropped, 1);
            drop(accepted);
            continue;
        };
        let (sh, on, stop, to) = (sh.clone(), on.clone(), stop.clone(), loops.clone());
        loops.spawn(move |open| async move {
            let stream = match accepted.into_stream() {
                Ok(s) => s,
                Err(e) => {
                    crate::req::no_session(&sh, peer, local, &on, &format!("registering the connection: {e}"));
                    return;
                }
            };
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
            let held = Held { _permit: permit, _open: open };
            if let Err(why) = contain(serve_conn(sh.clone(), stream, peer, local, on, stop, Moves { loops: to, held, peer })).await {
                crate::req::failed(&sh, peer, &why);
            }
        });
    }
}

/// What a connection holds while open: its place under max_connections
/// and its count on its loop.
struct Held {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _open: crate::child::loops::Open,
}

/// What a connection needs to move to another loop.
struct Moves {
    loops: Arc<Loops>,
    held: Held,
    peer: SocketAddr,
}

/// What a connection does next, on whichever loop it is.
enum Next {
    /// Its HTTP/1 requests, from the next one on.
    Requests,
    /// HTTP/2: after the preface (None), or answering an h2c upgrade.
    H2(Option<crate::http1::head::Head>),
}

/// Serve an accepted connection: HTTP/2 when TLS chose it by ALPN, else
/// HTTP/1 (which may turn to HTTP/2 by preface or upgrade).
async fn serve_conn(
    sh: Arc<Shared>,
    stream: ClientStream,
    peer: SocketAddr,
    local: SocketAddr,
    on: On,
    stop: watch::Receiver<bool>,
    m: Moves,
) {
    let mut conn = Http1::new(stream);
    if conn.alpn() == Some(b"h2") {
        let tls = crate::req::transport::Transport::tls_info(&conn).map(Arc::new);
        let sess = crate::req::state::Sess::open(sh, peer, local, &on, crate::req::transport::Transport::fd(&conn), tls);
        return go_on(Box::new(sess), conn, Next::H2(None), stop, m).await;
    }
    let served = crate::req::session(sh, &mut conn, peer, local, on, stop.clone()).await;
    after(served, conn, stop, m).await;
}

/// What follows a session's HTTP/1 requests: nothing (closed), HTTP/2 on
/// the same connection, or the next requests on another loop.
fn after(
    served: Served,
    conn: Http1,
    stop: watch::Receiver<bool>,
    m: Moves,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        match served {
            Served::Closed => {}
            Served::H2 { sess, upgrade } => go_on(sess, conn, Next::H2(upgrade), stop, m).await,
            Served::Move(sess) => match m.loops.pick_move() {
                Some(to) => move_to(to, sess, conn, Next::Requests, stop, m),
                None => go_on(sess, conn, Next::Requests, stop, m).await,
            },
        }
    })
}

/// Go on with `next` here: HTTP/1 requests until the connection closes or
/// is moved at a request boundary, or HTTP/2, which over TCP may move
/// between two polls (see crate::child::roam).
async fn go_on(sess: Box<crate::req::state::Sess>, mut conn: Http1, next: Next, stop: watch::Receiver<bool>, m: Moves) {
    match next {
        Next::H2(upgrade) => {
            let (stream, pre) = conn.into_parts();
            if !stream.can_roam() {
                return crate::h2::serve(*sess, stream, pre, upgrade, stop).await;
            }
            let sh = sess.sh.clone();
            roam(sh, Roaming::new(crate::h2::serve(*sess, stream, pre, upgrade, stop)), m).await;
        }
        Next::Requests => {
            let served = crate::req::requests(*sess, &mut conn, stop.clone()).await;
            after(served, conn, stop, m).await;
        }
    }
}

/// Serve a roaming connection here until it ends or its loop sheds it,
/// then on the least busy other loop.
fn roam(sh: Arc<Shared>, conn: Roaming, m: Moves) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut conn = conn;
        let to = loop {
            conn = match conn.run().await {
                None => return,
                Some(c) => c,
            };
            if let Some(to) = m.loops.pick_move() {
                break to;
            }
        };
        let peer = m.peer;
        hand_over(to, m, move |m| async move {
            if let Err(why) = contain(roam(sh.clone(), conn, m)).await {
                crate::req::failed(&sh, peer, &why);
            }
        });
    })
}

/// Go on with `go` on loop `to`, the connection's place under
/// max_connections kept and its count moved there.
fn hand_over<F, Fut>(to: usize, m: Moves, go: F)
where
    F: FnOnce(Moves) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Moves { loops, held: Held { _permit: permit, _open: was }, peer } = m;
    drop(was);
    let all = loops.clone();
    loops.spawn_on(to, move |open| go(Moves { loops: all, held: Held { _permit: permit, _open: open }, peer }));
}

/// Hand the connection to loop `to`, its socket out of this loop's poller
/// (into that one's at its first read or write), to go on there with
/// `next`.
fn move_to(to: usize, mut sess: Box<crate::req::state::Sess>, conn: Http1, next: Next, stop: watch::Receiver<bool>, m: Moves) {
    let failed = |sess: &mut crate::req::state::Sess, e: std::io::Error| {
        crate::req::close_session(sess, crate::req::reason::Reason::TxError);
        eprintln!("cache-d: moving a connection between event loops: {e}");
    };
    let (stream, pre) = conn.into_parts();
    let detached = match stream.detach() {
        Ok(d) => d,
        Err(e) => return failed(&mut sess, e),
    };
    let peer = m.peer;
    hand_over(to, m, move |m| async move {
        let sh = sess.sh.clone();
        let go = async move {
            match detached.into_stream() {
                Ok(s) => go_on(sess, Http1::from_parts(s, pre), next, stop, m).await,
                Err(e) => failed(&mut sess, e),
            }
        };
        if let Err(why) = contain(go).await {
            crate::req::failed(&sh, peer, &why);
        }
    });
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

/// Once a second: the child's uptime, expiry of dead objects (the
/// manager keeps MGT.uptime and the heartbeat) and the event loops' balance.
async fn tick(sh: Arc<Shared>, loops: Arc<Loops>) {
    let start = tokio::time::Instant::now();
    let mut iv = tokio::time::interval(Duration::from_secs(1));
    tokio::spawn(lurker(sh.clone()));
    loop {
        iv.tick().await;
        sh.seg.set(C::MainUptime, start.elapsed().as_secs());
        sh.cache.expire(crate::util::now());
        loops.rebalance();
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
