//! A compiled program and what compiling works with: run-time values,
//! the closures statements and expressions become, ACLs, the scope an
//! expression is compiled in, and running a subroutine's statements.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use common::log::vsl::Tag;

use crate::vcl::ast::Expr;
use crate::vcl::compile::decls::BackendSpec;
use crate::vcl::diag::VclError;
use crate::vcl::model::{Action, Sub, Task};

/// A value at run time.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Str(String),
    Bool(bool),
    Int(i64),
    Real(f64),
    Dur(f64),
    Bytes(u64),
    /// Seconds since the epoch.
    Time(f64),
    Ip(IpAddr, u16),
    Backend(String),
    /// An unset header or variable.
    None,
}

impl Val {
    pub fn text(&self) -> String {
        match self {
            Val::Str(s) => s.clone(),
            Val::Bool(b) => b.to_string(),
            Val::Int(i) => i.to_string(),
            Val::Real(d) | Val::Dur(d) => format!("{d:.3}"),
            Val::Bytes(b) => b.to_string(),
            Val::Time(t) => common::httpdate::format(*t),
            Val::Ip(ip, _) => ip.to_string(),
            Val::Backend(b) => b.clone(),
            Val::None => String::new(),
        }
    }
    /// In a boolean context: a string (header) is true when it is set.
    pub(super) fn truthy(&self) -> bool {
        match self {
            Val::Bool(b) => *b,
            Val::Int(i) => *i != 0,
            Val::Real(d) | Val::Dur(d) => *d != 0.0,
            Val::Bytes(b) => *b != 0,
            Val::None => false,
            _ => true,
        }
    }
    pub(super) fn num(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Real(d) | Val::Dur(d) | Val::Time(d) => Some(*d),
            Val::Bytes(b) => Some(*b as f64),
            Val::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
    pub(super) fn is_numeric(&self) -> bool {
        matches!(self, Val::Int(_) | Val::Real(_) | Val::Dur(_) | Val::Bytes(_) | Val::Time(_))
    }
    pub(super) fn ip(&self) -> Option<IpAddr> {
        match self {
            Val::Ip(ip, _) => Some(*ip),
            Val::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

pub(super) enum Flow {
    Next,
    Return(Action),
    /// A bare `return;`: the user subroutine ends, its caller goes on.
    Leave,
}

pub(super) type ExprFn = Box<dyn Fn(&mut Task<'_>, &Compiled) -> Val + Send + Sync>;
pub(super) type StmtFn = Box<dyn Fn(&mut Task<'_>, &Compiled) -> Flow + Send + Sync>;
pub(super) type SetFn = Box<dyn Fn(&mut Task<'_>, Val) + Send + Sync>;

pub(super) struct Acl {
    pub(super) entries: Vec<(bool, IpAddr, u8)>,
    /// `+log`: a VCL_acl record for each test.
    pub(super) log: bool,
}

impl Acl {
    pub(super) fn matches(&self, ip: IpAddr) -> bool {
        let mut verdict = false;
        let mut best = -1i32;
        for (neg, net, mask) in &self.entries {
            if in_net(ip, *net, *mask) && *mask as i32 > best {
                best = *mask as i32;
                verdict = !neg;
            }
        }
        verdict
    }
}

pub(super) fn in_net(ip: IpAddr, net: IpAddr, mask: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = if mask == 0 { 0 } else { u32::MAX << (32 - mask.min(32) as u32) };
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = if mask == 0 { 0 } else { u128::MAX << (128 - mask.min(128) as u32) };
            u128::from(a) & m == u128::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V4(_)) => a.to_ipv4_mapped().is_some_and(|v4| in_net(IpAddr::V4(v4), net, mask)),
        _ => false,
    }
}

/// A compiled program.
pub struct Compiled {
    pub(super) subs: HashMap<String, Vec<StmtFn>>,
    pub(super) defined: [bool; Sub::ALL.len()],
    pub(super) acls: HashMap<String, Acl>,
    /// The backends declared, in order; the first is the default.
    pub backends: Vec<String>,
    /// Each backend's address and settings, in order.
    pub backend_specs: Vec<BackendSpec>,
    /// The backends themselves, made when the program is loaded.
    pub(super) runtime: std::sync::OnceLock<HashMap<String, Arc<crate::backend::pool::Backend>>>,
    /// The directors vcl_init made.
    pub(super) directors: std::sync::Mutex<HashMap<String, Arc<crate::backend::director::Director>>>,
    /// The dynamic directors vcl_init made.
    pub(super) dynamics: std::sync::Mutex<HashMap<String, Arc<crate::backend::dynamic::Dynamic>>>,
    /// dynamic.resolver() objects: what vcl_init configured.
    pub(super) resolvers: std::sync::Mutex<HashMap<String, common::resolve::ResolverSpec>>,
    /// directors.shard_param() sets and shard directors' associations.
    pub(super) shard_params: std::sync::Mutex<ShardParams>,
    /// blob.blob() objects: the bytes vcl_init decoded.
    pub(super) blobs: std::sync::Mutex<HashMap<String, Arc<Vec<u8>>>>,
    /// accept.rule() objects: each one's fallback and values.
    pub(super) accept_rules: std::sync::Mutex<HashMap<String, (String, Vec<String>)>>,
    /// saintmode.saintmode() objects, in the order vcl_init made them.
    pub(super) saints: std::sync::Mutex<Vec<Arc<crate::backend::saintmode::Saint>>>,
    /// The program's name (set when it is loaded, before vcl_init).
    pub(super) vcl_name: std::sync::OnceLock<String>,
    /// The default backend's host and port (the one named `default`,
    /// else the first declared), if the program declares one.
    pub backend: Option<String>,
    /// The program makes directors with `new` (it may then declare no
    /// backend, as Varnish allows).
    pub declares_directors: bool,
    /// The source names beresp.do_esi: requests keep their headers as
    /// they arrived, for the ESI includes they may make.
    pub may_esi: bool,
}

/// directors.shard_param() sets as the program made them (by object) and
/// each shard director's associated set.
#[derive(Default)]
pub(super) struct ShardParams {
    pub(super) sets: HashMap<String, crate::vcl::model::ShardParamSet>,
    pub(super) assoc: HashMap<String, String>,
}

impl Compiled {
    /// A program with nothing in it yet.
    pub(super) fn new(may_esi: bool) -> Compiled {
        Compiled {
            subs: HashMap::new(),
            defined: [false; Sub::ALL.len()],
            acls: HashMap::new(),
            backends: Vec::new(),
            backend_specs: Vec::new(),
            runtime: std::sync::OnceLock::new(),
            directors: std::sync::Mutex::new(HashMap::new()),
            dynamics: std::sync::Mutex::new(HashMap::new()),
            resolvers: std::sync::Mutex::new(HashMap::new()),
            blobs: std::sync::Mutex::new(HashMap::new()),
            shard_params: std::sync::Mutex::default(),
            accept_rules: std::sync::Mutex::new(HashMap::new()),
            saints: std::sync::Mutex::new(Vec::new()),
            vcl_name: std::sync::OnceLock::new(),
            backend: None,
            declares_directors: false,
            may_esi,
        }
    }

    /// The default backend's name: the one named `default` if there is
    /// one, else the first declared (as Varnish 7 chooses).
    pub fn default_backend(&self) -> Option<&str> {
        default_backend(&self.backends)
    }

    pub(super) fn directors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<crate::backend::director::Director>>> {
        self.directors.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn dynamics(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<crate::backend::dynamic::Dynamic>>> {
        self.dynamics.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn saints(&self) -> std::sync::MutexGuard<'_, Vec<Arc<crate::backend::saintmode::Saint>>> {
        self.saints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The saintmode director of that name.
    pub(super) fn saint(&self, name: &str) -> Option<Arc<crate::backend::saintmode::Saint>> {
        self.saints().iter().find(|s| s.name == name).cloned()
    }

    pub(super) fn resolvers(&self) -> std::sync::MutexGuard<'_, HashMap<String, common::resolve::ResolverSpec>> {
        self.resolvers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The dynamic director and its domain a name like `d(host:port)`
    /// stands for.
    pub(super) fn domain(&self, name: &str) -> Option<(Arc<crate::backend::dynamic::Dynamic>, Arc<crate::backend::dynamic::Domain>)> {
        let (obj, _) = name.split_once('(')?;
        let d = self.dynamics().get(obj).cloned()?;
        let dom = d.find(name)?;
        Some((d, dom))
    }

    /// The dynamic directors' backends now.
    pub(super) fn dynamic_backends(&self) -> Vec<Arc<crate::backend::pool::Backend>> {
        let ds: Vec<_> = self.dynamics().values().cloned().collect();
        ds.iter().flat_map(|d| d.backends()).collect()
    }

    /// The healthy backend `name` stands for: itself if it is a backend,
    /// what a director picks (nested directors followed) if it is one; a
    /// shard director picks by `key` (what vcl_hash hashed) as by=HASH.
    pub fn resolve(&self, name: &str, depth: usize, key: &[u8]) -> Option<Arc<crate::backend::pool::Backend>> {
        if let Some(b) = self.runtime.get().and_then(|r| r.get(name)) {
            return b.healthy().then(|| b.clone());
        }
        if let Some((d, dom)) = self.domain(name) {
            return d.pick(&dom, true);
        }
        // A saintmode director: its backend, unless the object (`key`) is
        // on its list or the list is full (then no backend, as the vmod).
        if let Some(s) = self.saint(name) {
            let ok = depth <= 8 && s.healthy(Some(key), crate::util::now()) == crate::backend::saintmode::Health::Healthy;
            return if ok { self.resolve(&s.backend, depth + 1, key) } else { None };
        }
        let d = self.directors().get(name).cloned()?;
        if depth > 8 {
            return None;
        }
        let picked = match d.kind {
            crate::backend::director::Kind::Shard => {
                self.shard_pick(&d, crate::backend::director::digest_point(key), Default::default(), depth + 1)?
            }
            _ => d.pick(None, &|m| self.usable_for(m, depth + 1, Some(key)))?,
        };
        self.resolve(&picked, depth + 1, key)
    }

    /// A shard director's member for the key at point `p` (members back
    /// from sick ramp up by how long they have been healthy).
    pub(super) fn shard_pick(
        &self,
        d: &crate::backend::director::Director,
        p: u32,
        opts: crate::backend::director::ShardOpts,
        depth: usize,
    ) -> Option<String> {
        let state = |m: &str| match self.runtime.get().and_then(|r| r.get(m)) {
            Some(b) => crate::backend::director::MemberState { usable: b.healthy(), healthy_for: b.healthy_for() },
            None => crate::backend::director::MemberState { usable: self.usable(m, depth), healthy_for: f64::INFINITY },
        };
        d.pick_shard(&d.member_list(), p, opts, &state)
    }

    /// Could `name` take a request now? (A director: could one of its
    /// members; asking changes no director's state.)
    pub(super) fn usable(&self, name: &str, depth: usize) -> bool {
        self.usable_for(name, depth, None)
    }

    /// [`usable`] for the object `key` names, where a saintmode director
    /// may have it on its list.
    pub(super) fn usable_for(&self, name: &str, depth: usize, key: Option<&[u8]>) -> bool {
        if let Some(b) = self.runtime.get().and_then(|r| r.get(name)) {
            return b.healthy();
        }
        if let Some((_, dom)) = self.domain(name) {
            return dom.usable();
        }
        if let Some(s) = self.saint(name) {
            let ok = s.healthy(key, crate::util::now()) == crate::backend::saintmode::Health::Healthy;
            return depth <= 8 && ok && self.usable_for(&s.backend, depth + 1, key);
        }
        let Some(d) = self.directors().get(name).cloned() else { return false };
        depth <= 8 && d.member_names().iter().any(|m| self.usable_for(m, depth + 1, key))
    }

    /// Like [`resolve`], but a backend is returned even when sick (so the
    /// fetch fails as "sick" rather than "no backend").
    pub(super) fn backend_named(&self, name: &str, key: &[u8]) -> Option<Arc<crate::backend::pool::Backend>> {
        if let Some(b) = self.runtime.get().and_then(|r| r.get(name).cloned()) {
            return Some(b);
        }
        if let Some((d, dom)) = self.domain(name) {
            return d.pick(&dom, false);
        }
        self.resolve(name, 0, key)
    }
}

/// What a statement or expression is compiled against: the subroutines it
/// can run in, the ACLs and backends declared.
pub(super) struct Scope<'a> {
    pub(super) ctx: Vec<Sub>,
    pub(super) acls: &'a HashMap<String, Acl>,
    pub(super) backends: &'a [String],
    /// The probes declared, by name.
    pub(super) probes: &'a HashMap<String, crate::backend::health::ProbeSpec>,
    /// Objects made with `new` (directors, dynamic directors and
    /// resolvers), by name.
    pub(super) objects: &'a HashMap<String, super::decls::ObjKind>,
    /// The program's VCL version (`vcl 4.1;` is 4.1), for std.syntax().
    pub(super) version: f64,
    /// The expression compiler (handed in, so that calls can compile their
    /// arguments without this module depending back on it).
    pub(super) compile_expr: fn(&Expr, &Scope<'_>) -> Result<ExprFn, VclError>,
}

impl Scope<'_> {
    /// Compile an expression in this scope.
    pub(super) fn expr(&self, e: &Expr) -> Result<ExprFn, VclError> {
        (self.compile_expr)(e, self)
    }
}

pub(super) fn run(body: &[StmtFn], t: &mut Task<'_>, c: &Compiled) -> Flow {
    for s in body {
        match s(t, c) {
            Flow::Next => {}
            flow => return flow,
        }
        if t.failed.is_some() {
            return Flow::Return(Action::Fail);
        }
    }
    Flow::Next
}

/// A runtime failure: logged (VCL_Error); the subroutine returns fail.
pub(super) fn fail(t: &mut Task<'_>, msg: String) {
    t.record(Tag::VclError, msg.as_bytes());
    t.failed.get_or_insert(msg);
}

/// The backend a program uses when none is chosen: the one named
/// `default` if there is one, else the first declared (Varnish 7).
pub(super) fn default_backend(backends: &[String]) -> Option<&str> {
    backends.iter().find(|b| *b == "default").or(backends.first()).map(String::as_str)
}
