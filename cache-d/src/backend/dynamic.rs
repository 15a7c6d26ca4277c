//! Dynamic backends, with libvmod-dynamic's interface: a director whose
//! `.backend("name")` stands for every address the name resolves to. Each
//! name asked for (a *domain*, `d(name:port)`) gets a lookup thread that
//! re-resolves it every ttl; each address is a real backend (its own
//! pool, probe and `VBE.<vcl>.d(addr:port).*` counters), added and
//! removed without a reload. When a lookup fails, the last good answer
//! stays; an address missing from `keep` answers in a row is removed.
//! Requests pick the domain's healthy addresses in turn.
//!
//! Bounds (a name can come from a request's Host header, an answer from
//! whoever serves the name): a director holds at most `max` names (the
//! caller's; a new one past it evicts the least recently used), with at
//! most as many evicted ones still finishing a lookup; one answer gives a
//! name at most [`MAX_ADDRS`] addresses.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common::log::vsl::{Batch, Side, Tag};
use common::resolve::{Answer, Resolver};
use common::segment::SegmentWriter;

use crate::backend::pool::{Backend, BackendCfg};
use crate::backend::probe;

/// The most addresses one answer gives a name, and the most it keeps
/// from earlier answers (`keep`) beside them. Each address is a backend
/// with 20 counters in the segment's 4,096 dynamic slots, a pool and a
/// probe: 4,000 addresses from one answer (a DNS answer over TCP can
/// carry that many) would take every slot and leave the other backends
/// without counters. Past it, the addresses the name has already come
/// first (so an answer in another order changes nothing), then the
/// answer's order; one Error record says how many were dropped.
pub const MAX_ADDRS: usize = 64;

/// Where a domain's re-resolution interval comes from (`ttl_from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlFrom {
    Cfg,
    Dns,
    Min,
    Max,
}

/// An address filter (the `whitelist` ACL).
pub type Whitelist = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// What `dynamic.director(...)` was given.
#[derive(Clone)]
pub struct DynamicSpec {
    pub port: String,
    /// The port as a number (`http` is 80, `https` 443).
    pub port_num: u16,
    pub ttl: Duration,
    pub ttl_from: TtlFrom,
    pub retry_after: Duration,
    /// Answers an address may be missing from before it is removed.
    pub keep: u32,
    pub domain_usage_timeout: Duration,
    pub first_lookup_timeout: Duration,
    /// share = HOST: backends per name (Host header and probes carry the
    /// name); else per director and address.
    pub share_host: bool,
    pub whitelist: Option<Whitelist>,
    /// The backends' settings (timeouts, max_connections, host_header,
    /// probe).
    pub cfg: BackendCfg,
}

impl Default for DynamicSpec {
    fn default() -> DynamicSpec {
        // libvmod-dynamic's defaults.
        DynamicSpec {
            port: "http".into(),
            port_num: 80,
            ttl: Duration::from_secs(3600),
            ttl_from: TtlFrom::Cfg,
            retry_after: Duration::from_secs(30),
            keep: 3,
            domain_usage_timeout: Duration::from_secs(7200),
            first_lookup_timeout: Duration::from_secs(10),
            share_host: false,
            whitelist: None,
            cfg: BackendCfg::default(),
        }
    }
}

pub struct Dynamic {
    /// The VCL object's name.
    pub name: String,
    /// The program's name (backends are `VBE.<vcl>.<name>`).
    vcl: String,
    spec: DynamicSpec,
    resolver: Resolver,
    inner: Mutex<Inner>,
    seg: OnceLock<Arc<SegmentWriter>>,
    /// Lookups run (the child started the program; the manager and
    /// `cache-d -C` only compile it, and look nothing up).
    running: AtomicBool,
    stopped: AtomicBool,
    debug: AtomicBool,
    /// Lookup threads running, those of evicted names still finishing
    /// a lookup included.
    threads: AtomicUsize,
}

#[derive(Default)]
struct Inner {
    /// By `name:port`.
    domains: HashMap<String, Arc<Domain>>,
    /// Every backend of every domain, by name (shared between domains
    /// that resolve to the same address, unless share = HOST).
    backends: HashMap<String, Arc<Backend>>,
}

/// One name the director was asked for, and the backends it resolved to.
pub struct Domain {
    /// `d(name:port)`, as requests and logs name it.
    pub name: String,
    host: String,
    /// The port its addresses are backends on.
    port: u16,
    refs: Mutex<Vec<Ref>>,
    next: AtomicUsize,
    /// When a request last asked for it (ms since the epoch).
    used: AtomicU64,
    state: Mutex<DomState>,
    cond: Condvar,
}

struct Ref {
    be: Arc<Backend>,
    /// Answers in a row without this address.
    missed: u32,
}

#[derive(Default)]
struct DomState {
    /// The first lookup is done (whatever its outcome).
    looked_up: bool,
    stop: bool,
}

fn now_ms() -> u64 {
    (crate::util::now() * 1000.0) as u64
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `f`, which may block, without stalling the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Dynamic {
    pub fn new(vcl: &str, name: &str, spec: DynamicSpec, resolver: Resolver) -> Arc<Dynamic> {
        Arc::new(Dynamic {
            name: name.to_string(),
            vcl: vcl.to_string(),
            spec,
            resolver,
            inner: Mutex::new(Inner::default()),
            seg: OnceLock::new(),
            running: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            debug: AtomicBool::new(false),
            threads: AtomicUsize::new(0),
        })
    }

    /// `.debug(BOOL)`: log Debug records of the background work.
    pub fn set_debug(&self, on: bool) {
        self.debug.store(on, Ordering::Relaxed);
    }

    /// The domain for `host` (and `port`, the director's if empty), made
    /// and its lookups started on first use; marked used now. With `max`
    /// domains already, the least recently used one is dropped (its
    /// backends with it; a request that named it and has not picked yet
    /// finds no backend). None while `max` lookup threads of dropped
    /// domains are still running (a lookup cannot be cut short): names
    /// from requests then wait for those lookups to end.
    pub fn domain(self: &Arc<Self>, host: &str, port: &str, max: usize) -> Option<Arc<Domain>> {
        let port = if port.is_empty() { self.spec.port.as_str() } else { port };
        let key = format!("{host}:{port}");
        let mut inner = lock(&self.inner);
        if let Some(d) = inner.domains.get(&key) {
            d.used.store(now_ms(), Ordering::Relaxed);
            return Some(d.clone());
        }
        if inner.domains.len() >= max {
            if self.threads.load(Ordering::SeqCst) >= 2 * max {
                return None;
            }
            let lru = inner.domains.values().min_by_key(|d| d.used.load(Ordering::Relaxed)).cloned();
            if let Some(old) = lru {
                self.log(Tag::VclLog, &old, &format!("evicted (least recently used of {max})"));
                self.drop_domain(&mut inner, &old);
            }
        }
        let dom = Arc::new(Domain {
            name: format!("{}({key})", self.name),
            host: host.to_string(),
            port: port_number(port).unwrap_or(self.spec.port_num),
            refs: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            used: AtomicU64::new(now_ms()),
            state: Mutex::new(DomState::default()),
            cond: Condvar::new(),
        });
        inner.domains.insert(key, dom.clone());
        if self.running.load(Ordering::SeqCst) {
            self.spawn(&dom);
        }
        Some(dom)
    }

    /// Start looking names up: those asked for so far (in vcl_init) and
    /// those asked for from now on.
    pub fn run(self: &Arc<Self>) {
        let inner = lock(&self.inner);
        if !self.running.swap(true, Ordering::SeqCst) {
            for dom in inner.domains.values() {
                self.spawn(dom);
            }
        }
    }

    fn spawn(self: &Arc<Self>, dom: &Arc<Domain>) {
        let (me, d) = (self.clone(), dom.clone());
        self.threads.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new().name(format!("dynamic-{}", self.name)).spawn(move || {
            me.lookups(&d);
            me.threads.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            self.threads.fetch_sub(1, Ordering::SeqCst);
            self.log(Tag::Error, dom, &format!("no lookup thread: {e}"));
            dom.finish_first();
        }
    }

    /// The domain a request names (`d(name:port)`), if this director has it.
    pub fn find(&self, domain: &str) -> Option<Arc<Domain>> {
        let key = domain.strip_prefix(self.name.as_str())?.strip_prefix('(')?.strip_suffix(')')?;
        lock(&self.inner).domains.get(key).cloned()
    }

    /// A backend of `domain` for a request: the next healthy one in turn;
    /// with none healthy, any (`healthy_only` false) so the fetch fails as
    /// "unhealthy". A domain whose first lookup is still running is waited
    /// for, up to first_lookup_timeout.
    pub fn pick(&self, dom: &Domain, healthy_only: bool) -> Option<Arc<Backend>> {
        if !lock(&dom.state).looked_up {
            blocking(|| dom.wait_first(self.spec.first_lookup_timeout));
        }
        dom.pick(healthy_only)
    }

    /// Every backend now, by name.
    pub fn backends(&self) -> Vec<Arc<Backend>> {
        let inner = lock(&self.inner);
        let mut all: Vec<Arc<Backend>> = inner.backends.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The child's segment: lookups start, with counters and probes for
    /// the backends they make.
    pub fn attach(self: &Arc<Self>, seg: &Arc<SegmentWriter>) {
        let _ = self.seg.set(seg.clone());
        self.run();
    }

    /// The program is discarded: lookups and probes stop.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let inner = lock(&self.inner);
        for d in inner.domains.values() {
            lock(&d.state).stop = true;
            d.cond.notify_all();
        }
        for b in inner.backends.values() {
            b.stop_probe();
        }
    }

    /// A domain's lookup thread: resolve, update, wait the ttl (or
    /// retry_after after a failure); until the program is discarded or no
    /// request asked for the domain for domain_usage_timeout.
    fn lookups(&self, dom: &Arc<Domain>) {
        let port = dom.port;
        let first = crate::util::now();
        let mut prev = first;
        loop {
            if self.stopped.load(Ordering::SeqCst) || lock(&dom.state).stop {
                break;
            }
            let idle = now_ms().saturating_sub(dom.used.load(Ordering::Relaxed));
            if Duration::from_millis(idle) > self.spec.domain_usage_timeout {
                self.log(Tag::VclLog, dom, "timeout");
                self.remove_domain(dom);
                break;
            }
            let start = crate::util::now();
            self.stamp(dom, "Lookup", start, start - first, start - prev);
            let answer = self.resolver.lookup(&dom.host, port);
            let done = crate::util::now();
            self.stamp(dom, "Results", done, done - first, done - start);
            let wait = match answer {
                Ok(a) => {
                    let wait = self.ttl(&a);
                    if self.debug.load(Ordering::Relaxed) {
                        let addrs: Vec<String> = a.addrs.iter().map(|ip| ip.to_string()).collect();
                        let ttl = a.ttl.map_or_else(|| "none".to_string(), |t| format!("{:.0}s", t.as_secs_f64()));
                        let next = wait.as_secs_f64();
                        self.log(Tag::Debug, dom, &format!("lookup: {} (dns ttl {ttl}, next in {next:.0}s)", addrs.join(" ")));
                    }
                    self.update(dom, &a);
                    wait
                }
                Err(e) => {
                    // The last good answer stays.
                    self.log(Tag::Error, dom, &e.to_string());
                    self.spec.retry_after
                }
            };
            prev = crate::util::now();
            self.stamp(dom, "Update", prev, prev - first, prev - done);
            dom.finish_first();
            dom.sleep(wait);
        }
        self.stamp(dom, "Done", crate::util::now(), 0.0, 0.0);
    }

    /// How long until the next lookup, by ttl_from.
    fn ttl(&self, a: &Answer) -> Duration {
        let cfg = self.spec.ttl;
        let Some(dns) = a.ttl else { return cfg };
        match self.spec.ttl_from {
            TtlFrom::Cfg => cfg,
            TtlFrom::Dns => dns,
            TtlFrom::Min => cfg.min(dns),
            TtlFrom::Max => cfg.max(dns),
        }
        .max(Duration::from_millis(100))
    }

    /// Apply an answer: new addresses become backends (at most
    /// [`MAX_ADDRS`]), addresses missing from more than `keep` answers in
    /// a row are removed.
    fn update(&self, dom: &Domain, a: &Answer) {
        let port = dom.port;
        let mut addrs: Vec<SocketAddr> = Vec::new();
        let mut seen = HashSet::new();
        for ip in &a.addrs {
            if self.spec.whitelist.as_ref().is_some_and(|w| !w(*ip)) {
                self.log(Tag::Error, dom, &format!("whitelist mismatch {ip}:{port}"));
                continue;
            }
            if seen.insert(*ip) {
                addrs.push(SocketAddr::new(*ip, port));
            }
        }
        let mut inner = lock(&self.inner);
        // A domain dropped while it was being looked up makes no backends.
        if lock(&dom.state).stop {
            return;
        }
        let mut refs = lock(&dom.refs);
        if addrs.len() > MAX_ADDRS {
            let had: HashSet<SocketAddr> = refs.iter().filter_map(|r| r.be.addrs.first().copied()).collect();
            // Stable: those it has first, then in the answer's order.
            addrs.sort_by_key(|sa| !had.contains(sa));
            let (all, dropped) = (addrs.len(), addrs.len() - MAX_ADDRS);
            addrs.truncate(MAX_ADDRS);
            self.log(Tag::Error, dom, &format!("{dropped} of {all} addresses dropped (at most {MAX_ADDRS} from one answer)"));
        }
        for r in refs.iter_mut() {
            let there = r.be.addrs.first().is_some_and(|x| addrs.contains(x));
            r.missed = if there { 0 } else { r.missed.saturating_add(1) };
        }
        for sa in addrs {
            if refs.iter().any(|r| r.be.addrs.first() == Some(&sa)) {
                continue;
            }
            let be = self.backend_for(&mut inner, dom, sa);
            refs.push(Ref { be, missed: 0 });
        }
        let (mut keep, mut gone): (Vec<Ref>, Vec<Ref>) = std::mem::take(&mut *refs).into_iter().partition(|r| r.missed <= self.spec.keep);
        // Of the addresses kept from earlier answers, at most MAX_ADDRS
        // (those missing longest go first).
        keep.sort_by_key(|r| r.missed);
        let stale = keep.iter().filter(|r| r.missed > 0).count();
        if stale > MAX_ADDRS {
            gone.extend(keep.drain(keep.len() - (stale - MAX_ADDRS)..));
        }
        *refs = keep;
        drop(refs);
        for r in gone {
            self.release(&mut inner, dom, &r.be);
        }
    }

    /// The backend for address `sa`: the director's (or, with share =
    /// HOST, the domain's) if there is one, else a new one, probed.
    fn backend_for(&self, inner: &mut Inner, dom: &Domain, sa: SocketAddr) -> Arc<Backend> {
        let (ip, port) = (sa.ip(), sa.port());
        let name =
            if self.spec.share_host { format!("{}.{}({ip}:{port})", self.name, dom.host) } else { format!("{}({ip}:{port})", self.name) };
        if let Some(b) = inner.backends.get(&name) {
            return b.clone();
        }
        let mut cfg = self.spec.cfg.clone();
        if self.spec.share_host && cfg.host_header.is_none() {
            cfg.host_header = Some(dom.host.clone());
        }
        let be = Arc::new(Backend::with_cfg(&self.vcl, &name, vec![sa], cfg));
        if let Some(seg) = self.seg.get() {
            probe::start(&be, seg.clone());
        }
        self.log(Tag::VclLog, dom, &format!("new-backend {name}"));
        inner.backends.insert(name, be.clone());
        be
    }

    /// `be` left `dom`: gone when no other domain resolves to it.
    fn release(&self, inner: &mut Inner, dom: &Domain, be: &Arc<Backend>) {
        let elsewhere = inner
            .domains
            .values()
            .filter(|d| !std::ptr::eq(Arc::as_ptr(d), dom))
            .any(|d| lock(&d.refs).iter().any(|r| Arc::ptr_eq(&r.be, be)));
        if elsewhere {
            return;
        }
        inner.backends.remove(&be.name);
        be.stop_probe();
        self.log(Tag::VclLog, dom, &format!("delete-backend {}", be.name));
    }

    /// A domain unused for domain_usage_timeout: dropped with its backends.
    fn remove_domain(&self, dom: &Arc<Domain>) {
        let mut inner = lock(&self.inner);
        self.drop_domain(&mut inner, dom);
    }

    /// Drop a domain: out of the table, its backends released, its lookup
    /// thread told to stop (it ends after the lookup it may be in).
    fn drop_domain(&self, inner: &mut Inner, dom: &Arc<Domain>) {
        inner.domains.retain(|_, d| !Arc::ptr_eq(d, dom));
        lock(&dom.state).stop = true;
        dom.cond.notify_all();
        let refs = std::mem::take(&mut *lock(&dom.refs));
        for r in refs {
            self.release(inner, dom, &r.be);
        }
    }

    /// A record outside any transaction, as libvmod-dynamic writes them:
    /// `vmod-dynamic <vcl> <director> <name>:<port> <event>`.
    fn log(&self, tag: Tag, dom: &Domain, event: &str) {
        if tag == Tag::Debug && !self.debug.load(Ordering::Relaxed) {
            return;
        }
        let Some(seg) = self.seg.get() else { return };
        let at = dom.name.strip_prefix(self.name.as_str()).unwrap_or(&dom.name).trim_start_matches('(').trim_end_matches(')');
        let text = format!("vmod-dynamic {} {} {at} {event}", self.vcl, self.name);
        let mut b = Batch::new();
        b.rec(tag, Side::None, 0, text.as_bytes());
        seg.log(&b);
    }

    /// A lookup's Timestamp record (`vmod-dynamic <vcl>.<domain> <event>`).
    fn stamp(&self, dom: &Domain, event: &str, at: f64, since_first: f64, since_prev: f64) {
        let Some(seg) = self.seg.get() else { return };
        let text = format!("vmod-dynamic {}.{} {event}: {at:.6} {since_first:.6} {since_prev:.6}", self.vcl, dom.name);
        let mut b = Batch::new();
        b.rec(Tag::Timestamp, Side::None, 0, text.as_bytes());
        seg.log(&b);
    }
}

impl Domain {
    /// The next healthy backend in turn among the addresses of the last
    /// answer (with none healthy and `healthy_only` false, the next one).
    /// Addresses kept from earlier answers (`keep`) take no requests.
    fn pick(&self, healthy_only: bool) -> Option<Arc<Backend>> {
        let refs = lock(&self.refs);
        let live: Vec<&Arc<Backend>> = refs.iter().filter(|r| r.missed == 0).map(|r| &r.be).collect();
        let n = live.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let found = (0..n).map(|i| live[(start + i) % n]).find(|b| b.healthy());
        found.or_else(|| (!healthy_only).then(|| live[start % n])).cloned()
    }

    /// Can one of its backends take a request now?
    pub fn usable(&self) -> bool {
        lock(&self.refs).iter().any(|r| r.missed == 0 && r.be.healthy())
    }

    /// The addresses of the last answer, and those kept from earlier ones.
    pub fn addrs(&self) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        let refs = lock(&self.refs);
        let of = |kept: bool| refs.iter().filter(|r| (r.missed > 0) == kept).filter_map(|r| r.be.addrs.first().copied()).collect();
        (of(false), of(true))
    }

    fn finish_first(&self) {
        lock(&self.state).looked_up = true;
        self.cond.notify_all();
    }

    fn wait_first(&self, timeout: Duration) {
        let until = Instant::now() + timeout;
        let mut st = lock(&self.state);
        while !st.looked_up && !st.stop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st = self.cond.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Sleep `d`, waking when the program is discarded.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut st = lock(&self.state);
        while !st.stop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st = self.cond.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// A port as the director takes it: a number, or `http` / `https`.
pub fn port_number(port: &str) -> Option<u16> {
    match port {
        "http" => Some(80),
        "https" => Some(443),
        p => p.parse().ok().filter(|n| *n > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_resolves_and_picks_in_turn() {
        let spec = DynamicSpec { port: "8080".into(), port_num: 8080, ..DynamicSpec::default() };
        let d = Dynamic::new("boot", "d", spec, Resolver::System);
        let dom = d.domain("127.0.0.9", "", 8).unwrap();
        d.run();
        assert_eq!(dom.name, "d(127.0.0.9:8080)");
        let be = d.pick(&dom, true).expect("resolved within the first lookup timeout");
        assert_eq!(be.name, "d(127.0.0.9:8080)");
        assert_eq!(be.full_name(), "boot.d(127.0.0.9:8080)");
        assert!(Arc::ptr_eq(&d.find("d(127.0.0.9:8080)").unwrap(), &dom));
        assert!(d.find("e(127.0.0.9:8080)").is_none());
        // The same address through another name is the same backend.
        let other = d.domain("127.0.0.9", "8080", 8).unwrap();
        assert!(Arc::ptr_eq(&other, &dom), "same name and port: same domain");
        assert_eq!(d.backends().len(), 1);
        assert_eq!(port_number("http"), Some(80));
        assert_eq!(port_number("0"), None);
        d.stop();
    }

    #[test]
    fn keep_counts_answers_before_an_address_goes() {
        let spec = DynamicSpec { keep: 1, ttl: Duration::from_secs(3600), ..DynamicSpec::default() };
        let d = Dynamic::new("boot", "d", spec, Resolver::System);
        let dom = d.domain("127.0.0.10", "81", 8).unwrap();
        d.run();
        d.pick(&dom, true);
        let a = |ips: &[&str]| Answer { addrs: ips.iter().map(|i| i.parse().unwrap()).collect(), ttl: None };
        let (ten, eleven): (SocketAddr, SocketAddr) = ("127.0.0.10:81".parse().unwrap(), "127.0.0.11:81".parse().unwrap());
        d.update(&dom, &a(&["127.0.0.10", "127.0.0.11"]));
        assert_eq!(dom.addrs(), (vec![ten, eleven], vec![]));
        d.update(&dom, &a(&["127.0.0.11"]));
        assert_eq!(dom.addrs(), (vec![eleven], vec![ten]), "missing once: kept (keep = 1), but takes no request");
        assert!((0..4).all(|_| dom.pick(true).unwrap().addrs == [eleven]));
        d.update(&dom, &a(&["127.0.0.11"]));
        assert_eq!(dom.addrs(), (vec![eleven], vec![]));
        assert_eq!(d.backends().len(), 1, "the removed address's backend is gone");
        d.stop();
    }

    #[test]
    fn a_full_table_drops_the_least_recently_used_name() {
        let d = Dynamic::new("boot", "d", DynamicSpec::default(), Resolver::System);
        let a = d.domain("a.test", "", 2).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        d.domain("b.test", "", 2).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(Arc::ptr_eq(&d.domain("a.test", "", 2).unwrap(), &a), "a is used again: b is the oldest now");
        d.domain("c.test", "", 2).expect("a slot for a new name");
        assert!(d.find("d(a.test:http)").is_some());
        assert!(d.find("d(b.test:http)").is_none(), "the least recently used went");
        assert!(d.find("d(c.test:http)").is_some());
        d.stop();
    }

    #[test]
    fn one_answer_gives_a_name_at_most_max_addrs() {
        let d = Dynamic::new("boot", "d", DynamicSpec::default(), Resolver::System);
        let dom = d.domain("many.test", "80", 8).unwrap();
        let ips: Vec<IpAddr> = (0..4000u32).map(|i| IpAddr::V4((0x0a00_0000 + i).into())).collect();
        d.update(&dom, &Answer { addrs: ips.clone(), ttl: None });
        let (live, kept) = dom.addrs();
        assert_eq!((live.len(), kept.len()), (MAX_ADDRS, 0));
        assert_eq!(live[0].ip(), ips[0], "the answer's order");
        // The same answer in another order: the same addresses.
        let first = live.clone();
        d.update(&dom, &Answer { addrs: ips.iter().rev().copied().collect(), ttl: None });
        assert_eq!(dom.addrs().0, first);
        // A wholly new answer: MAX_ADDRS new ones, and the old ones kept
        // (keep = 3) at most MAX_ADDRS.
        let other: Vec<IpAddr> = (0..4000u32).map(|i| IpAddr::V4((0x0b00_0000 + i).into())).collect();
        d.update(&dom, &Answer { addrs: other, ttl: None });
        let (live, kept) = dom.addrs();
        assert_eq!((live.len(), kept.len()), (MAX_ADDRS, MAX_ADDRS));
        assert_eq!(d.backends().len(), 2 * MAX_ADDRS);
        // And another: of the 128 kept, those missing longest go.
        let third: Vec<IpAddr> = (0..100u32).map(|i| IpAddr::V4((0x0c00_0000 + i).into())).collect();
        d.update(&dom, &Answer { addrs: third, ttl: None });
        let (live, kept) = dom.addrs();
        assert_eq!((live.len(), kept.len()), (MAX_ADDRS, MAX_ADDRS));
        assert!(kept.iter().all(|a| matches!(a.ip(), IpAddr::V4(v4) if v4.octets()[0] == 0x0b)), "the second answer's are kept");
        d.stop();
    }
}
