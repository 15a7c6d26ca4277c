//! What every connection of the child shares: the segment, parameters,
//! the default backend, the cache, the active policy and the transaction
//! ids (mini-redis keeps its `Db` apart from its `Listener` the same way).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use common::segment::SegmentWriter;

use crate::backend::pool::Backend;
use crate::cache::Cache;
use crate::params::Params;
use crate::vcl::policy::{Builtin, Policy};

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
    /// VCL labels, for vcl_recv's `return (vcl(LABEL))`: the program each
    /// names, as used through it (its VCL_use says `<program> via <label>`).
    labels: std::sync::RwLock<std::collections::HashMap<String, Arc<Active>>>,
    /// Our Via value: `1.1 <host> (cachekit/<version>)`.
    pub via: bytes::Bytes,
    vxid: AtomicU32,
    /// `debug.panic.request`: the next request's task panics (to test that
    /// such a panic fails that request alone).
    pub debug_panic_request: std::sync::atomic::AtomicBool,
    /// Certificates and the server configuration of `https` listeners.
    pub tls: crate::tls::Tls,
    /// The https listeners that have QUIC beside them (their responses
    /// over TCP advertise it while feature http3 is on).
    quic: std::sync::RwLock<Vec<Arc<str>>>,
}

impl Shared {
    /// With the default store (`-s malloc,100M`).
    pub fn new(seg: Arc<SegmentWriter>, params: Params, backend: Backend) -> Shared {
        let cache = Cache::new(100 << 20, Some(seg.clone()));
        Shared::with_cache(seg, params, backend, cache)
    }

    pub fn with_cache(seg: Arc<SegmentWriter>, params: Params, backend: Backend, cache: Cache) -> Shared {
        let via = format!("1.1 {} (cachekit/{})", crate::util::hostname(), env!("CARGO_PKG_VERSION")).into();
        cache.set_gzip_support(params.http_gzip_support);
        cache.set_rfc9111(params.rfc9111());
        cache.set_nuke_limit(params.nuke_limit);
        crate::backend::pool::set_holddown(params.backend_local_error_holddown, params.backend_remote_error_holddown);
        let policy = ArcSwap::from_pointee(Active { name: "boot".into(), policy: Arc::new(Builtin) });
        Shared {
            seg,
            params: ArcSwap::from_pointee(params),
            backend: Arc::new(backend),
            cache,
            policy,
            labels: Default::default(),
            via,
            vxid: AtomicU32::new(1),
            debug_panic_request: Default::default(),
            tls: crate::tls::Tls::new(),
            quic: Default::default(),
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

    /// The program a label names now (None: no such label).
    pub fn label(&self, name: &str) -> Option<Arc<Active>> {
        self.labels.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Are there labels (a request may then switch programs)?
    pub fn has_labels(&self) -> bool {
        !self.labels.read().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Point a label at a program (vcl.label), or drop it (None).
    pub fn set_label(&self, name: &str, to: Option<Arc<Active>>) {
        let mut l = self.labels.write().unwrap_or_else(|e| e.into_inner());
        match to {
            Some(a) => l.insert(name.to_string(), a),
            None => l.remove(name),
        };
    }

    /// The parameters in force (cheap: an atomic load). Not to be held
    /// across an await where many tasks may wait: each thread has a few
    /// slots for such guards, and once they are all taken every load on
    /// that thread goes the slow way; hold `params_arc` there.
    pub fn params(&self) -> arc_swap::Guard<Arc<Params>> {
        self.params.load()
    }

    /// The parameters in force, to keep across awaits (a reference count).
    pub fn params_arc(&self) -> Arc<Params> {
        self.params.load_full()
    }

    /// Listener `name` serves QUIC too.
    pub fn note_quic(&self, name: &Arc<str>) {
        self.quic.write().unwrap_or_else(|e| e.into_inner()).push(name.clone());
    }

    /// Does listener `name` serve QUIC too?
    pub fn has_quic(&self, name: &str) -> bool {
        self.quic.read().unwrap_or_else(|e| e.into_inner()).iter().any(|n| &**n == name)
    }

    /// A transaction's log buffer, with the record limit and the tags
    /// left out that the parameters now say (vsl_reclen, vsl_mask).
    pub fn batch(&self) -> common::log::vsl::Batch {
        let p = self.params();
        common::log::vsl::Batch::with_limits(p.vsl_reclen, p.vsl_mask)
    }

    /// Put new parameters in force for requests that start from now on.
    pub fn set_params(&self, p: Params) {
        self.cache.set_gzip_support(p.http_gzip_support);
        self.cache.set_rfc9111(p.rfc9111());
        self.cache.set_nuke_limit(p.nuke_limit);
        crate::backend::pool::set_holddown(p.backend_local_error_holddown, p.backend_remote_error_holddown);
        self.params.store(Arc::new(p));
    }

    /// A new transaction id (30 bits, never 0).
    pub fn next_vxid(&self) -> u32 {
        loop {
            let v = self.vxid.fetch_add(1, Ordering::Relaxed) & common::log::vsl::VXID_MASK;
            if v != 0 {
                return v;
            }
        }
    }
}

/// What a policy may ask of the engine: backend health, bans.
impl crate::vcl::model::Env for Shared {
    fn healthy(&self, _backend: Option<&str>) -> bool {
        // One backend until directors land: every name is the default one.
        self.backend.healthy()
    }
    fn ban(&self, spec: &str) -> Result<(), String> {
        let args = crate::cache::ban::expr::vcl_args(spec)?;
        self.cache.ban(&args, crate::util::now(), self.params().ban_dups).map(|_| ()).map_err(|e| e.to_string())
    }
    fn xkey_purge(&self, keys: &str, soft: bool) -> i64 {
        self.cache.xkey_purge(keys.as_bytes(), soft, crate::util::now()) as i64
    }
    fn storage_space(&self, name: &str) -> Option<(u64, u64)> {
        self.cache.space(name)
    }
    fn validate_headers(&self) -> bool {
        self.params().has_feature("validate_headers")
    }
    fn rfc9111(&self) -> bool {
        self.params().rfc9111()
    }
    fn purge_hash(&self, hash: &[u8], soft: Option<(f64, Option<f64>, Option<f64>)>) -> i64 {
        let n = match soft {
            Some((ttl, grace, keep)) => self.cache.soft_purge(hash, crate::util::now(), ttl, grace, keep),
            None => self.cache.purge(hash),
        };
        // As Varnish's vmod_purge counts them.
        self.seg.add(common::counters::C::NPurges, 1);
        self.seg.add(common::counters::C::NObjPurged, n as u64);
        n as i64
    }
}

/// The active policy and its name (for VCL_use records and vcl.list).
pub struct Active {
    pub name: String,
    pub policy: Arc<dyn Policy>,
}
