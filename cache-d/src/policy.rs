//! The policy interface: the subroutines the engine calls at each step of
//! a request (Varnish's vcl_recv ... vcl_backend_error), what each can see
//! ([`Task`]) and return ([`Action`]), and the built-in policy that fills
//! them, as `varnishd -x builtin` describes it. Compiled VCL
//! ([`crate::vcl`]) implements [`Policy`] and falls back to [`builtin`]
//! when a subroutine does not return.

use bytes::Bytes;
use common::vsl::{Batch, Side, Tag};

/// Headers as a policy sees and edits them: owned, in wire order, with
/// their case preserved.
#[derive(Clone, Debug, Default)]
pub struct Headers(pub Vec<(Bytes, Bytes)>);

impl Headers {
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
    /// Replace every `name` header with one (or add it).
    pub fn set(&mut self, name: &str, value: Bytes) {
        match self.0.iter().position(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())) {
            Some(i) => {
                self.0[i].1 = value;
                let mut j = i + 1;
                while j < self.0.len() {
                    if self.0[j].0.eq_ignore_ascii_case(name.as_bytes()) {
                        self.0.remove(j);
                    } else {
                        j += 1;
                    }
                }
            }
            None => self.0.push((Bytes::copy_from_slice(name.as_bytes()), value)),
        }
    }
    pub fn unset(&mut self, name: &str) {
        self.0.retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()));
    }
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.0.iter().map(|(n, v)| (&n[..], &v[..]))
    }
    /// Does any `name` header match `pred` (case-insensitive contains)?
    pub fn contains_ci(&self, name: &str, needle: &str) -> bool {
        self.0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .any(|(_, v)| v.to_ascii_lowercase().windows(needle.len()).any(|w| w == needle.as_bytes()))
    }
}

/// The client request as the policy sees it (VCL's `req`).
#[derive(Clone, Debug, Default)]
pub struct Req {
    pub method: Bytes,
    pub url: Bytes,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Headers,
    pub server_ip: String,
    /// The client's address (for ACLs); None where it is not known.
    pub client_ip: Option<std::net::IpAddr>,
    /// The transaction id (req.xid).
    pub xid: u32,
    /// How often vcl_* returned restart for this request.
    pub restarts: u32,
    /// req.ttl / req.grace: upper bounds on the age of what a hit may
    /// serve (None: no bound).
    pub ttl: Option<f64>,
    pub grace: Option<f64>,
    pub hash_always_miss: bool,
    pub hash_ignore_busy: bool,
    /// The lookup found a hit-for-miss / hit-for-pass marker.
    pub is_hitmiss: bool,
    pub is_hitpass: bool,
    /// req.backend_hint, by name; None is the default backend.
    pub backend_hint: Option<String>,
    /// What vcl_hash hashed (None before it ran): a shard director's
    /// `by=HASH` key.
    pub hash: Option<Bytes>,
}

/// The backend request (VCL's `bereq`).
#[derive(Clone, Debug, Default)]
pub struct Bereq {
    pub method: Bytes,
    pub url: Bytes,
    pub minor: u8,
    pub headers: Headers,
    pub xid: u32,
    /// A pass (or hit-for-pass): the response is never stored.
    pub uncacheable: bool,
    pub retries: u32,
    pub is_bgfetch: bool,
    /// bereq.backend by name; None is the default backend.
    pub backend: Option<String>,
    /// The client request's hash inputs (None for a pipe before vcl_hash).
    pub hash: Option<Bytes>,
}

impl Bereq {
    /// The backend request for a client request.
    pub fn from_req(req: &Req, xid: u32) -> Bereq {
        Bereq {
            method: req.method.clone(),
            url: req.url.clone(),
            minor: 1,
            headers: req.headers.clone(),
            xid,
            backend: req.backend_hint.clone(),
            hash: req.hash.clone(),
            ..Bereq::default()
        }
    }
}

/// The backend response (VCL's `beresp`), and the synthetic one that
/// vcl_backend_error builds.
#[derive(Clone, Debug, Default)]
pub struct Beresp {
    pub status: u16,
    pub reason: Bytes,
    pub headers: Headers,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    /// Deliver, but do not store; with return (deliver) outside a pass this
    /// makes a hit-for-miss marker that lives `ttl`.
    pub uncacheable: bool,
    pub was_304: bool,
    pub do_stream: bool,
    /// The name of the backend that answered.
    pub backend: String,
    /// The object's age when it arrived (from Age).
    pub age: f64,
}

/// A cached object as vcl_hit and vcl_deliver see it (VCL's `obj`).
#[derive(Clone, Debug, Default)]
pub struct ObjView {
    pub status: u16,
    pub reason: Bytes,
    pub headers: Headers,
    /// Time to live left (negative once stale).
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    pub age: f64,
    pub hits: u64,
    pub uncacheable: bool,
}

/// The client response (VCL's `resp`), in vcl_deliver and vcl_synth.
#[derive(Clone, Debug, Default)]
pub struct Resp {
    pub status: u16,
    pub reason: Bytes,
    pub headers: Headers,
    pub is_streaming: bool,
}

/// The subroutines: where the engine calls into the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sub {
    Recv,
    Pipe,
    Pass,
    Hash,
    Purge,
    Hit,
    Miss,
    Deliver,
    Synth,
    BackendFetch,
    BackendResponse,
    BackendError,
    Init,
    Fini,
}

impl Sub {
    pub const ALL: [Sub; 14] = [
        Sub::Recv,
        Sub::Pipe,
        Sub::Pass,
        Sub::Hash,
        Sub::Purge,
        Sub::Hit,
        Sub::Miss,
        Sub::Deliver,
        Sub::Synth,
        Sub::BackendFetch,
        Sub::BackendResponse,
        Sub::BackendError,
        Sub::Init,
        Sub::Fini,
    ];
    /// The VCL name (`vcl_recv`).
    pub fn name(self) -> &'static str {
        match self {
            Sub::Recv => "vcl_recv",
            Sub::Pipe => "vcl_pipe",
            Sub::Pass => "vcl_pass",
            Sub::Hash => "vcl_hash",
            Sub::Purge => "vcl_purge",
            Sub::Hit => "vcl_hit",
            Sub::Miss => "vcl_miss",
            Sub::Deliver => "vcl_deliver",
            Sub::Synth => "vcl_synth",
            Sub::BackendFetch => "vcl_backend_fetch",
            Sub::BackendResponse => "vcl_backend_response",
            Sub::BackendError => "vcl_backend_error",
            Sub::Init => "vcl_init",
            Sub::Fini => "vcl_fini",
        }
    }
    /// The VCL_call record's word (`RECV`).
    pub fn word(self) -> &'static str {
        match self {
            Sub::Recv => "RECV",
            Sub::Pipe => "PIPE",
            Sub::Pass => "PASS",
            Sub::Hash => "HASH",
            Sub::Purge => "PURGE",
            Sub::Hit => "HIT",
            Sub::Miss => "MISS",
            Sub::Deliver => "DELIVER",
            Sub::Synth => "SYNTH",
            Sub::BackendFetch => "BACKEND_FETCH",
            Sub::BackendResponse => "BACKEND_RESPONSE",
            Sub::BackendError => "BACKEND_ERROR",
            Sub::Init => "INIT",
            Sub::Fini => "FINI",
        }
    }
    pub fn from_name(n: &str) -> Option<Sub> {
        Sub::ALL.into_iter().find(|s| s.name() == n)
    }
    /// Runs on the backend side (bereq/beresp), not the client side.
    pub fn is_backend(self) -> bool {
        matches!(self, Sub::BackendFetch | Sub::BackendResponse | Sub::BackendError)
    }
}

/// What a subroutine returns: `return (action)`.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Ok,
    Fail,
    Synth(u16, String),
    Pass,
    Pipe,
    Hash,
    Purge,
    Restart,
    Fetch,
    Lookup,
    Deliver,
    Miss,
    Abandon,
    Retry,
    Error(u16, String),
    /// vcl_backend_response's `return (pass(DURATION))`: hit-for-pass.
    PassFor(f64),
}

impl Action {
    /// The VCL_return word.
    pub fn word(&self) -> &'static str {
        match self {
            Action::Ok => "ok",
            Action::Fail => "fail",
            Action::Synth(..) => "synth",
            Action::Pass | Action::PassFor(_) => "pass",
            Action::Pipe => "pipe",
            Action::Hash => "hash",
            Action::Purge => "purge",
            Action::Restart => "restart",
            Action::Fetch => "fetch",
            Action::Lookup => "lookup",
            Action::Deliver => "deliver",
            Action::Miss => "miss",
            Action::Abandon => "abandon",
            Action::Retry => "retry",
            Action::Error(..) => "error",
        }
    }
}

/// What the engine lends a policy besides the request: backend health and
/// the ban list.
pub trait Env: Sync {
    /// Is the named backend (None: the default one) healthy?
    fn healthy(&self, _backend: Option<&str>) -> bool {
        true
    }
    /// Add a ban (`ban()` in VCL); the error says why it was refused.
    fn ban(&self, _spec: &str) -> Result<(), String> {
        Err("bans are not available here".into())
    }
}

/// An engine that lends nothing (unit tests, benchmarks, vcl_init).
pub struct NoEnv;
impl Env for NoEnv {}

/// One call of a subroutine: what it can see and change. Which of these
/// are present depends on the subroutine (VCL's rules on which variables
/// exist where; the compiler checks them before anything runs).
pub struct Task<'a> {
    pub req: Option<&'a mut Req>,
    pub bereq: Option<&'a mut Bereq>,
    pub beresp: Option<&'a mut Beresp>,
    pub obj: Option<&'a ObjView>,
    pub resp: Option<&'a mut Resp>,
    /// vcl_hash's hash inputs.
    pub key: Option<&'a mut Vec<u8>>,
    /// The synthetic body (vcl_synth, vcl_backend_error).
    pub body: Option<&'a mut Vec<u8>>,
    /// Where std.log and runtime VCL errors go: the transaction's log.
    pub log: Option<(&'a mut Batch, u32, Side)>,
    /// The client's and our end of the connection.
    pub client: Option<std::net::SocketAddr>,
    pub local: Option<std::net::SocketAddr>,
    pub env: &'a dyn Env,
    /// Set by a runtime error (logged as VCL_Error): the subroutine stops
    /// and returns fail.
    pub failed: Option<String>,
}

impl<'a> Task<'a> {
    /// A task with nothing in it.
    pub fn new(env: &'a dyn Env) -> Task<'a> {
        Task {
            req: None,
            bereq: None,
            beresp: None,
            obj: None,
            resp: None,
            key: None,
            body: None,
            log: None,
            client: None,
            local: None,
            env,
            failed: None,
        }
    }
    /// Log a record to the transaction (VCL_Log, VCL_Error).
    pub fn record(&mut self, tag: Tag, text: &[u8]) {
        if let Some((log, vxid, side)) = self.log.as_mut() {
            log.rec(tag, *side, *vxid, text);
        }
    }
}

/// The policy: what runs at each step of the request. Each subroutine has
/// Varnish's built-in behaviour unless a policy overrides it.
pub trait Policy: Send + Sync {
    /// The name shown in VCL_use records.
    fn name(&self) -> &str {
        "boot"
    }
    /// Does the policy have code of its own for `sub`? (The engine skips
    /// building views, such as `obj` for vcl_hit, that only it would read.)
    fn defines(&self, _sub: Sub) -> bool {
        false
    }
    /// Run `sub`.
    fn call(&self, sub: Sub, t: &mut Task<'_>) -> Action {
        builtin(sub, t)
    }
    /// The program is being discarded (vcl_fini).
    fn fini(&self) {}
    /// The backend called `name` (None: the default one), if the policy
    /// declares backends; a director named picks by `key` where it hashes
    /// (the request's hash inputs, or its URL).
    fn backend(&self, _name: Option<&str>, _key: &[u8]) -> Option<std::sync::Arc<crate::backend::Backend>> {
        None
    }
    /// Every backend the policy declares, in order.
    fn backends(&self) -> Vec<std::sync::Arc<crate::backend::Backend>> {
        Vec::new()
    }
}

/// Run `sub` of `policy`, logging VCL_call and VCL_return to the task's
/// transaction.
pub fn run_sub(policy: &dyn Policy, sub: Sub, t: &mut Task<'_>) -> Action {
    t.record(Tag::VclCall, sub.word().as_bytes());
    let a = policy.call(sub, t);
    t.record(Tag::VclReturn, a.word().as_bytes());
    a
}

/// The built-in policy and nothing else.
pub struct Builtin;
impl Policy for Builtin {}

const KNOWN_METHODS: [&[u8]; 8] = [b"GET", b"HEAD", b"PUT", b"POST", b"TRACE", b"OPTIONS", b"DELETE", b"PATCH"];

/// The built-in subroutines (`varnishd -x builtin`, 7.x).
pub fn builtin(sub: Sub, t: &mut Task<'_>) -> Action {
    match sub {
        Sub::Recv => match t.req.as_deref_mut() {
            Some(req) => builtin_recv(req),
            None => Action::Fail,
        },
        Sub::Hash => {
            if let (Some(req), Some(key)) = (t.req.as_deref(), t.key.as_deref_mut()) {
                builtin_hash(req, key);
            }
            Action::Lookup
        }
        Sub::Pipe => Action::Pipe,
        Sub::Pass | Sub::Miss | Sub::BackendFetch => Action::Fetch,
        Sub::Purge => Action::Synth(200, "Purged".into()),
        Sub::Hit | Sub::Deliver => Action::Deliver,
        Sub::Synth => {
            let xid = t.req.as_deref().map_or(0, |r| r.xid);
            if let Some(resp) = t.resp.as_deref_mut() {
                error_page(&mut resp.headers, resp.status, &resp.reason, xid, t.body.as_deref_mut());
            }
            Action::Deliver
        }
        Sub::BackendResponse => match (t.bereq.as_deref(), t.beresp.as_deref_mut()) {
            (Some(bereq), Some(b)) => builtin_backend_response(bereq, b),
            _ => Action::Deliver,
        },
        Sub::BackendError => {
            let xid = t.bereq.as_deref().map_or(0, |r| r.xid);
            if let Some(b) = t.beresp.as_deref_mut() {
                error_page(&mut b.headers, b.status, &b.reason, xid, t.body.as_deref_mut());
            }
            Action::Deliver
        }
        Sub::Init | Sub::Fini => Action::Ok,
    }
}

/// What [`builtin`] returns for `sub` when nothing made it decide
/// otherwise (the final `return` of each built-in subroutine).
pub fn fallthrough(sub: Sub) -> Action {
    match sub {
        Sub::Recv => Action::Hash,
        Sub::Hash => Action::Lookup,
        Sub::Pipe => Action::Pipe,
        Sub::Pass | Sub::Miss | Sub::BackendFetch => Action::Fetch,
        Sub::Purge => Action::Synth(200, "Purged".into()),
        Sub::Hit | Sub::Deliver | Sub::Synth | Sub::BackendResponse | Sub::BackendError => Action::Deliver,
        Sub::Init | Sub::Fini => Action::Ok,
    }
}

/// The standard reason phrase of a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown HTTP Status",
    }
}

/// vcl_synth's and vcl_backend_error's built-in half: the error page and
/// its headers.
fn error_page(headers: &mut Headers, status: u16, reason: &Bytes, xid: u32, body: Option<&mut Vec<u8>>) {
    headers.set("Content-Type", Bytes::from_static(b"text/html; charset=utf-8"));
    headers.set("Retry-After", Bytes::from_static(b"5"));
    if let Some(b) = body {
        *b = guru_page(status, &String::from_utf8_lossy(reason), xid).into_bytes();
    }
}

/// The built-in error page ("Guru Meditation").
pub fn guru_page(status: u16, reason: &str, xid: u32) -> String {
    format!(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <title>{status} {reason}</title>\n  </head>\n  <body>\n    <h1>Error {status} {reason}</h1>\n    <p>{reason}</p>\n    <h3>Guru Meditation:</h3>\n    <p>XID: {xid}</p>\n    <hr>\n    <p>cachekit cache server</p>\n  </body>\n</html>\n"
    )
}

pub fn builtin_recv(req: &mut Req) -> Action {
    if let Some(h) = req.headers.get("host") {
        if h.iter().any(u8::is_ascii_uppercase) {
            let lower = Bytes::from(h.to_ascii_lowercase());
            req.headers.set("host", lower);
        }
    }
    if &req.method[..] == b"PRI" {
        return Action::Synth(405, "Method Not Allowed".into());
    }
    if !req.headers.has("host") && req.minor >= 1 {
        return Action::Synth(400, "Bad Request".into());
    }
    if !KNOWN_METHODS.contains(&&req.method[..]) {
        return Action::Pipe;
    }
    if &req.method[..] != b"GET" && &req.method[..] != b"HEAD" {
        return Action::Pass;
    }
    if req.headers.has("authorization") || req.headers.has("cookie") {
        return Action::Pass;
    }
    Action::Hash
}

pub fn builtin_hash(req: &Req, key: &mut Vec<u8>) {
    key.extend_from_slice(&req.url);
    key.push(0);
    match req.headers.get("host") {
        Some(h) => key.extend_from_slice(h),
        None => key.extend_from_slice(req.server_ip.as_bytes()),
    }
    key.push(0);
}

/// vcl_backend_response's built-in half: responses that must not be
/// shared become hit-for-miss for 120 s.
pub fn builtin_backend_response(bereq: &Bereq, b: &mut Beresp) -> Action {
    if bereq.uncacheable {
        return Action::Deliver;
    }
    let h = &b.headers;
    let surrogate = h.has("surrogate-control");
    let cc_uncacheable = ["no-cache", "no-store", "private"].iter().any(|d| h.contains_ci("cache-control", d));
    let vary_star = h.get("vary").is_some_and(|v| v.trim_ascii() == b"*");
    if b.ttl <= 0.0
        || h.has("set-cookie")
        || (surrogate && h.contains_ci("surrogate-control", "no-store"))
        || (!surrogate && cc_uncacheable)
        || vary_star
    {
        b.ttl = 120.0;
        b.uncacheable = true;
    }
    Action::Deliver
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, hdrs: &[(&str, &str)]) -> Req {
        Req {
            method: Bytes::copy_from_slice(method.as_bytes()),
            url: Bytes::from_static(b"/x"),
            minor: 1,
            headers: Headers(
                hdrs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect(),
            ),
            server_ip: "127.0.0.1".into(),
            ..Req::default()
        }
    }

    fn recv(mut r: Req) -> Action {
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        Builtin.call(Sub::Recv, &mut t)
    }

    #[test]
    fn builtin_recv_decisions() {
        assert_eq!(recv(req("GET", &[("Host", "a")])), Action::Hash);
        assert_eq!(recv(req("HEAD", &[("Host", "a")])), Action::Hash);
        assert_eq!(recv(req("POST", &[("Host", "a")])), Action::Pass);
        assert_eq!(recv(req("GET", &[("Host", "a"), ("Cookie", "x=1")])), Action::Pass);
        assert_eq!(recv(req("GET", &[("Host", "a"), ("Authorization", "Basic x")])), Action::Pass);
        assert_eq!(recv(req("BREW", &[("Host", "a")])), Action::Pipe);
        assert_eq!(recv(req("PRI", &[("Host", "a")])), Action::Synth(405, "Method Not Allowed".into()));
        assert_eq!(recv(req("GET", &[])), Action::Synth(400, "Bad Request".into()));
        let mut r = req("GET", &[("Host", "Example.COM")]);
        builtin_recv(&mut r);
        assert_eq!(r.headers.get("host").unwrap(), &b"example.com"[..]);
    }

    #[test]
    fn builtin_hash_is_url_then_host() {
        let mut k = Vec::new();
        builtin_hash(&req("GET", &[("Host", "a")]), &mut k);
        assert_eq!(k, b"/x\0a\0");
        let mut k = Vec::new();
        builtin_hash(&req("GET", &[]), &mut k);
        assert_eq!(k, b"/x\x00127.0.0.1\x00");
    }

    #[test]
    fn builtin_backend_response_decisions() {
        let check = |hdrs: &[(&str, &str)], ttl: f64| {
            let mut b = Beresp { status: 200, headers: req("GET", hdrs).headers, ttl, grace: 10.0, ..Beresp::default() };
            let a = builtin_backend_response(&Bereq::default(), &mut b);
            assert_eq!(a, Action::Deliver);
            (b.uncacheable, b.ttl)
        };
        assert_eq!(check(&[], 120.0), (false, 120.0));
        assert_eq!(check(&[], 0.0), (true, 120.0));
        assert_eq!(check(&[("Set-Cookie", "a=b")], 60.0), (true, 120.0));
        assert_eq!(check(&[("Cache-Control", "private, max-age=60")], 60.0), (true, 120.0));
        assert_eq!(check(&[("Cache-Control", "No-Store")], 60.0), (true, 120.0));
        // Surrogate-Control takes precedence over Cache-Control.
        assert_eq!(check(&[("Surrogate-Control", "max-age=60"), ("Cache-Control", "no-cache")], 60.0), (false, 60.0));
        assert_eq!(check(&[("Surrogate-Control", "no-store")], 60.0), (true, 120.0));
        assert_eq!(check(&[("Vary", "*")], 60.0), (true, 120.0));
        // A pass is delivered as it is.
        let mut b = Beresp { status: 200, ttl: 0.0, ..Beresp::default() };
        let pass = Bereq { uncacheable: true, ..Bereq::default() };
        assert_eq!(builtin_backend_response(&pass, &mut b), Action::Deliver);
        assert!(!b.uncacheable);
    }

    #[test]
    fn builtin_synth_and_backend_error_build_the_error_page() {
        let mut resp = Resp { status: 503, reason: Bytes::from_static(b"Service Unavailable"), ..Resp::default() };
        let mut r = Req { xid: 42, ..Req::default() };
        let mut body = Vec::new();
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        t.resp = Some(&mut resp);
        t.body = Some(&mut body);
        assert_eq!(Builtin.call(Sub::Synth, &mut t), Action::Deliver);
        let page = String::from_utf8(body).unwrap();
        assert!(page.contains("<h1>Error 503 Service Unavailable</h1>") && page.contains("XID: 42"), "{page}");
        assert_eq!(resp.headers.get("retry-after").unwrap(), &b"5"[..]);
    }
}
