//! The accept side of the child: listeners (`-a`), the connection limit,
//! one task per connection through the client transport, the once-a-second
//! housekeeping (expiry, idle backend connections, the ban lurker), and
//! shutdown.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;
use common::instance;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::error::StartError;
use crate::http1::transport::Http1;
use crate::req::contain::contain;
use crate::shared::Shared;

/// A bound listener and its name (`a0`, `a1`... or the `-a name=`).
pub struct Listener {
    pub name: Arc<str>,
    pub socket: std::net::TcpListener,
}

/// Serve until `stop` turns true, then stop accepting, let open sessions
/// finish their current request (up to `drain`), and return.
pub async fn serve(sh: Arc<Shared>, listeners: Vec<Listener>, mut stop: watch::Receiver<bool>, drain: Duration) {
    let limit = Arc::new(Semaphore::new(sh.params().max_connections));
    let mut accepts = Vec::new();
    for l in listeners {
        let _ = l.socket.set_nonblocking(true);
        let socket = match TcpListener::from_std(l.socket) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cache-d: listener {}: {e}", l.name);
                continue;
            }
        };
        accepts.push(tokio::spawn(accept_loop(sh.clone(), socket, l.name, limit.clone(), stop.clone())));
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

async fn accept_loop(sh: Arc<Shared>, socket: TcpListener, name: Arc<str>, limit: Arc<Semaphore>, stop: watch::Receiver<bool>) {
    loop {
        let (stream, peer) = match socket.accept().await {
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
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let (sh, name, stop) = (sh.clone(), name.clone(), stop.clone());
        tokio::spawn(async move {
            if let Err(why) = contain(crate::req::session(sh.clone(), Http1::new(stream), peer, local, name, stop)).await {
                crate::req::failed(&sh, peer, &why);
            }
            drop(permit);
        });
    }
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

/// The ban lurker: a pass over the cache, then `ban_lurker_sleep` (at
/// least 10 ms; 0 disables it, checked again every second).
async fn lurker(sh: Arc<Shared>) {
    loop {
        let (sleep, age) = (sh.params().ban_lurker_sleep, sh.params().ban_lurker_age);
        if sleep <= 0.0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        let cache = sh.cache.clone();
        // The pass is CPU work over the whole index: off the async workers.
        let _ = tokio::task::spawn_blocking(move || cache.lurk(crate::util::now(), age)).await;
        tokio::time::sleep(Duration::from_secs_f64(sleep.max(0.01))).await;
    }
}

/// Parse `-a [name=][host]:port` and bind it.
pub fn bind(spec: &str, index: usize) -> Result<Vec<Listener>, StartError> {
    let (name, addr) = match spec.split_once('=') {
        Some((n, a)) => (n.to_string(), a),
        None => (format!("a{index}"), spec),
    };
    let full = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.to_string() };
    let addrs: Vec<_> = full.to_socket_addrs().map_err(|e| StartError::Config(format!("-a {spec}: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(StartError::Config(format!("-a {spec}: resolves to no address")));
    }
    let name: Arc<str> = name.into();
    addrs
        .into_iter()
        .map(|a| {
            let socket = std::net::TcpListener::bind(a).map_err(|source| StartError::Listen { addr: a.to_string(), source })?;
            Ok(Listener { name: name.clone(), socket })
        })
        .collect()
}

/// Publish the bound addresses (`name ip port` lines), so that tools and
/// tests that asked for port 0 can find the port (like varnishd's
/// `debug.listen_address`).
pub fn write_listen_file(dir: &std::path::Path, listeners: &[Listener]) -> Result<(), StartError> {
    let mut text = String::new();
    for l in listeners {
        let a = l.socket.local_addr()?;
        text.push_str(&format!("{} {} {}\n", l.name, a.ip(), a.port()));
    }
    instance::write_file(dir, instance::LISTEN_FILE, text.as_bytes(), 0o644)?;
    Ok(())
}
