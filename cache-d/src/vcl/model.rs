//! The VCL object model: what a subroutine sees and changes (`req`,
//! `bereq`, `beresp`, `obj`, `resp` and their headers), the subroutines
//! the engine calls ([`Sub`]), what they return ([`Action`]), and one
//! call's context ([`Task`]) with what the engine lends it ([`Env`]).

use bytes::Bytes;
use common::log::vsl::{Batch, Side, Tag};

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
    /// Join every `name` header into the first one's place, the later
    /// values (leading blanks dropped) after `sep`, as Varnish's
    /// http_CollectHdr. Returns the first's old value and the joined one
    /// when there were several.
    pub fn collect(&mut self, name: &str, sep: &str) -> Option<(Bytes, Bytes)> {
        let mut at = self.0.iter().enumerate().filter(|(_, (n, _))| n.eq_ignore_ascii_case(name.as_bytes())).map(|(i, _)| i);
        let first = at.next()?;
        let rest: Vec<usize> = at.collect();
        if rest.is_empty() {
            return None;
        }
        let mut v = self.0[first].1.to_vec();
        for &i in &rest {
            v.extend_from_slice(sep.as_bytes());
            v.extend_from_slice(self.0[i].1.trim_ascii_start());
        }
        let old = std::mem::replace(&mut self.0[first].1, Bytes::from(v));
        for &i in rest.iter().rev() {
            self.0.remove(i);
        }
        Some((old, self.0[first].1.clone()))
    }
    pub fn unset(&mut self, name: &str) {
        // Most unsets find nothing (a delivery makes several): look first,
        // and move the list only when there is something to take out.
        // A name is usually there once: that one comes out with a single
        // move of the tail (retain moved each element after it, one by one).
        let is = |n: &Bytes| n.eq_ignore_ascii_case(name.as_bytes());
        let Some(i) = self.0.iter().position(|(n, _)| is(n)) else { return };
        self.0.remove(i);
        if self.0[i..].iter().any(|(n, _)| is(n)) {
            self.0.retain(|(n, _)| !is(n));
        }
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
    pub server_ip: std::sync::Arc<str>,
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
    /// req.hash_ignore_vary: any variant will do (the most recent).
    pub hash_ignore_vary: bool,
    /// The lookup found a hit-for-miss / hit-for-pass marker.
    pub is_hitmiss: bool,
    pub is_hitpass: bool,
    /// req.backend_hint, by name; None is the default backend.
    pub backend_hint: Option<String>,
    /// What vcl_hash hashed (None before it ran): a shard director's
    /// `by=HASH` key.
    pub hash: Option<Bytes>,
    /// Why the last std.ban() of this request failed ("" if it did not).
    pub ban_error: String,
    /// std.late_100_continue(true) in vcl_recv: 100 Continue waits until
    /// the body is read.
    pub late_100_continue: bool,
    /// The request body as vcl_recv sees it: None without one, the length
    /// for Content-Length, Some(None) for chunked.
    pub body_size: Option<Option<u64>>,
    /// std.cache_req_body(LIMIT) ran on a request with a body: the body is
    /// read into memory after vcl_recv (at most LIMIT bytes, else the
    /// connection closes without a response, as Varnish's BS_ERROR), so
    /// it can be sent again (retries, restarts).
    pub cache_body: Option<u64>,
    /// How deep in ESI includes this request is (0: the client's own).
    pub esi_level: u32,
    /// For an ESI include: the top request's method, URL, protocol and
    /// headers (req_top.*); None on the top request itself.
    pub top: Option<std::sync::Arc<TopReq>>,
    /// The headers as the request arrived (Varnish's http0), kept when the
    /// policy may do ESI: an include starts from its page's.
    pub http0: Option<Headers>,
    /// req.esi = false (VCL 4.0): its response is not ESI-processed.
    pub disable_esi: bool,
    /// Includes made for the client's request so far, shared by all its
    /// ESI sub-requests (a bound on a page's whole tree).
    pub esi_includes: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    /// client.identity as vcl_recv set it (None: the client's address).
    pub client_identity: Option<String>,
    /// When the request arrived (req.time; kept across restarts).
    pub time: f64,
    /// The headers the client's Connection named, as they came: VCL sees
    /// them, a backend request does not get them (see [`same_slot`]).
    pub hop: Vec<(Bytes, Bytes)>,
    /// sess.timeout_idle in seconds: the session's, and whether VCL set it
    /// (the session keeps it for its next requests).
    pub timeout_idle: f64,
    pub timeout_idle_set: bool,
    /// vmod_cookie's jar for this request (its PRIV_TASK: kept across
    /// restarts, not shared with ESI includes or the fetch).
    pub cookies: Vec<(String, String)>,
    /// vmod_var's variables for this request (PRIV_TASK, as the jar).
    pub vars: Vec<(String, TaskVar)>,
    /// req.proto as VCL 4.0 set it (None: the request's own, from minor).
    pub proto: Option<Bytes>,
}

impl Req {
    /// req.proto: what VCL 4.0 set, else the request's protocol.
    pub fn proto(&self) -> &[u8] {
        match &self.proto {
            Some(p) => p,
            None => crate::http1::head::proto_name(self.minor).as_bytes(),
        }
    }
}

/// A value vmod_var keeps for a task: each variable has the type it was
/// last set with (var.get_int of a STRING is 0).
#[derive(Clone, Debug, PartialEq)]
pub enum TaskVar {
    Str(String),
    Int(i64),
    Real(f64),
    Dur(f64),
    Ip(std::net::IpAddr, u16),
    /// None: a NULL backend.
    Backend(Option<String>),
}

/// The request an ESI include was made for (VCL's `req_top`).
#[derive(Clone, Debug, Default)]
pub struct TopReq {
    pub method: Bytes,
    pub url: Bytes,
    pub minor: u8,
    pub headers: Headers,
    /// When the top request arrived (req_top.time).
    pub time: f64,
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
    /// The client request's lookup found a hit-for-miss / hit-for-pass
    /// object (bereq.is_hitmiss, bereq.is_hitpass).
    pub is_hitmiss: bool,
    pub is_hitpass: bool,
    /// bereq.backend by name; None is the default backend.
    pub backend: Option<String>,
    /// The client request's hash inputs (None for a pipe before vcl_hash).
    pub hash: Option<Bytes>,
    /// Timeouts set in VCL (seconds): they win over the backend's and the
    /// parameters.
    pub connect_timeout: Option<f64>,
    pub first_byte_timeout: Option<f64>,
    pub between_bytes_timeout: Option<f64>,
    /// Why the last std.ban() of this fetch failed ("" if it did not).
    pub ban_error: String,
    /// `unset bereq.body` (the built-in does it for a GET): the request's
    /// body is not sent.
    pub no_body: bool,
    /// client.identity, from the client request.
    pub client_identity: Option<String>,
    /// When the fetch began (bereq.time; kept across retries).
    pub time: f64,
    /// The request as the fetch began, before vcl_backend_fetch: what
    /// std.rollback(bereq) restores (method, URL, version, headers).
    pub bereq0: Option<Box<(Bytes, Bytes, u8, Headers)>>,
    /// std.rollback(bereq) ran: in vcl_backend_response it drops the
    /// backend connection, so the body is not fetched (Varnish's
    /// Bereq_Rollback).
    pub rolled_back: bool,
    /// vmod_cookie's jar for this fetch (kept across retries).
    pub cookies: Vec<(String, String)>,
    /// vmod_var's variables for this fetch (kept across retries).
    pub vars: Vec<(String, TaskVar)>,
    /// directors.shard_param() sets changed for this fetch, by object.
    pub shard_params: Vec<(String, ShardParamSet)>,
}

/// A directors.shard_param() set: the arguments given (None: not given,
/// taken from the set it falls back to); `by` carries the key of by=KEY
/// and by=BLOB.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardParamSet {
    pub by: Option<(&'static str, u32)>,
    pub alt: Option<i64>,
    pub warmup: Option<f64>,
    pub rampup: Option<bool>,
    pub healthy: Option<&'static str>,
}

impl Bereq {
    /// Keep the request as it is now for std.rollback(bereq).
    pub fn keep_original(&mut self) {
        self.bereq0 = Some(Box::new((self.method.clone(), self.url.clone(), self.minor, self.headers.clone())));
    }

    /// std.rollback(bereq): the request back as the fetch began.
    pub fn rollback(&mut self) {
        if let Some(b) = &self.bereq0 {
            (self.method, self.url, self.minor, self.headers) = (b.0.clone(), b.1.clone(), b.2, b.3.clone());
        }
        self.rolled_back = true;
    }

    /// The backend request for a client request.
    pub fn from_req(req: &Req, xid: u32) -> Bereq {
        // The headers the client's Connection named stay for this hop;
        // one the policy set since goes to the backend (Varnish's
        // HDF_FILTER marks the header's slot, not its name).
        let headers = match req.hop.is_empty() {
            true => req.headers.clone(),
            false => Headers(req.headers.0.iter().filter(|h| !req.hop.iter().any(|m| same_slot(m, h))).cloned().collect()),
        };
        Bereq {
            method: req.method.clone(),
            url: req.url.clone(),
            minor: 1,
            headers,
            xid,
            backend: req.backend_hint.clone(),
            hash: req.hash.clone(),
            client_identity: req.client_identity.clone(),
            time: crate::util::now(),
            is_hitmiss: req.is_hitmiss,
            is_hitpass: req.is_hitpass,
            ..Bereq::default()
        }
    }
}

/// Is `h` the header `m` as it came, not one VCL has set since (the same
/// bytes, not just an equal value)?
fn same_slot(m: &(Bytes, Bytes), h: &(Bytes, Bytes)) -> bool {
    m.0.eq_ignore_ascii_case(&h.0) && m.1.as_ptr() == h.1.as_ptr() && m.1.len() == h.1.len()
}

/// The backend response (VCL's `beresp`), and the synthetic one that
/// vcl_backend_error builds.
#[derive(Clone, Debug, Default)]
pub struct Beresp {
    pub status: u16,
    /// The status as VCL set it, digits above 999 kept (see [`vcl_status`]).
    pub vcl_status: u16,
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
    /// Compress a plain body before storing it (needs http_gzip_support).
    pub do_gzip: bool,
    /// Decompress a gzip body before storing it (needs http_gzip_support).
    pub do_gunzip: bool,
    /// Store a Brotli copy too (cachekit; needs http_brotli_support).
    pub do_brotli: bool,
    /// Parse the body for ESI at fetch.
    pub do_esi: bool,
    /// beresp.filters as VCL set it (None: the list the knobs imply); once
    /// set, the do_* knobs are fixed.
    pub filters: Option<String>,
    /// The name of the backend that answered.
    pub backend: String,
    /// The object's age when it arrived (from Age).
    pub age: f64,
    /// The store it goes to (a name from -s; empty: the round robin's
    /// next, as it is before vcl_backend_response when nothing set it).
    pub storage: String,
    /// beresp.proto as VCL 4.0 set it (None: HTTP/1.1).
    pub proto: Option<Bytes>,
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
    /// Its store, an index into the stores' names (None: Transient, as a
    /// pass's object).
    pub stv: Option<u8>,
    /// It has ESI instructions (obj.can_esi).
    pub can_esi: bool,
    /// Its body is stored gzip (Varnish's OF_GZIPED).
    pub gzip: bool,
}

/// A status as VCL reads it: what VCL set (`full`, which may carry digits
/// above 999 for its own signalling) while its last three digits are the
/// `wire` status, else the wire status. Only those three digits leave.
pub fn vcl_status(wire: u16, full: u16) -> u16 {
    if full >= 1000 && full % 1000 == wire {
        full
    } else {
        wire
    }
}

impl Beresp {
    /// Partial content as the filters see it: 206 as VCL reads it (a
    /// status VCL set to 1206 goes out 206 but is not partial to them).
    pub fn partial(&self) -> bool {
        vcl_status(self.status, self.vcl_status) == 206
    }
}

/// The client response (VCL's `resp`), in vcl_deliver and vcl_synth.
#[derive(Clone, Debug, Default)]
pub struct Resp {
    /// The status on the wire (100-999).
    pub status: u16,
    /// The status as VCL set it, digits above 999 kept (see [`vcl_status`]).
    pub vcl_status: u16,
    pub reason: Bytes,
    pub headers: Headers,
    pub is_streaming: bool,
    /// resp.do_esi: ESI instructions, if the object has any, are followed
    /// (true unless req.esi turned it off; vcl_deliver may turn it off).
    pub do_esi: bool,
    /// resp.filters as VCL set it (None: the list Varnish would run);
    /// once set, resp.do_esi is fixed.
    pub filters: Option<String>,
    /// resp.proto as VCL 4.0 set it (None: HTTP/1.1).
    pub proto: Option<Bytes>,
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
    /// vcl_recv's `return (vcl(LABEL))`: the request starts again in the
    /// program the label names.
    Vcl(String),
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
            Action::Vcl(_) => "vcl",
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
    /// xkey.purge (`soft`: xkey.softpurge): how many objects.
    fn xkey_purge(&self, _keys: &str, _soft: bool) -> i64 {
        0
    }
    /// purge.hard() (`soft` None) or purge.soft(ttl, grace, keep) on the
    /// variants under the hash key `hash`: how many.
    fn purge_hash(&self, _hash: &[u8], _soft: Option<(f64, Option<f64>, Option<f64>)>) -> i64 {
        0
    }
    /// A store's bytes in use and free (storage.NAME.used_space and
    /// .free_space); None for a store this engine does not have.
    fn storage_space(&self, _name: &str) -> Option<(u64, u64)> {
        None
    }
    /// Is feature validate_headers on (VCL may not set a header value
    /// with control characters)?
    fn validate_headers(&self) -> bool {
        true
    }
    /// Is feature rfc9111 on (the built-in policy decides as RFC 9111 says)?
    fn rfc9111(&self) -> bool {
        false
    }
}

/// The client request's body as vmod bodyaccess reads it: kept in memory
/// by std.cache_req_body() (varnishd reads it inside that call; cache-d
/// after vcl_recv, or here, when a bodyaccess function asks in vcl_recv).
pub trait BodyAccess {
    /// The body, read now (at most `limit` bytes) if it is not in memory
    /// yet; None if there is none or it could not be read.
    fn cached(&mut self, limit: u64) -> Option<bytes::Bytes>;
}

/// An engine that lends nothing (unit tests, benchmarks, vcl_init).
pub struct NoEnv;
impl Env for NoEnv {}

/// What a TLS connection negotiated, for vmod tls's functions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLSv1.2` or `TLSv1.3`, as OpenSSL names them.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS_AES_128_GCM_SHA256`).
    pub cipher: String,
    /// The name the client asked for (SNI).
    pub sni: Option<String>,
    /// The protocol ALPN chose.
    pub alpn: Option<String>,
}

/// A client connection's addresses as VCL sees them: `client.ip` and
/// `server.ip` are what a PROXY header said (else the connection's own
/// ends), `remote.ip` and `local.ip` the connection's own ends. All four
/// are 0.0.0.0 port 0 on a Unix socket without PROXY, as in Varnish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ends {
    pub client: std::net::SocketAddr,
    pub server: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
    pub local: std::net::SocketAddr,
    /// The session's vxid (sess.xid).
    pub xid: u32,
    /// The listener's name (local.socket: `a0`, or the `-a NAME=`).
    pub socket: Option<std::sync::Arc<str>>,
    /// A Unix socket listener's path (local.endpoint; a TCP one's is
    /// `local`).
    pub path: Option<std::sync::Arc<str>>,
    /// The client connection's descriptor (std.set_ip_tos).
    pub fd: Option<i32>,
    /// The peer's (uid, gid) on a Unix socket (SO_PEERCRED; vmod unix).
    pub peer_cred: Option<(u32, u32)>,
    /// A PROXY version 2 header's TLVs, as sent (vmod proxy).
    pub proxy_tlvs: Option<std::sync::Arc<[u8]>>,
}

impl Ends {
    /// A connection with no PROXY header: client and server are its ends.
    pub fn direct(remote: std::net::SocketAddr, local: std::net::SocketAddr) -> Ends {
        Ends { client: remote, server: local, remote, local, xid: 0, socket: None, path: None, fd: None, peer_cred: None, proxy_tlvs: None }
    }
    /// A session's ends: `direct`, with the session's vxid, its listener's
    /// name and, on a Unix socket (`fd`'s local name), the socket's path.
    pub fn open(remote: std::net::SocketAddr, local: std::net::SocketAddr, xid: u32, socket: std::sync::Arc<str>, fd: i32) -> Ends {
        let unix = local.ip().is_unspecified() && local.port() == 0;
        let path = if unix { unix_path(fd).map(std::sync::Arc::from) } else { None };
        let peer_cred = if path.is_some() { peer_cred(fd) } else { None };
        Ends { xid, socket: Some(socket), path, fd: Some(fd), peer_cred, ..Ends::direct(remote, local) }
    }
}

/// The (uid, gid) of the process at the other end of a Unix socket
/// (None: not one, or the kernel would not say).
fn peer_cred(fd: i32) -> Option<(u32, u32)> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    (rc == 0).then_some((cred.uid, cred.gid))
}

/// The path a Unix socket descriptor is bound to (None: not one, or
/// unnamed).
fn unix_path(fd: i32) -> Option<String> {
    // SAFETY: sockaddr_un is plain data; getsockname writes at most `len`
    // bytes into it and says how many.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let rc = unsafe { libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_un).cast(), &mut len) };
    if rc != 0 || i32::from(sa.sun_family) != libc::AF_UNIX {
        return None;
    }
    let bytes: Vec<u8> = sa.sun_path.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

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
    /// The transaction's timestamps (std.timestamp adds one to `log`).
    pub clock: Option<&'a mut crate::util::Clock>,
    /// The connection's addresses (client.ip, server.ip, remote.ip, local.ip).
    pub ends: Option<&'a Ends>,
    /// The client connection's TLS parameters (None: not TLS).
    pub tls: Option<std::sync::Arc<TlsInfo>>,
    /// The client request's body for vmod bodyaccess (client
    /// subroutines only): what std.cache_req_body() kept.
    pub req_body: Option<&'a mut dyn BodyAccess>,
    pub env: &'a dyn Env,
    /// Set by a runtime error (logged as VCL_Error): the subroutine stops
    /// and returns fail.
    pub failed: Option<String>,
    /// vmod_cookie's jar where there is neither a request nor a fetch
    /// (vcl_init, vcl_fini: the task is the subroutine's call).
    pub cookies: Vec<(String, String)>,
    /// vmod_var's variables there.
    pub vars: Vec<(String, TaskVar)>,
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
            clock: None,
            ends: None,
            tls: None,
            req_body: None,
            env,
            failed: None,
            cookies: Vec::new(),
            vars: Vec::new(),
        }
    }
    /// Log a record to the transaction (VCL_Log, VCL_Error).
    pub fn record(&mut self, tag: Tag, text: &[u8]) {
        if let Some((log, vxid, side)) = self.log.as_mut() {
            log.rec(tag, *side, *vxid, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Headers;
    use bytes::Bytes;

    fn list(pairs: &[(&'static str, &'static str)]) -> Headers {
        Headers(pairs.iter().map(|(n, v)| (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes()))).collect())
    }

    #[test]
    fn unset_takes_every_copy_and_keeps_the_order() {
        let mut h = list(&[("A", "1"), ("Content-Length", "5"), ("B", "2"), ("content-length", "6"), ("C", "3")]);
        h.unset("content-length");
        assert_eq!(h.0, list(&[("A", "1"), ("B", "2"), ("C", "3")]).0);
        h.unset("x");
        assert_eq!(h.0, list(&[("A", "1"), ("B", "2"), ("C", "3")]).0);
        h.unset("C");
        h.unset("a");
        assert_eq!(h.0, list(&[("B", "2")]).0);
    }
}
