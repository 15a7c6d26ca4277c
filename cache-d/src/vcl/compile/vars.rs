//! Variables: where each can be read and written (vcl-var(7)), and the
//! closures that read and write them.

use super::program::*;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, unsupported, VclError};
use crate::vcl::model::*;
use bytes::Bytes;
use common::log::vsl::Tag;

pub(super) const fn mask(subs: &[Sub]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < subs.len() {
        m |= 1 << subs[i] as u32;
        i += 1;
    }
    m
}

const CLIENT: u32 = mask(&[Sub::Recv, Sub::Pipe, Sub::Pass, Sub::Hash, Sub::Purge, Sub::Hit, Sub::Miss, Sub::Deliver, Sub::Synth]);
const BACKEND: u32 = mask(&[Sub::BackendFetch, Sub::BackendResponse, Sub::BackendError]);
const ALL: u32 = CLIENT | BACKEND | mask(&[Sub::Init, Sub::Fini]);
const BERESP: u32 = mask(&[Sub::BackendResponse, Sub::BackendError]);
const BEREQ: u32 = BACKEND | mask(&[Sub::Pipe]);
const RESP: u32 = mask(&[Sub::Deliver, Sub::Synth]);
const HIT: u32 = mask(&[Sub::Hit]);

/// Where a variable can be read and where written (vcl-var(7)), as masks
/// of subroutines. Names ending in '.' are header prefixes.
pub(super) const ACCESS: &[(&str, u32, u32)] = &[
    ("now", ALL, 0),
    ("server.hostname", ALL, 0),
    ("server.identity", ALL, 0),
    ("server.ip", CLIENT | BACKEND, 0),
    ("local.ip", CLIENT | BACKEND, 0),
    ("client.ip", CLIENT | BACKEND, 0),
    ("remote.ip", CLIENT | BACKEND, 0),
    ("client.identity", CLIENT | BACKEND, CLIENT),
    ("sess.xid", CLIENT | BACKEND, 0),
    ("sess.timeout_idle", CLIENT, CLIENT),
    ("local.endpoint", CLIENT | BACKEND, 0),
    ("local.socket", CLIENT | BACKEND, 0),
    ("req.method", CLIENT, CLIENT),
    ("req.url", CLIENT, CLIENT),
    // Read only, as in Varnish 7.1.
    ("req.proto", CLIENT, CLIENT),
    ("req.http.", CLIENT, CLIENT),
    ("req.xid", CLIENT, 0),
    ("req.time", CLIENT, 0),
    ("req.transport", CLIENT, 0),
    ("req.hash", mask(&[Sub::Hit, Sub::Miss, Sub::Pass, Sub::Purge, Sub::Deliver]), 0),
    ("req.restarts", CLIENT, 0),
    ("req.esi_level", CLIENT, 0),
    // VCL 4.0's switch; accepted in 4.1 too.
    ("req.esi", CLIENT, CLIENT),
    ("req_top.method", CLIENT, 0),
    ("req_top.url", CLIENT, 0),
    ("req_top.proto", CLIENT, 0),
    ("req_top.time", CLIENT, 0),
    ("req_top.http.", CLIENT, 0),
    ("req.can_gzip", CLIENT, 0),
    ("req.is_hitmiss", CLIENT, 0),
    ("req.is_hitpass", CLIENT, 0),
    ("req.ttl", CLIENT, CLIENT),
    ("req.grace", CLIENT, CLIENT),
    ("req.hash_always_miss", CLIENT, mask(&[Sub::Recv])),
    ("req.hash_ignore_busy", CLIENT, mask(&[Sub::Recv])),
    ("req.hash_ignore_vary", CLIENT, mask(&[Sub::Recv])),
    ("req.backend_hint", CLIENT, CLIENT),
    ("bereq.method", BEREQ, BEREQ),
    ("bereq.url", BEREQ, BEREQ),
    // Writable in VCL 4.0 only (see access).
    ("bereq.proto", BEREQ, BEREQ),
    ("bereq.http.", BEREQ, BEREQ),
    ("bereq.xid", BACKEND, 0),
    ("bereq.time", BEREQ, 0),
    ("bereq.hash", BEREQ, 0),
    ("bereq.retries", BACKEND, 0),
    ("bereq.connect_timeout", BEREQ, BEREQ),
    ("bereq.first_byte_timeout", BACKEND, BACKEND),
    ("bereq.between_bytes_timeout", BACKEND, BACKEND),
    ("bereq.uncacheable", BACKEND, 0),
    ("bereq.is_bgfetch", BACKEND, 0),
    ("bereq.is_hitmiss", BACKEND, 0),
    ("bereq.is_hitpass", BACKEND, 0),
    ("bereq.backend", BEREQ, BEREQ),
    ("beresp.status", BERESP, BERESP),
    ("beresp.reason", BERESP, BERESP),
    ("beresp.proto", BERESP, BERESP),
    ("beresp.time", BERESP, 0),
    ("beresp.http.", BERESP, BERESP),
    ("beresp.ttl", BERESP, BERESP),
    ("beresp.grace", BERESP, BERESP),
    ("beresp.keep", BERESP, BERESP),
    ("beresp.uncacheable", BERESP, BERESP),
    ("beresp.do_stream", BERESP, BERESP),
    ("beresp.do_gzip", BERESP, BERESP),
    ("beresp.do_gunzip", BERESP, BERESP),
    // cachekit's own: a Brotli copy next to the object (cache-vcl(7)).
    ("beresp.do_brotli", BERESP, BERESP),
    ("beresp.do_esi", BERESP, BERESP),
    ("beresp.filters", BERESP, BERESP),
    ("beresp.was_304", BERESP, 0),
    ("beresp.age", BERESP, 0),
    ("beresp.backend.name", BERESP, 0),
    ("beresp.backend", BERESP, 0),
    ("beresp.storage", BERESP, BERESP),
    // Varnish 4.x's string form, still accepted (7.1 warns).
    ("beresp.storage_hint", BERESP, BERESP),
    ("obj.status", HIT, 0),
    ("obj.reason", HIT, 0),
    ("obj.proto", HIT, 0),
    ("obj.http.", HIT, 0),
    // vcl-var(7), 7.1: these are readable in vcl_deliver too.
    ("obj.ttl", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.grace", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.keep", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.age", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.time", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.hits", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.uncacheable", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.storage", HIT | mask(&[Sub::Deliver]), 0),
    ("obj.can_esi", HIT | mask(&[Sub::Deliver]), 0),
    ("resp.status", RESP, RESP),
    ("resp.reason", RESP, RESP),
    ("resp.proto", RESP, RESP),
    ("resp.filters", mask(&[Sub::Deliver]), mask(&[Sub::Deliver])),
    ("resp.time", RESP, 0),
    ("resp.http.", RESP, RESP),
    ("resp.is_streaming", RESP, 0),
    ("resp.do_esi", mask(&[Sub::Deliver]), mask(&[Sub::Deliver])),
    ("resp.body", 0, mask(&[Sub::Synth])),
    ("beresp.body", 0, mask(&[Sub::BackendError])),
];

pub(super) fn subs_in(m: u32) -> String {
    let names: Vec<&str> = Sub::ALL.iter().filter(|s| m & (1 << **s as u32) != 0).map(|s| s.name()).collect();
    if names.is_empty() {
        "nowhere".into()
    } else {
        names.join(", ")
    }
}

/// Check that `name` may be read (or written) in every subroutine the code
/// runs in.
pub(super) fn access(name: &str, write: bool, pos: Pos, sc: &Scope<'_>) -> Result<(), VclError> {
    let entry = ACCESS.iter().find(|(n, _, _)| if n.ends_with('.') { name.starts_with(n) && name.len() > n.len() } else { *n == name });
    let Some((_, r, w)) = entry else {
        return err(format!("Unknown variable '{name}'"), pos);
    };
    let m = if write { *w } else { *r };
    // The *.proto variables are writable in VCL 4.0 only (vcl-var(7)).
    if write && (m == 0 || (name.ends_with(".proto") && sc.version >= 4.1)) {
        return err(format!("Variable '{name}' is read only"), pos);
    }
    for s in &sc.ctx {
        if m & (1 << *s as u32) == 0 {
            let how = if write { "cannot be set" } else { "is not available" };
            return err(format!("'{name}' {how} in {} (it can be in: {})", s.name(), subs_in(m)), pos);
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
pub(super) enum Hdrs {
    Req,
    /// req_top.http.*: the top request's (the request's own at level 0).
    ReqTop,
    Bereq,
    Beresp,
    Obj,
    Resp,
}

pub(super) fn headers<'t>(t: &'t Task<'_>, w: Hdrs) -> Option<&'t Headers> {
    match w {
        Hdrs::Req => t.req.as_deref().map(|r| &r.headers),
        Hdrs::ReqTop => t.req.as_deref().map(|r| r.top.as_ref().map_or(&r.headers, |top| &top.headers)),
        Hdrs::Bereq => t.bereq.as_deref().map(|r| &r.headers),
        Hdrs::Beresp => t.beresp.as_deref().map(|r| &r.headers),
        Hdrs::Obj => t.obj.map(|r| &r.headers),
        Hdrs::Resp => t.resp.as_deref().map(|r| &r.headers),
    }
}

pub(super) fn headers_mut<'t>(t: &'t mut Task<'_>, w: Hdrs) -> Option<&'t mut Headers> {
    match w {
        Hdrs::Req => t.req.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Bereq => t.bereq.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Beresp => t.beresp.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Resp => t.resp.as_deref_mut().map(|r| &mut r.headers),
        Hdrs::Obj | Hdrs::ReqTop => None,
    }
}

pub(super) fn header_prefix(name: &str) -> Option<(Hdrs, &str)> {
    [
        ("req.http.", Hdrs::Req),
        ("req_top.http.", Hdrs::ReqTop),
        ("bereq.http.", Hdrs::Bereq),
        ("beresp.http.", Hdrs::Beresp),
        ("obj.http.", Hdrs::Obj),
        ("resp.http.", Hdrs::Resp),
    ]
    .into_iter()
    .find_map(|(p, w)| name.strip_prefix(p).map(|h| (w, h)))
}

/// `set` (or `unset`, with no value) of header `h`. Where the headers
/// were logged before the subroutine ran (req, beresp), the change is
/// logged as Varnish logs it: the values taken away (ReqUnset...), then
/// the new one (ReqHeader...).
fn set_header(t: &mut Task<'_>, w: Hdrs, h: &str, v: Val) {
    let new = match v {
        Val::None => None,
        v => match header_value(t, h, &v) {
            Some(b) => Some(b),
            None => return,
        },
    };
    let (tags, logged) = match w {
        Hdrs::Req => (Some((Tag::ReqUnset, Tag::ReqHeader)), t.req.as_deref().map(|r| &r.headers)),
        Hdrs::Beresp => (Some((Tag::BerespUnset, Tag::BerespHeader)), t.beresp.as_deref().map(|r| &r.headers)),
        _ => (None, None),
    };
    if let (Some((unset, _)), Some(hs), Some((log, vxid, side))) = (tags, logged, t.log.as_mut()) {
        for (n, old) in hs.iter().filter(|(n, _)| n.eq_ignore_ascii_case(h.as_bytes())) {
            log.rec_parts(unset, *side, *vxid, &[n, b": ", old]);
        }
    }
    let Some(hs) = headers_mut(t, w) else { return };
    let Some(b) = new else { return hs.unset(h) };
    hs.set(h, b.clone());
    if let (Some((_, set)), Some((log, vxid, side))) = (tags, t.log.as_mut()) {
        log.rec_parts(set, *side, *vxid, &[h.as_bytes(), b": ", &b]);
    }
}

/// A value fit for the wire: no CR or LF (a header value with one would
/// split the message).
pub(super) fn wire_text(t: &mut Task<'_>, what: &str, v: &Val) -> Option<Bytes> {
    let s = v.text();
    if s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        fail(t, format!("{what}: the value contains CR, LF or NUL"));
        return None;
    }
    Some(Bytes::from(s))
}

/// A header value VCL sets: with feature validate_headers (the default)
/// only tab and visible characters, else the task fails as Varnish's
/// VRT_SetHdr does ("Bad header NAME: VALUE"); with the feature off,
/// anything, the operator's risk.
fn header_value(t: &mut Task<'_>, name: &str, v: &Val) -> Option<Bytes> {
    let s = v.text();
    let valid = |b: u8| (b >= 0x20 && b != 0x7f) || b == b'\t';
    if t.env.validate_headers() && !s.bytes().all(valid) {
        fail(t, format!("Bad header {name}: {s}"));
        return None;
    }
    Some(Bytes::from(s))
}

/// A value for the request line (method, URL): wire text without spaces
/// either (a space would make the backend read another request line), and
/// not empty.
fn wire_token(t: &mut Task<'_>, what: &str, v: &Val) -> Option<Bytes> {
    let b = wire_text(t, what, v)?;
    if b.is_empty() || b.iter().any(|c| c.is_ascii_whitespace()) {
        fail(t, format!("{what}: the value is empty or contains white space"));
        return None;
    }
    Some(b)
}

/// A protocol VCL 4.0 sets (req.proto and the like): not empty (Varnish's
/// "Setting req.proto to empty string").
fn proto_val(t: &mut Task<'_>, what: &str, v: &Val) -> Option<Bytes> {
    let b = wire_text(t, what, v)?;
    if b.is_empty() {
        fail(t, format!("Setting {what} to empty string"));
        return None;
    }
    Some(b)
}

/// A status VCL sets on `obj` (resp, beresp): up to 65535, its last three
/// digits 100 or more (Varnish's checks and messages).
fn status_val(t: &mut Task<'_>, obj: &str, v: &Val) -> Option<u16> {
    let n = v.num().map_or(-1, |n| n as i64);
    let msg = match n {
        n if n < 0 => format!("{obj}.status ({}) is negative", v.text()),
        n if n > 65535 => format!("{obj}.status ({n}) > 65535"),
        n if n % 1000 < 100 => format!("illegal {obj}.status ({n}) (..0##)"),
        n => return Some(n as u16),
    };
    fail(t, msg);
    None
}

/// A beresp.do_* knob beresp.filters fixes: reading it once the list is
/// set fails the task (Varnish's beresp_filter_fixed).
fn knob_get(name: &str, f: fn(&Beresp) -> bool) -> ExprFn {
    let knob = name.trim_start_matches("beresp.").to_string();
    Box::new(move |t, _| match t.beresp.as_deref().map(|b| (b.filters.is_some(), f(b))) {
        Some((true, _)) => {
            fail(t, format!("beresp.filters are already fixed, beresp.{knob} is undefined"));
            Val::Bool(false)
        }
        Some((false, v)) => Val::Bool(v),
        None => Val::None,
    })
}

/// May a beresp.do_* knob still be set? Not once beresp.filters is.
fn knob_free(t: &mut Task<'_>, b: &Beresp, knob: &str) -> bool {
    if b.filters.is_some() {
        fail(t, format!("beresp.filters are already fixed, beresp.{knob} is undefined"));
        return false;
    }
    true
}

/// req.hash, bereq.hash: the SHA-256 of what vcl_hash hashed, a BLOB.
fn digest(key: &[u8]) -> Val {
    use sha2::Digest;
    super::vmod::blob(&sha2::Sha256::digest(key))
}

fn text(b: &Bytes) -> Val {
    Val::Str(String::from_utf8_lossy(b).into_owned())
}

fn proto(minor: u8) -> Val {
    Val::Str(crate::http1::head::proto_name(minor).into())
}

macro_rules! get {
    ($field:ident, |$x:ident| $e:expr) => {
        Box::new(|t: &mut Task<'_>, _: &Compiled| t.$field.as_deref().map(|$x| $e).unwrap_or(Val::None))
    };
}

macro_rules! set {
    ($field:ident, |$t:ident, $x:ident, $v:ident| $e:expr) => {
        Box::new(|$t: &mut Task<'_>, $v: Val| {
            if let Some($x) = $t.$field.take() {
                $e;
                $t.$field = Some($x);
            }
        })
    };
}

/// `storage.NAME` (a store, as a string: storage.NAME) and its
/// `.free_space`, `.used_space` (BYTES) and `.happy` (always true: a
/// store here is never sick).
fn storage_symbol(rest: &str, pos: Pos) -> Result<ExprFn, VclError> {
    let (name, field) = rest.split_once('.').unwrap_or((rest, ""));
    if !crate::cache::spec::names().iter().any(|s| s == name) {
        return err(format!("Symbol not found: 'storage.{rest}' (the stores are: {})", crate::cache::spec::names().join(", ")), pos);
    }
    let n = name.to_string();
    Ok(match field {
        "" => Box::new(move |_, _| Val::Str(format!("storage.{n}"))),
        "free_space" => Box::new(move |t, _| Val::Bytes(t.env.storage_space(&n).map_or(0, |s| s.1))),
        "used_space" => Box::new(move |t, _| Val::Bytes(t.env.storage_space(&n).map_or(0, |s| s.0))),
        "happy" => Box::new(|_, _| Val::Bool(true)),
        f => return err(format!("Symbol not found: 'storage.{name}.{f}' (a store has free_space, used_space and happy)"), pos),
    })
}

/// A name that is not a variable: true, false, a backend, a store.
fn symbol(name: &str, pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    if name == "true" || name == "false" {
        let b = name == "true";
        return Some(Ok(Box::new(move |_, _| Val::Bool(b))));
    }
    if sc.backends.iter().any(|b| b == name) {
        let b = name.to_string();
        return Some(Ok(Box::new(move |_, _| Val::Backend(b.clone()))));
    }
    name.strip_prefix("storage.").map(|rest| storage_symbol(rest, pos))
}

/// The variables of the connection (server.*, client.*, local.*,
/// remote.ip, sess.xid, req.transport), the clock (now, *.time) and the
/// digest (req.hash, bereq.hash); None for another name.
fn conn_var(name: &str) -> Option<ExprFn> {
    Some(match name {
        "now" => Box::new(|_, _| Val::Time(crate::util::now())),
        "server.hostname" | "server.identity" => {
            let host = crate::util::hostname();
            Box::new(move |_, _| Val::Str(host.clone()))
        }
        "server.ip" => Box::new(|t, _| t.ends.as_ref().map(|e| Val::Ip(e.server.ip(), e.server.port())).unwrap_or(Val::None)),
        "local.ip" => Box::new(|t, _| t.ends.as_ref().map(|e| Val::Ip(e.local.ip(), e.local.port())).unwrap_or(Val::None)),
        "client.ip" => Box::new(|t, _| t.ends.as_ref().map(|e| Val::Ip(e.client.ip(), e.client.port())).unwrap_or(Val::None)),
        "remote.ip" => Box::new(|t, _| t.ends.as_ref().map(|e| Val::Ip(e.remote.ip(), e.remote.port())).unwrap_or(Val::None)),
        // As vcl_recv set it (the fetch has the request's), else the
        // client's address.
        "client.identity" => Box::new(|t, _| {
            let set = t.req.as_deref().map(|r| &r.client_identity).or(t.bereq.as_deref().map(|r| &r.client_identity));
            match set.and_then(|s| s.clone()) {
                Some(id) => Val::Str(id),
                None => t.ends.as_ref().map(|e| Val::Str(e.client.ip().to_string())).unwrap_or(Val::None),
            }
        }),
        "sess.xid" => Box::new(|t, _| t.ends.as_ref().map(|e| Val::Str(e.xid.to_string())).unwrap_or(Val::None)),
        "local.socket" => Box::new(|t, _| t.ends.as_ref().and_then(|e| e.socket.as_deref()).map_or(Val::None, |s| Val::Str(s.into()))),
        // A Unix socket's path, else the address the connection came to.
        "local.endpoint" => Box::new(|t, _| {
            t.ends.as_ref().map_or(Val::None, |e| Val::Str(e.path.as_deref().map_or_else(|| e.local.to_string(), str::to_string)))
        }),
        "req.time" => get!(req, |r| Val::Time(r.time)),
        "sess.timeout_idle" => get!(req, |r| Val::Dur(r.timeout_idle)),
        "req_top.time" => get!(req, |r| Val::Time(r.top.as_ref().map_or(r.time, |t| t.time))),
        // The name of the request's transport: an ESI include has its own.
        "req.transport" => get!(req, |r| Val::Str(
            match (r.esi_level, r.minor) {
                (1.., _) => "ESI_INCLUDE",
                (_, 2) => "HTTP/2",
                _ => "HTTP/1",
            }
            .into()
        )),
        "req.hash" => get!(req, |r| r.hash.as_ref().map_or(Val::None, |h| digest(h))),
        "bereq.hash" => get!(bereq, |r| r.hash.as_ref().map_or(Val::None, |h| digest(h))),
        "bereq.time" => get!(bereq, |r| Val::Time(r.time)),
        // When the response arrived, when delivery began: now is close.
        "beresp.time" | "resp.time" => Box::new(|_, _| Val::Time(crate::util::now())),
        _ => return None,
    })
}

/// The do_* knobs and the filter lists (see [`crate::vcl::filters`]).
fn filter_get(name: &str) -> Option<ExprFn> {
    Some(match name {
        "beresp.do_gzip" => knob_get(name, |b| b.do_gzip),
        "beresp.do_gunzip" => knob_get(name, |b| b.do_gunzip),
        "beresp.do_esi" => knob_get(name, |b| b.do_esi),
        "beresp.filters" => get!(beresp, |b| Val::Str(b.filters.clone().unwrap_or_else(|| crate::vcl::filters::beresp_default(b)))),
        "resp.do_esi" => Box::new(|t, _| match t.resp.as_deref().map(|r| (r.filters.is_some(), r.do_esi)) {
            Some((true, _)) => {
                fail(t, "resp.filters are already fixed, resp.do_esi is undefined".into());
                Val::Bool(false)
            }
            Some((false, v)) => Val::Bool(v),
            None => Val::None,
        }),
        "resp.filters" => Box::new(|t, _| match t.resp.as_deref().and_then(|r| r.filters.clone()) {
            Some(f) => Val::Str(f),
            None => Val::Str(crate::vcl::filters::resp_default(t)),
        }),
        _ => return None,
    })
}

/// The object's variables (vcl_hit, vcl_deliver).
fn obj_get(name: &str) -> Option<ExprFn> {
    Some(match name {
        "obj.status" => Box::new(|t, _| t.obj.map(|o| Val::Int(o.status as i64)).unwrap_or(Val::None)),
        "obj.reason" => Box::new(|t, _| t.obj.map(|o| text(&o.reason)).unwrap_or(Val::None)),
        "obj.proto" => Box::new(|_, _| Val::Str("HTTP/1.1".into())),
        "obj.ttl" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.ttl)).unwrap_or(Val::None)),
        "obj.grace" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.grace)).unwrap_or(Val::None)),
        "obj.keep" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.keep)).unwrap_or(Val::None)),
        "obj.age" => Box::new(|t, _| t.obj.map(|o| Val::Dur(o.age)).unwrap_or(Val::None)),
        "obj.time" => Box::new(|t, _| t.obj.map(|o| Val::Time(crate::util::now() - o.age)).unwrap_or(Val::None)),
        "obj.hits" => Box::new(|t, _| t.obj.map(|o| Val::Int(o.hits as i64)).unwrap_or(Val::None)),
        "obj.uncacheable" => Box::new(|t, _| t.obj.map(|o| Val::Bool(o.uncacheable)).unwrap_or(Val::None)),
        "obj.can_esi" => Box::new(|t, _| t.obj.map(|o| Val::Bool(o.can_esi)).unwrap_or(Val::None)),
        // The stores are opened in the order of their names.
        "obj.storage" => Box::new(|t, _| {
            t.obj.map_or(Val::None, |o| {
                let name = o.stv.and_then(|i| crate::cache::spec::names().get(usize::from(i)).cloned());
                Val::Str(format!("storage.{}", name.as_deref().unwrap_or(crate::cache::spec::TRANSIENT)))
            })
        }),
        _ => return None,
    })
}

/// Setting the do_* knobs and the filter lists.
fn filter_set(name: &str) -> Option<SetFn> {
    Some(match name {
        "beresp.do_gzip" => set!(beresp, |t, b, v| if knob_free(t, b, "do_gzip") {
            b.do_gzip = v.truthy()
        }),
        "beresp.do_gunzip" => set!(beresp, |t, b, v| if knob_free(t, b, "do_gunzip") {
            b.do_gunzip = v.truthy()
        }),
        "beresp.filters" => set!(beresp, |t, b, v| crate::vcl::filters::beresp_set(b, &v.text())),
        "beresp.do_esi" => set!(beresp, |t, b, v| if knob_free(t, b, "do_esi") {
            b.do_esi = v.truthy()
        }),
        // Only turning it off means anything: an object without ESI
        // instructions has nothing to follow.
        "resp.do_esi" => set!(resp, |t, r, v| if r.filters.is_some() {
            fail(t, "resp.filters are already fixed, resp.do_esi is undefined".into())
        } else {
            r.do_esi = r.do_esi && v.truthy()
        }),
        // The list is kept as set; of its filters, ESI is followed only
        // when it names esi.
        "resp.filters" => set!(resp, |t, r, v| {
            let list = v.text();
            r.do_esi &= list.split_ascii_whitespace().any(|f| f == "esi");
            r.filters = Some(list.split_ascii_whitespace().collect::<Vec<_>>().join(" "));
        }),
        _ => return None,
    })
}

/// A variable's value.
pub(super) fn var_get(name: &str, pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    if let Some(v) = symbol(name, pos, sc) {
        return v;
    }
    access(name, false, pos, sc)?;
    if let Some((w, h)) = header_prefix(name) {
        let h = h.to_string();
        return Ok(Box::new(move |t, _| headers(t, w).and_then(|hs| hs.get(&h)).map(text).unwrap_or(Val::None)));
    }
    if let Some(f) = conn_var(name).or_else(|| filter_get(name)).or_else(|| obj_get(name)) {
        return Ok(f);
    }
    Ok(match name {
        "req.method" => get!(req, |r| text(&r.method)),
        "req.url" => get!(req, |r| text(&r.url)),
        "req.proto" => get!(req, |r| Val::Str(String::from_utf8_lossy(r.proto()).into_owned())),
        "req.xid" => get!(req, |r| Val::Int(r.xid as i64)),
        "req.restarts" => get!(req, |r| Val::Int(r.restarts as i64)),
        "req.esi_level" => get!(req, |r| Val::Int(r.esi_level as i64)),
        "req.esi" => get!(req, |r| Val::Bool(!r.disable_esi)),
        "req_top.method" => get!(req, |r| Val::Str(String::from_utf8_lossy(r.top.as_ref().map_or(&r.method, |t| &t.method)).into_owned())),
        "req_top.url" => get!(req, |r| Val::Str(String::from_utf8_lossy(r.top.as_ref().map_or(&r.url, |t| &t.url)).into_owned())),
        "req_top.proto" => get!(req, |r| proto(r.top.as_ref().map_or(r.minor, |t| t.minor))),
        "req.can_gzip" => get!(req, |r| Val::Bool(crate::gzip::can_gzip(&r.headers))),
        "req.is_hitmiss" => get!(req, |r| Val::Bool(r.is_hitmiss)),
        "req.is_hitpass" => get!(req, |r| Val::Bool(r.is_hitpass)),
        "req.ttl" => get!(req, |r| r.ttl.map(Val::Dur).unwrap_or(Val::Dur(-1.0))),
        "req.grace" => get!(req, |r| r.grace.map(Val::Dur).unwrap_or(Val::Dur(-1.0))),
        "req.hash_always_miss" => get!(req, |r| Val::Bool(r.hash_always_miss)),
        "req.hash_ignore_busy" => get!(req, |r| Val::Bool(r.hash_ignore_busy)),
        "req.hash_ignore_vary" => get!(req, |r| Val::Bool(r.hash_ignore_vary)),
        "req.backend_hint" => {
            let default = default_backend(sc.backends).unwrap_or("default").to_string();
            Box::new(move |t, _| {
                t.req.as_deref().map(|r| Val::Backend(r.backend_hint.clone().unwrap_or_else(|| default.clone()))).unwrap_or(Val::None)
            })
        }
        "bereq.method" => get!(bereq, |r| text(&r.method)),
        "bereq.url" => get!(bereq, |r| text(&r.url)),
        "bereq.proto" => get!(bereq, |r| proto(r.minor)),
        "bereq.xid" => get!(bereq, |r| Val::Int(r.xid as i64)),
        "bereq.retries" => get!(bereq, |r| Val::Int(r.retries as i64)),
        // Until VCL sets them they read as 0, as in Varnish 7.1.
        "bereq.connect_timeout" => get!(bereq, |r| Val::Dur(r.connect_timeout.unwrap_or(0.0))),
        "bereq.first_byte_timeout" => get!(bereq, |r| Val::Dur(r.first_byte_timeout.unwrap_or(0.0))),
        "bereq.between_bytes_timeout" => get!(bereq, |r| Val::Dur(r.between_bytes_timeout.unwrap_or(0.0))),
        "bereq.uncacheable" => get!(bereq, |r| Val::Bool(r.uncacheable)),
        "bereq.is_bgfetch" => get!(bereq, |r| Val::Bool(r.is_bgfetch)),
        "bereq.is_hitmiss" => get!(bereq, |r| Val::Bool(r.is_hitmiss)),
        "bereq.is_hitpass" => get!(bereq, |r| Val::Bool(r.is_hitpass)),
        "bereq.backend" => {
            let default = default_backend(sc.backends).unwrap_or("default").to_string();
            Box::new(move |t, _| {
                t.bereq.as_deref().map(|r| Val::Backend(r.backend.clone().unwrap_or_else(|| default.clone()))).unwrap_or(Val::None)
            })
        }
        "beresp.status" => get!(beresp, |b| Val::Int(vcl_status(b.status, b.vcl_status) as i64)),
        "beresp.reason" => get!(beresp, |b| text(&b.reason)),
        "beresp.proto" => get!(beresp, |b| b.proto.as_ref().map_or(Val::Str("HTTP/1.1".into()), text)),
        "beresp.ttl" => get!(beresp, |b| Val::Dur(b.ttl)),
        "beresp.grace" => get!(beresp, |b| Val::Dur(b.grace)),
        "beresp.keep" => get!(beresp, |b| Val::Dur(b.keep)),
        "beresp.age" => get!(beresp, |b| Val::Dur(b.age)),
        "beresp.uncacheable" => get!(beresp, |b| Val::Bool(b.uncacheable)),
        "beresp.do_stream" => get!(beresp, |b| Val::Bool(b.do_stream)),
        "beresp.do_brotli" => get!(beresp, |b| Val::Bool(b.do_brotli)),
        "beresp.storage" => get!(beresp, |b| Val::Str(format!("storage.{}", b.storage))),
        "beresp.storage_hint" => get!(beresp, |b| Val::Str(b.storage.clone())),
        "beresp.was_304" => get!(beresp, |b| Val::Bool(b.was_304)),
        "beresp.backend.name" | "beresp.backend" => get!(beresp, |b| Val::Str(b.backend.clone())),
        "resp.status" => get!(resp, |r| Val::Int(vcl_status(r.status, r.vcl_status) as i64)),
        "resp.reason" => get!(resp, |r| text(&r.reason)),
        "resp.proto" => get!(resp, |r| r.proto.as_ref().map_or(Val::Str("HTTP/1.1".into()), text)),
        "resp.is_streaming" => get!(resp, |r| Val::Bool(r.is_streaming)),
        _ => return unsupported(&format!("Reading '{name}'"), pos),
    })
}

/// A variable that can be written (or unset).
pub(super) fn var_set(name: &str, pos: Pos, sc: &Scope<'_>) -> Result<SetFn, VclError> {
    access(name, true, pos, sc)?;
    if let Some((w, h)) = header_prefix(name) {
        let h = h.to_string();
        return Ok(Box::new(move |t, v| set_header(t, w, &h, v)));
    }
    if let Some(f) = filter_set(name) {
        return Ok(f);
    }
    fn dur(v: &Val) -> Option<f64> {
        v.num()
    }
    Ok(match name {
        "req.method" => set!(req, |t, r, v| if let Some(b) = wire_token(t, "req.method", &v) {
            r.method = b
        }),
        "req.url" => set!(req, |t, r, v| if let Some(b) = wire_token(t, "req.url", &v) {
            r.url = b
        }),
        "req.ttl" => set!(req, |t, r, v| r.ttl = dur(&v)),
        "req.grace" => set!(req, |t, r, v| r.grace = dur(&v)),
        "req.hash_always_miss" => set!(req, |t, r, v| r.hash_always_miss = v.truthy()),
        "req.hash_ignore_busy" => set!(req, |t, r, v| r.hash_ignore_busy = v.truthy()),
        "req.hash_ignore_vary" => set!(req, |t, r, v| r.hash_ignore_vary = v.truthy()),
        "req.backend_hint" => set!(req, |t, r, v| r.backend_hint = Some(v.text())),
        "client.identity" => set!(req, |t, r, v| r.client_identity = Some(v.text())),
        "sess.timeout_idle" => set!(req, |t, r, v| {
            r.timeout_idle = v.num().filter(|d| d.is_finite()).unwrap_or(0.0).max(0.0);
            r.timeout_idle_set = true;
        }),
        "bereq.method" => set!(bereq, |t, r, v| if let Some(b) = wire_token(t, "bereq.method", &v) {
            r.method = b
        }),
        "bereq.url" => set!(bereq, |t, r, v| if let Some(b) = wire_token(t, "bereq.url", &v) {
            r.url = b
        }),
        "bereq.backend" => set!(bereq, |t, r, v| r.backend = Some(v.text())),
        "bereq.proto" => set!(bereq, |t, r, v| if proto_val(t, "bereq.proto", &v).is_some() {
            r.minor = if v.text() == "HTTP/1.0" { 0 } else { 1 }
        }),
        "req.proto" => set!(req, |t, r, v| if let Some(p) = proto_val(t, "req.proto", &v) {
            r.proto = Some(p)
        }),
        "beresp.proto" => set!(beresp, |t, b, v| if let Some(p) = proto_val(t, "beresp.proto", &v) {
            b.proto = Some(p)
        }),
        "resp.proto" => set!(resp, |t, r, v| if let Some(p) = proto_val(t, "resp.proto", &v) {
            r.proto = Some(p)
        }),
        "bereq.connect_timeout" => set!(bereq, |t, r, v| r.connect_timeout = dur(&v).map(|d| d.max(0.0))),
        "bereq.first_byte_timeout" => set!(bereq, |t, r, v| r.first_byte_timeout = dur(&v).map(|d| d.max(0.0))),
        "bereq.between_bytes_timeout" => set!(bereq, |t, r, v| r.between_bytes_timeout = dur(&v).map(|d| d.max(0.0))),
        // As resp.status: the reason becomes the status's own.
        "beresp.status" => set!(beresp, |t, b, v| if let Some(s) = status_val(t, "beresp", &v) {
            (b.status, b.vcl_status) = (s % 1000, s);
            b.reason = Bytes::from_static(crate::vcl::builtin::reason_phrase(s % 1000).as_bytes());
        }),
        "beresp.reason" => set!(beresp, |t, b, v| if let Some(r) = wire_text(t, "beresp.reason", &v) {
            b.reason = r
        }),
        "beresp.ttl" => set!(beresp, |t, b, v| b.ttl = dur(&v).unwrap_or(0.0)),
        "beresp.grace" => set!(beresp, |t, b, v| b.grace = dur(&v).unwrap_or(0.0)),
        "beresp.keep" => set!(beresp, |t, b, v| b.keep = dur(&v).unwrap_or(0.0)),
        // Once uncacheable, always: Varnish ignores setting it back.
        "beresp.uncacheable" => set!(beresp, |t, b, v| b.uncacheable |= v.truthy()),
        "beresp.do_stream" => set!(beresp, |t, b, v| b.do_stream = v.truthy()),
        "beresp.do_brotli" => set!(beresp, |t, b, v| b.do_brotli = v.truthy()),
        // A store is named storage.NAME (the hint: NAME); one that does
        // not exist leaves the choice as it was.
        "beresp.storage" | "beresp.storage_hint" => set!(beresp, |t, b, v| {
            let text = v.text();
            let n = text.strip_prefix("storage.").unwrap_or(&text);
            if crate::cache::spec::names().iter().any(|s| s == n) {
                b.storage = n.to_string();
            }
        }),
        "req.esi" => set!(req, |t, r, v| r.disable_esi = !v.truthy()),
        // Digits above 999 stay in VCL; the last three go out, with
        // their own reason (Varnish's http_SetStatus).
        "resp.status" => set!(resp, |t, r, v| if let Some(s) = status_val(t, "resp", &v) {
            (r.status, r.vcl_status) = (s % 1000, s);
            r.reason = Bytes::from_static(crate::vcl::builtin::reason_phrase(s % 1000).as_bytes());
        }),
        "resp.reason" => set!(resp, |t, r, v| if let Some(b) = wire_text(t, "resp.reason", &v) {
            r.reason = b
        }),
        // Varnish 6+: the synthetic body, replaced whole.
        "resp.body" | "beresp.body" => Box::new(|t, v| {
            if let Some(b) = t.body.as_deref_mut() {
                *b = v.text().into_bytes();
            }
        }),
        _ => return unsupported(&format!("Setting '{name}'"), pos),
    })
}
