//! The accept side: shared state, listeners, connection limits, shutdown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use common::counters::C;
use common::segment::SegmentWriter;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::backend::Backend;
use crate::cache::Cache;
use crate::params::Params;
use crate::policy::{Builtin, Policy};

/// State every connection shares.
pub struct Shared {
    pub seg: Arc<SegmentWriter>,
    /// Parameters, swapped whole when the manager changes one.
    params: ArcSwap<Params>,
    /// The default backend (-b, or the boot program's first).
    pub backend: Arc<Backend>,
    pub cache: Cache,
    /// The active policy (built-in, or a compiled VCL), swapped whole by
    /// vcl.use; a request keeps the one it started with.
    policy: ArcSwap<Active>,
    /// Our Via value: `1.1 <host> (cachekit/<version>)`.
    pub via: String,
    vxid: AtomicU32,
    /// `debug.panic.request`: the next request's task panics (to test that
    /// such a panic fails that request alone).
    pub debug_panic_request: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub fn new(seg: Arc<SegmentWriter>, params: Params, backend: Backend) -> Shared {
        let via = format!("1.1 {} (cachekit/{})", crate::util::hostname(), env!("CARGO_PKG_VERSION"));
        let cache = Cache::new(params.storage, Some(seg.clone()));
        let policy = ArcSwap::from_pointee(Active { name: "boot".into(), policy: Arc::new(Builtin) });
        Shared {
            seg,
            params: ArcSwap::from_pointee(params),
            backend: Arc::new(backend),
            cache,
            policy,
            via,
            vxid: AtomicU32::new(1),
            debug_panic_request: Default::default(),
        }
    }

    /// The policy for a request starting now.
    pub fn policy(&self) -> Arc<Active> {
        self.policy.load_full()
    }

    /// Make `policy` the active one for requests that start from now on.
    pub fn set_policy(&self, name: &str, policy: Arc<dyn Policy>) {
        self.set_active(Arc::new(Active { name: name.to_string(), policy }));
    }

    /// Make a loaded program the active one (vcl.use).
    pub fn set_active(&self, a: Arc<Active>) {
        self.policy.store(a);
    }

    /// The parameters in force (cheap: an atomic load).
    pub fn params(&self) -> arc_swap::Guard<Arc<Params>> {
        self.params.load()
    }

    /// Put new parameters in force for requests that start from now on.
    pub fn set_params(&self, p: Params) {
        self.params.store(Arc::new(p));
    }

    /// A new transaction id (30 bits, never 0).
    pub fn next_vxid(&self) -> u32 {
        loop {
            let v = self.vxid.fetch_add(1, Ordering::Relaxed) & common::vsl::VXID_MASK;
            if v != 0 {
                return v;
            }
        }
    }
}

/// What a policy may ask of the engine: backend health, bans.
impl crate::policy::Env for Shared {
    fn healthy(&self, _backend: Option<&str>) -> bool {
        // One backend until directors land: every name is the default one.
        self.backend.healthy()
    }
    fn ban(&self, spec: &str) -> Result<(), String> {
        let args = common::adm::tokenize(spec).map_err(|e| e.to_string())?;
        self.cache.ban(&args, crate::util::now(), self.params().ban_dups).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The active policy and its name (for VCL_use records and vcl.list).
pub struct Active {
    pub name: String,
    pub policy: Arc<dyn Policy>,
}

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
            if let Err(why) = crate::contain::contain(crate::session::run(sh.clone(), stream, peer, local, name, stop)).await {
                crate::session::failed(&sh, peer, &why);
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
