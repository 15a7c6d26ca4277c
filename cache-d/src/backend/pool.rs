//! A backend: its address, its settings (timeouts, connection limit, host
//! header), a pool of idle keep-alive connections, its admin state, and
//! the count of connections in use.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::counters::{Vbe, VBE};
use common::segment::SegmentWriter;
use tokio::net::TcpStream;

use crate::backend::tls::{BeStream, BeTls};
use crate::error::{Error, Side};
use crate::http1::conn::BufConn;

pub type BeConn = BufConn<BeStream>;

pub struct Backend {
    /// Name used in logs and counters (`default`, as for `-b` in varnishd).
    pub name: String,
    /// The program that declared it (`boot` for -b and the -f file).
    pub vcl: String,
    pub addrs: Vec<SocketAddr>,
    /// Per-backend settings; None follows the parameter.
    pub cfg: BackendCfg,
    /// Idle keep-alive connections, shared by every backend with the same
    /// addresses (as Varnish shares a TCP pool per endpoint across VCLs).
    idle: Arc<IdlePool>,
    /// Admin health (backend.set_health) and when it last changed.
    admin: Mutex<(Admin, f64)>,
    /// When it was made (the first "last change").
    pub(crate) created: f64,
    /// Connections in use (for .max_connections).
    busy: Arc<AtomicUsize>,
    pub(crate) probe: Mutex<crate::backend::health::ProbeState>,
    pub(crate) probe_stop: std::sync::atomic::AtomicBool,
    /// Its `VBE.<vcl>.<name>.*` counters, once the child has a segment.
    vbe: std::sync::OnceLock<Arc<VbeCounters>>,
}

/// A backend's counters in the segment's dynamic slots, freed when the
/// backend is (its program discarded, the last request on it finished).
pub struct VbeCounters {
    seg: Arc<SegmentWriter>,
    slots: Vec<Option<usize>>,
}

impl VbeCounters {
    fn register(seg: &Arc<SegmentWriter>, prefix: &str) -> VbeCounters {
        let slots: Vec<Option<usize>> = VBE.iter().map(|d| seg.register(&format!("{prefix}.{}", d.name), d)).collect();
        // Said once per process: backends made from DNS answers can run
        // out of slots by the thousand (the counters are missing from
        // cache-stat; the backends work).
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if slots.iter().any(Option::is_none) && !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "cache-d: no room in the segment for all of {prefix}.* (too many backends, or too long a name); said once, later backends without room are not reported"
            );
        }
        VbeCounters { seg: seg.clone(), slots }
    }

    fn add(&self, c: Vbe, v: u64) {
        if let Some(s) = self.slots[c as usize] {
            self.seg.add_slot(s, v);
        }
    }
}

impl Drop for VbeCounters {
    fn drop(&mut self) {
        for s in self.slots.iter().flatten() {
            self.seg.unregister(*s);
        }
    }
}

/// What a VCL backend declaration can set.
#[derive(Clone, Debug, Default)]
pub struct BackendCfg {
    pub connect_timeout: Option<Duration>,
    pub first_byte_timeout: Option<Duration>,
    pub between_bytes_timeout: Option<Duration>,
    pub max_connections: Option<usize>,
    /// Host header for requests that have none.
    pub host_header: Option<String>,
    pub probe: Option<crate::backend::health::ProbeSpec>,
    /// `.ssl = 1`: connections (and probes) speak TLS with these settings.
    pub ssl: Option<Arc<BeTls>>,
    /// `.path` (or `-b /path`): connections go to this Unix domain socket,
    /// not to the addresses.
    pub path: Option<std::path::PathBuf>,
    /// `.preamble`: bytes sent first on every new connection (before a
    /// TLS handshake), as Varnish's VCP_Open does; probes' too.
    pub preamble: Option<bytes::Bytes>,
}

fn cfg_probe_state(cfg: &BackendCfg) -> crate::backend::health::ProbeState {
    cfg.probe.as_ref().map(crate::backend::health::ProbeState::initial).unwrap_or_default()
}

/// A connection in use, counted against .max_connections (and in
/// `VBE.*.conn`) until dropped.
pub struct Slot(Arc<AtomicUsize>, Option<Arc<VbeCounters>>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        if let Some(v) = &self.1 {
            if let Some(s) = v.slots[Vbe::Conn as usize] {
                v.seg.sub_slot(s, 1);
            }
        }
    }
}

/// `backend.set_health`: follow probes (auto), or force healthy or sick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admin {
    Auto,
    Healthy,
    Sick,
}

impl Admin {
    pub fn parse(s: &str) -> Option<Admin> {
        match s {
            "auto" => Some(Admin::Auto),
            "healthy" => Some(Admin::Healthy),
            "sick" => Some(Admin::Sick),
            _ => None,
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            Admin::Auto => "probe",
            Admin::Healthy => "healthy",
            Admin::Sick => "sick",
        }
    }
}

/// Why a backend address could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("backend \"{0}\": {1}")]
    Lookup(String, std::io::Error),
    #[error("backend \"{0}\" resolves to no address")]
    NoAddress(String),
}

/// Idle connections to one endpoint.
pub struct IdlePool {
    conns: Mutex<Vec<(BeConn, Instant)>>,
    /// Until when new connections are not tried after a refused or
    /// unreachable one (Varnish's holddown, per endpoint).
    holddown: Mutex<Option<Instant>>,
}

/// backend_local_error_holddown and backend_remote_error_holddown, in
/// milliseconds (process-wide, as the parameters are).
static HOLDDOWN_MS: [AtomicU64; 2] = [AtomicU64::new(10_000), AtomicU64::new(250)];

/// Put the holddown parameters in force.
pub fn set_holddown(local: Duration, remote: Duration) {
    HOLDDOWN_MS[0].store(local.as_millis() as u64, Ordering::Relaxed);
    HOLDDOWN_MS[1].store(remote.as_millis() as u64, Ordering::Relaxed);
}

/// What a connect not tried for the holddown says (counted in `helddown`).
pub const HELD_DOWN: &str = "connect held down after a failed one (backend_*_error_holddown)";

/// Idle pools by addresses and TLS settings.
type Pools = Mutex<std::collections::HashMap<(Vec<SocketAddr>, String), std::sync::Weak<IdlePool>>>;

impl IdlePool {
    /// The pool for `addrs`: the one other backends to them use, else a
    /// new one (gone when its last backend is).
    fn for_endpoint(addrs: &[SocketAddr], tls: &str) -> Arc<IdlePool> {
        static POOLS: std::sync::OnceLock<Pools> = std::sync::OnceLock::new();
        let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|_, p| p.strong_count() > 0);
        let key = (addrs.to_vec(), tls.to_string());
        if let Some(p) = pools.get(&key).and_then(std::sync::Weak::upgrade) {
            return p;
        }
        let p = Arc::new(IdlePool { conns: Mutex::new(Vec::new()), holddown: Mutex::new(None) });
        pools.insert(key, Arc::downgrade(&p));
        p
    }
}

/// A VCL backend's `.host` and `.port` as one address for [`resolve`],
/// as Varnish's VSS_parse reads `.host`: a port in it ("name:81",
/// "[::1]:81") wins over `.port`; "[v6]" and a bare IPv6 address (more
/// than one ':') take `.port`.
pub fn host_port(host: &str, port: &str) -> String {
    match host.strip_prefix('[') {
        Some(rest) if rest.contains("]:") => host.to_string(),
        Some(_) => format!("{host}:{port}"),
        None if host.matches(':').count() == 1 => host.to_string(),
        None if host.contains(':') => format!("[{host}]:{port}"),
        None => format!("{host}:{port}"),
    }
}

/// Resolve `-b host[:port]` (port 8080 by default). An absolute path is a
/// Unix domain socket (as varnishd's `-b`): no addresses, the backend's
/// `path` says where.
pub fn resolve(spec: &str) -> Result<Vec<SocketAddr>, ResolveError> {
    if spec.starts_with('/') {
        return Ok(Vec::new());
    }
    let with_port = if spec.starts_with('[') {
        if spec.contains("]:") {
            spec.to_string()
        } else {
            format!("{spec}:8080")
        }
    } else if spec.matches(':').count() == 1 {
        spec.to_string()
    } else if spec.contains(':') {
        format!("[{spec}]:8080")
    } else {
        format!("{spec}:8080")
    };
    let addrs: Vec<SocketAddr> = with_port.to_socket_addrs().map_err(|e| ResolveError::Lookup(spec.to_string(), e))?.collect();
    if addrs.is_empty() {
        return Err(ResolveError::NoAddress(spec.to_string()));
    }
    Ok(addrs)
}

impl Backend {
    pub fn new(name: &str, addrs: Vec<SocketAddr>) -> Backend {
        Backend::with_cfg("boot", name, addrs, BackendCfg::default())
    }

    pub fn with_cfg(vcl: &str, name: &str, addrs: Vec<SocketAddr>, cfg: BackendCfg) -> Backend {
        let created = crate::util::now();
        // TLS connections are pooled apart from plain ones (and from
        // other TLS settings) to the same address; a socket's by its path;
        // and, as in Varnish, by the preamble the connection began with.
        let mut key = match (&cfg.path, &cfg.ssl) {
            (Some(p), _) => format!("unix {}", p.display()),
            (None, t) => t.as_ref().map(|t| t.pool_key()).unwrap_or_default(),
        };
        if let Some(p) = &cfg.preamble {
            key.push_str(&format!(" preamble {p:?}"));
        }
        let idle = IdlePool::for_endpoint(&addrs, &key);
        Backend {
            created,
            name: name.to_string(),
            vcl: vcl.to_string(),
            addrs,
            idle,
            admin: Mutex::new((Admin::Auto, created)),
            busy: Arc::new(AtomicUsize::new(0)),
            probe: Mutex::new(cfg_probe_state(&cfg)),
            probe_stop: std::sync::atomic::AtomicBool::new(false),
            vbe: std::sync::OnceLock::new(),
            cfg,
        }
    }

    /// The probe changed the health: a new "last change" time.
    pub fn changed(&self) {
        let mut a = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        a.1 = crate::util::now();
    }

    /// Make its `VBE.<vcl>.<name>.*` counters in `seg` (once).
    pub fn attach_counters(&self, seg: &Arc<SegmentWriter>) {
        self.vbe.get_or_init(|| Arc::new(VbeCounters::register(seg, &format!("VBE.{}", self.full_name()))));
    }

    /// Add to one of its counters (nothing before attach_counters).
    pub fn count(&self, c: Vbe, v: u64) {
        if let Some(x) = self.vbe.get() {
            x.add(c, v);
        }
    }

    /// Set its `happy` bitmap (the probe's last 64 results).
    pub fn set_happy(&self, bits: u64) {
        if let Some(x) = self.vbe.get() {
            if let Some(s) = x.slots[Vbe::Happy as usize] {
                x.seg.set_slot(s, bits);
            }
        }
    }

    /// A failed connect, counted under `fail` and its reason's `fail_*`.
    pub fn count_fail(&self, e: &Error) {
        if e.io.is_none() && e.what == HELD_DOWN {
            self.count(Vbe::Helddown, 1);
            return;
        }
        self.count(Vbe::Fail, 1);
        let io = e.io.as_ref();
        let why = match io.and_then(std::io::Error::raw_os_error) {
            Some(libc::EACCES | libc::EPERM) => Vbe::FailEacces,
            Some(libc::EADDRNOTAVAIL) => Vbe::FailEaddrnotavail,
            Some(libc::ECONNREFUSED) => Vbe::FailEconnrefused,
            Some(libc::ENETUNREACH) => Vbe::FailEnetunreach,
            Some(libc::ETIMEDOUT) => Vbe::FailEtimedout,
            _ if io.is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut) => Vbe::FailEtimedout,
            _ => Vbe::FailOther,
        };
        self.count(why, 1);
    }

    /// `vcl.name`, as backend.list shows it.
    pub fn full_name(&self) -> String {
        format!("{}.{}", self.vcl, self.name)
    }

    /// A slot for one more connection in use, unless .max_connections are
    /// all taken.
    pub fn slot(&self) -> Option<Slot> {
        let max = self.cfg.max_connections.unwrap_or(usize::MAX);
        let mut cur = self.busy.load(Ordering::Acquire);
        loop {
            if cur >= max {
                return None;
            }
            match self.busy.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let vbe = self.vbe.get().cloned();
                    if let Some(v) = &vbe {
                        v.add(Vbe::Conn, 1);
                    }
                    return Some(Slot(self.busy.clone(), vbe));
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Connections in use now.
    pub fn in_use(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }

    /// Admin health and the time it last changed.
    pub fn admin(&self) -> (Admin, f64) {
        *self.admin.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_admin(&self, a: Admin) {
        *self.admin.lock().unwrap_or_else(|e| e.into_inner()) = (a, crate::util::now());
    }

    /// An idle connection younger than `max_idle` that the backend has not
    /// closed (nor sent stray bytes on), if any.
    pub fn take_idle(&self, max_idle: Duration) -> Option<BeConn> {
        let mut idle = self.idle.conns.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((c, since)) = idle.pop() {
            if since.elapsed() >= max_idle {
                continue;
            }
            if c.io.alive() {
                return Some(c);
            }
            // EOF, error, or unexpected data: dropped.
        }
        None
    }

    /// Open a new connection within `timeout`, trying each address (with
    /// its TLS handshake for `.ssl = 1`, within the same time).
    pub async fn connect(&self, timeout: Duration) -> Result<BeConn, Error> {
        let held = self.idle.holddown.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|t| Instant::now() < t);
        if held {
            return Err(Error::new(Side::Backend, HELD_DOWN));
        }
        let mut last = None;
        if let Some(path) = &self.cfg.path {
            let open = async {
                let mut s = tokio::net::UnixStream::connect(path).await?;
                self.send_preamble(&mut s).await?;
                Ok::<_, std::io::Error>(s)
            };
            match tokio::time::timeout(timeout, open).await {
                Ok(Ok(s)) => return Ok(BufConn::new(BeStream::Unix(Box::new(s)))),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")),
            }
        }
        for a in &self.addrs {
            let open = async {
                let mut s = TcpStream::connect(a).await?;
                let _ = s.set_nodelay(true);
                self.send_preamble(&mut s).await?;
                match &self.cfg.ssl {
                    None => Ok(BeStream::Tcp(s)),
                    Some(tls) => tls.connect(s).await.map_err(|e| std::io::Error::new(e.kind(), format!("TLS handshake: {e}"))),
                }
            };
            match tokio::time::timeout(timeout, open).await {
                Ok(Ok(s)) => return Ok(BufConn::new(s)),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")),
            }
        }
        let last = last.unwrap_or_else(|| std::io::Error::other("no address"));
        let hold = match last.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EADDRNOTAVAIL) => HOLDDOWN_MS[0].load(Ordering::Relaxed),
            Some(libc::ECONNREFUSED | libc::ENETUNREACH) => HOLDDOWN_MS[1].load(Ordering::Relaxed),
            _ => 0,
        };
        if hold > 0 {
            *self.idle.holddown.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + Duration::from_millis(hold));
        }
        Err(Error::io(Side::Backend, "connect", last))
    }

    /// The backend's .preamble, if it has one, on a new connection.
    async fn send_preamble<S: tokio::io::AsyncWrite + Unpin>(&self, s: &mut S) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        match &self.cfg.preamble {
            Some(p) => s.write_all(p).await,
            None => Ok(()),
        }
    }

    /// Close the idle connections older than `max_idle`.
    pub fn reap_idle(&self, max_idle: Duration) {
        let mut idle = self.idle.conns.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|(_, since)| since.elapsed() < max_idle);
    }

    /// Return a connection whose last response was read completely.
    pub fn recycle(&self, c: BeConn) {
        if !c.buf.is_empty() {
            return; // Stray bytes after a response: not safe to reuse.
        }
        let mut idle = self.idle.conns.lock().unwrap_or_else(|e| e.into_inner());
        idle.push((c, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::{host_port, resolve};

    #[test]
    fn vcl_host_and_port() {
        assert_eq!(host_port("127.0.0.1", "81"), "127.0.0.1:81");
        assert_eq!(host_port("127.0.0.1:82", "80"), "127.0.0.1:82");
        assert_eq!(host_port("[::]", "80"), "[::]:80");
        assert_eq!(host_port("[::1]:83", "80"), "[::1]:83");
        assert_eq!(host_port("::1", "84"), "[::1]:84");
        assert_eq!(resolve(&host_port("[::]", "80")).unwrap()[0].port(), 80);
    }

    #[test]
    fn backend_specs() {
        assert_eq!(resolve("127.0.0.1").unwrap()[0].port(), 8080);
        assert_eq!(resolve("127.0.0.1:81").unwrap()[0].port(), 81);
        assert_eq!(resolve("[::1]:82").unwrap()[0].port(), 82);
        assert_eq!(resolve("::1").unwrap()[0].port(), 8080);
        assert!(resolve("127.0.0.1:notaport").is_err());
        assert!(resolve("/run/app.sock").unwrap().is_empty(), "a path is a Unix socket: no addresses");
    }

    #[tokio::test]
    async fn preamble_goes_first_on_each_new_connection() {
        use tokio::io::AsyncReadExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cfg = super::BackendCfg { preamble: Some(bytes::Bytes::from_static(b"PRE\n")), ..Default::default() };
        let be = super::Backend::with_cfg("t", "b", vec![l.local_addr().unwrap()], cfg);
        for _ in 0..2 {
            let _c = be.connect(std::time::Duration::from_secs(5)).await.unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"PRE\n");
        }
    }
}
