//! HTTP/3 over QUIC (`-p feature=+http3`, off by default): every https
//! listener also has a UDP socket on its port (bound by the manager with
//! the TCP one, so the feature can be turned on at runtime), served by a
//! QUIC endpoint (`quinn`, on rustls with the same certificates, session
//! cache and ticket keys as TLS over TCP) and HTTP/3 (`h3`). Each request
//! stream goes through the same steps as HTTP/1 and HTTP/2
//! ([`stream::H3Stream`] is its transport), logged under the connection's
//! session as HTTP/2 streams are.
//!
//! What QUIC costs us before a client proves anything is bounded: the
//! endpoint answers at most three times the bytes a client sent until its
//! address is validated (RFC 9000 §8, quinn's), and while more than
//! h3_retry_above handshakes are in progress a new one gets a stateless
//! Retry first. A connection counts against max_connections like a TCP
//! one; its streams are bounded by h3_max_concurrent_streams (QUIC's own
//! stream credit, which a stream returns only when its request is done),
//! its buffers by h3_stream_window, h3_conn_window and h3_send_window.

pub mod out;
pub mod stream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{watch, Semaphore};

use crate::child::loops::Loops;
use crate::listen::On;
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::state::Sess;
use crate::shared::Shared;
use crate::vcl::model::TlsInfo;

/// The h3 connection type our streams come from.
type H3Conn = h3::server::Connection<h3_quinn::Connection, bytes::Bytes>;

/// Serve QUIC on `socket` (an https listener's port) until `stop`, on
/// one event loop of `loops`: the endpoint (which reads every datagram of
/// the port and hands each to its connection) and all its connections on
/// the same thread. Spread over loops, every datagram crossed threads
/// twice, and the wake-ups cost more than the requests: 85 µs of CPU per
/// 1 KiB hit (4,000/s, 2 connections of 10 streams), 42% of it switching
/// threads. (Connections cannot simply spread over sockets of their own
/// either: a port's datagrams reach one socket, and a client that moves
/// to a new address must still find its connection.)
pub fn start(sh: Arc<Shared>, socket: std::net::UdpSocket, on: On, loops: &Loops, limit: Arc<Semaphore>, stop: watch::Receiver<bool>) {
    loops.spawn_on(0, move |open| async move {
        let _open = open;
        serve(sh, socket, on, limit, stop).await;
    });
}

async fn serve(sh: Arc<Shared>, socket: std::net::UdpSocket, on: On, limit: Arc<Semaphore>, mut stop: watch::Receiver<bool>) {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    let bound = socket.local_addr().ok();
    let endpoint = match server_config(&sh, &sh.params()).and_then(|cfg| {
        quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(cfg), socket, Arc::new(quinn::TokioRuntime)).map_err(|e| e.to_string())
    }) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cache-d: listener {}: no HTTP/3: {e}", on.name);
            return;
        }
    };
    let handshakes = Arc::new(AtomicUsize::new(0));
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
            _ = stop.wait_for(|s| *s) => break,
        };
        let p = sh.params_arc();
        if !p.http3() {
            sh.seg.add(C::H3Refused, 1);
            incoming.ignore();
            continue;
        }
        // Under load, a client proves its address before it costs us a
        // connection's state (a Retry holds none).
        let incoming = if handshakes.load(Ordering::Relaxed) >= p.h3.retry_above && !incoming.remote_address_validated() {
            match incoming.retry() {
                Ok(()) => {
                    sh.seg.add(C::H3Retry, 1);
                    continue;
                }
                Err(e) => e.into_incoming(),
            }
        } else {
            incoming
        };
        sh.seg.add(C::SessConn, 1);
        sh.seg.add(C::SSess, 1);
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            sh.seg.add(C::SessDropped, 1);
            sh.seg.add(C::H3Refused, 1);
            incoming.refuse();
            continue;
        };
        let cfg = match server_config(&sh, &p) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                eprintln!("cache-d: listener {}: HTTP/3: {e}", on.name);
                incoming.refuse();
                continue;
            }
        };
        let (sh, on, stop, busy) = (sh.clone(), on.clone(), stop.clone(), handshakes.clone());
        busy.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            let local = SocketAddr::new(
                incoming.local_ip().or(bound.map(|b| b.ip())).unwrap_or([0, 0, 0, 0].into()),
                bound.map_or(0, |b| b.port()),
            );
            let conn = handshake(&sh, incoming, cfg, p.timeout_idle, p.h3.zero_rtt).await;
            busy.fetch_sub(1, Ordering::Relaxed);
            let (conn, done) = match conn {
                Ok(c) => c,
                Err(why) => return crate::req::no_session(&sh, peer, local, &on, &why),
            };
            let _held = permit;
            let tls = tls_info(&conn);
            let sess = Sess::open(sh.clone(), peer, local, &on, fd, Some(Arc::new(tls)));
            if let Err(why) = crate::req::contain::contain(connection(sess, conn, done, stop)).await {
                crate::req::failed(&sh, peer, &why);
            }
        });
    }
}

/// quinn's server configuration from the h3_* parameters.
fn server_config(sh: &Shared, p: &Params) -> Result<quinn::ServerConfig, String> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(sh.tls.quic_config(p.h3.zero_rtt)).map_err(|e| e.to_string())?;
    let mut t = quinn::TransportConfig::default();
    let var = |n: u64| quinn::VarInt::from_u64(n).unwrap_or(quinn::VarInt::MAX);
    t.max_concurrent_bidi_streams(var(p.h3.max_concurrent_streams.into()))
        // The client's control and QPACK streams, and a few to spare (a
        // client may open reserved ones, RFC 9114 §6.2.3).
        .max_concurrent_uni_streams(var(8))
        .stream_receive_window(var(p.h3.stream_window))
        .receive_window(var(p.h3.conn_window))
        .send_window(p.h3.send_window)
        .max_idle_timeout(quinn::IdleTimeout::try_from(p.h3.idle_timeout).ok());
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    cfg.transport_config(Arc::new(t));
    Ok(cfg)
}

/// Accept `incoming` and complete its handshake within `timeout`; with
/// `early` (h3_0rtt), the connection is served at once (its 0-RTT
/// requests), and the receiver turns true when the handshake completes
/// (its sender dropped at false: it failed).
async fn handshake(
    sh: &Arc<Shared>,
    incoming: quinn::Incoming,
    cfg: Arc<quinn::ServerConfig>,
    timeout: Duration,
    early: bool,
) -> Result<(quinn::Connection, watch::Receiver<bool>), String> {
    let timeout = timeout.max(Duration::from_millis(1));
    let connecting = incoming.accept_with(cfg).map_err(|e| format!("QUIC handshake failed: {e}"));
    let connecting = match connecting.map(|c| if early { c.into_0rtt() } else { Err(c) }) {
        Ok(Ok((conn, accepted))) => {
            let (tx, rx) = watch::channel(false);
            let (sh, c) = (sh.clone(), conn.clone());
            tokio::spawn(async move {
                let ok = tokio::time::timeout(timeout, accepted).await.is_ok() && c.close_reason().is_none();
                sh.seg.add(if ok { C::H3Conn } else { C::H3HandshakeFail }, 1);
                if ok {
                    let _ = tx.send(true);
                }
            });
            return Ok((conn, rx));
        }
        Ok(Err(c)) => Ok(c),
        Err(e) => Err(e),
    };
    let done = match connecting {
        Err(e) => Err(e),
        Ok(connecting) => match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(c)) => Ok((c, watch::channel(true).1)),
            Ok(Err(e)) => Err(format!("QUIC handshake failed: {e}")),
            Err(_) => Err("QUIC handshake timed out".into()),
        },
    };
    sh.seg.add(if done.is_ok() { C::H3Conn } else { C::H3HandshakeFail }, 1);
    done
}

/// What the handshake gave, as VCL's tls.* show it. QUIC is TLS 1.3 only;
/// its cipher is TLS_AES_128_GCM_SHA256: ours come in that order first
/// and we choose (ignore_client_order), and every QUIC client has it
/// (RFC 9001 §5.3). quinn does not expose the suite it negotiated.
fn tls_info(conn: &quinn::Connection) -> TlsInfo {
    let data = conn.handshake_data().and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok());
    TlsInfo {
        version: "TLSv1.3",
        cipher: "TLS_AES_128_GCM_SHA256".into(),
        sni: data.as_ref().and_then(|d| d.server_name.clone()),
        alpn: Some("h3".into()),
    }
}

/// Has the connection's handshake completed, as its state says now? The
/// `done` flag follows it from another task, and can lag: a request sent
/// after the handshake, because the server refused the client's 0-RTT (a
/// replayed ticket), can be accepted before the flag turns. TLS exporters
/// are there only once the handshake is complete (rustls refuses them
/// before), so one is the probe; it is asked only while the flag is false.
fn confirmed(conn: &quinn::Connection) -> bool {
    conn.export_keying_material(&mut [0u8; 1], b"cachekit handshake probe", b"").is_ok()
}

/// Serve a QUIC connection's HTTP/3 requests until it ends; its session's
/// last records.
async fn connection(mut sess: Sess, conn: quinn::Connection, done: watch::Receiver<bool>, mut stop: watch::Receiver<bool>) {
    let p = sess.sh.params_arc();
    // The session's first records go out before any stream's Link.
    sess.sh.seg.log(&sess.log);
    sess.log.clear();
    let max_field = p.h3.max_field_section_size.min(p.http_req_size as u64);
    let mut h3c: H3Conn = match h3::server::builder().max_field_section_size(max_field).build(h3_quinn::Connection::new(conn.clone())).await
    {
        Ok(c) => c,
        Err(e) => {
            let reason = ended(&mut sess, &e);
            return crate::req::close_session(&mut sess, reason);
        }
    };
    let mut tasks = FuturesUnordered::new();
    let mut stopping = false;
    let reason = loop {
        tokio::select! {
            next = h3c.accept() => match next {
                Ok(Some(resolver)) => {
                    let early = !*done.borrow() && !confirmed(&conn);
                    tasks.push(stream::run(sess.for_stream(3), resolver, p.clone(), done.clone(), early))
                }
                Ok(None) => break Reason::RemClose,
                Err(e) => break ended(&mut sess, &e),
            },
            Some(()) = tasks.next(), if !tasks.is_empty() => continue,
            _ = stop.wait_for(|s| *s), if !stopping => stopping = true,
        }
        if stopping {
            // GOAWAY: the requests in progress finish, no new ones.
            let _ = tokio::time::timeout(Duration::from_secs(1), h3c.shutdown(0)).await;
        }
    };
    // Streams still running end at their next write to the closed
    // connection; their records go before the session's last ones.
    while tasks.next().await.is_some() {}
    conn.close(quinn::VarInt::from_u32(0x100), b"");
    crate::req::close_session(&mut sess, reason);
}

/// Why a connection h3 gave up on ended: the client closed it or went
/// quiet, or broke the protocol (logged).
fn ended(sess: &mut Sess, e: &h3::error::ConnectionError) -> Reason {
    // (Its variants cannot be matched outside the crate.)
    let what = format!("{e:?}");
    match () {
        _ if e.is_h3_no_error() => Reason::RemClose,
        _ if what.contains("Timeout") => Reason::RxCloseIdle,
        _ if what.starts_with("Remote(ApplicationClose") => Reason::RemClose,
        _ => {
            sess.log.recf(Tag::Error, LogSide::Client, sess.vxid, format_args!("HTTP/3: {e}"));
            Reason::RxJunk
        }
    }
}
