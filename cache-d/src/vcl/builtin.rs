//! The built-in policy, as `varnishd -x builtin` describes it (7.x): what
//! each subroutine does when the VCL does not decide, and the error page.

use bytes::Bytes;

use crate::vcl::builtin_rfc::{self, Decision};
use crate::vcl::model::{Action, Headers, Req, Sub, Task};
use common::log::vsl::Tag;

const KNOWN_METHODS: [&[u8]; 8] = [b"GET", b"HEAD", b"PUT", b"POST", b"TRACE", b"OPTIONS", b"DELETE", b"PATCH"];

/// Varnish 7's split subroutines: the parts of the built-in vcl_recv and
/// vcl_backend_response a program may define its own version of, with
/// the method each runs in.
pub const SPLIT_SUBS: [(&str, Sub); 9] = [
    ("vcl_req_host", Sub::Recv),
    ("vcl_req_method", Sub::Recv),
    ("vcl_req_authorization", Sub::Recv),
    ("vcl_req_cookie", Sub::Recv),
    ("vcl_beresp_stale", Sub::BackendResponse),
    ("vcl_beresp_cookie", Sub::BackendResponse),
    ("vcl_beresp_control", Sub::BackendResponse),
    ("vcl_beresp_vary", Sub::BackendResponse),
    ("vcl_beresp_hitmiss", Sub::BackendResponse),
];

/// The method a split subroutine runs in, if `name` is one.
pub fn split_method(name: &str) -> Option<Sub> {
    SPLIT_SUBS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Varnish 7's `vcl_builtin_*` subroutines: the built-in half of each
/// method (its vcl_recv is `call vcl_builtin_recv; return (hash);`). A
/// program's own definition is concatenated in front of the built-in body,
/// as libvcc does with every subroutine builtin.vcl defines too.
pub const BUILTIN_PARTS: [(&str, Sub); 12] = [
    ("vcl_builtin_recv", Sub::Recv),
    ("vcl_builtin_pipe", Sub::Pipe),
    ("vcl_builtin_pass", Sub::Pass),
    ("vcl_builtin_hash", Sub::Hash),
    ("vcl_builtin_purge", Sub::Purge),
    ("vcl_builtin_hit", Sub::Hit),
    ("vcl_builtin_miss", Sub::Miss),
    ("vcl_builtin_deliver", Sub::Deliver),
    ("vcl_builtin_synth", Sub::Synth),
    ("vcl_builtin_backend_fetch", Sub::BackendFetch),
    ("vcl_builtin_backend_response", Sub::BackendResponse),
    ("vcl_builtin_backend_error", Sub::BackendError),
];

/// The method whose built-in half `name` is (`vcl_builtin_deliver`).
pub fn builtin_part(name: &str) -> Option<Sub> {
    BUILTIN_PARTS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// What a program's own version of a split subroutine did. It runs before
/// the built-in body (Varnish concatenates the two definitions).
pub enum Split {
    /// Not defined, or it fell through: the built-in body runs.
    Builtin,
    /// A bare `return;`: the built-in body is skipped, its caller goes on.
    Done,
    /// `return (action)`: the method ends with it.
    Return(Action),
}

/// Runs the program's version of a split subroutine (by name).
pub type Hook<'h> = &'h dyn Fn(&str, &mut Task<'_>) -> Split;

/// The built-in subroutines (`varnishd -x builtin`, 7.x).
pub fn builtin(sub: Sub, t: &mut Task<'_>) -> Action {
    builtin_with(sub, t, &|_, _| Split::Builtin)
}

/// [`builtin`], with the program's own `vcl_builtin_*` and split
/// subroutines run by `hook` before the built-in bodies.
pub fn builtin_with(sub: Sub, t: &mut Task<'_>, hook: Hook<'_>) -> Action {
    if let Some((name, _)) = BUILTIN_PARTS.iter().find(|(_, s)| *s == sub) {
        match hook(name, t) {
            Split::Return(a) => return a,
            // `return;` leaves vcl_builtin_*; the method's final return follows.
            Split::Done => return fallthrough(sub),
            Split::Builtin => {}
        }
    }
    match sub {
        Sub::Recv => {
            let parts = ["vcl_req_host", "vcl_req_method", "vcl_req_authorization", "vcl_req_cookie"];
            let rfc = t.env.rfc9111();
            parts.iter().find_map(|p| split_as(p, t, hook, rfc)).unwrap_or(Action::Hash)
        }
        Sub::Hash => {
            if let (Some(req), Some(key)) = (t.req.as_deref(), t.key.as_deref_mut()) {
                builtin_hash(req, key);
                // Each input a Hash record, when vsl_mask lets them through.
                if let Some((log, vxid, side)) = t.log.as_mut().filter(|(l, ..)| l.logs(Tag::Hash)) {
                    for piece in hash_inputs(req) {
                        log.rec(Tag::Hash, *side, *vxid, piece);
                    }
                }
            }
            Action::Lookup
        }
        Sub::Pipe => Action::Pipe,
        Sub::BackendFetch => {
            if let Some(b) = t.bereq.as_deref_mut().filter(|b| &b.method[..] == b"GET") {
                b.no_body = true;
            }
            Action::Fetch
        }
        Sub::Pass | Sub::Miss => Action::Fetch,
        Sub::Purge => Action::Synth(200, "Purged".into()),
        Sub::Hit | Sub::Deliver => Action::Deliver,
        Sub::Synth => {
            let xid = t.req.as_deref().map_or(0, |r| r.xid);
            if let Some(resp) = t.resp.as_deref_mut() {
                error_page(&mut resp.headers, resp.status, &resp.reason, xid, t.body.as_deref_mut());
            }
            Action::Deliver
        }
        Sub::BackendResponse => {
            if t.bereq.as_deref().is_none_or(|b| b.uncacheable) {
                return Action::Deliver;
            }
            let parts = ["vcl_beresp_stale", "vcl_beresp_cookie", "vcl_beresp_control", "vcl_beresp_vary"];
            let rfc = t.env.rfc9111();
            parts.iter().find_map(|p| split_as(p, t, hook, rfc)).unwrap_or(Action::Deliver)
        }
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
/// The status a synth() or error() status goes out as: its last three
/// digits, 503 when they are below 100 (Varnish's rule).
pub fn wire_status(status: u16) -> u16 {
    match status % 1000 {
        s if s < 100 => 503,
        s => s,
    }
}

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

/// One split subroutine: the program's version (through `hook`), then,
/// unless that decided or returned, the built-in body. `Some` ends the
/// method with that action.
pub fn split(name: &str, t: &mut Task<'_>, hook: Hook<'_>) -> Option<Action> {
    let rfc = t.env.rfc9111();
    split_as(name, t, hook, rfc)
}

/// [`split`], feature rfc9111 read once by the caller: on, the bodies
/// [`builtin_rfc::body`] replaces run instead of Varnish's.
pub fn split_as(name: &str, t: &mut Task<'_>, hook: Hook<'_>, rfc: bool) -> Option<Action> {
    match hook(name, t) {
        Split::Return(a) => return Some(a),
        Split::Done => return None,
        Split::Builtin => {}
    }
    if rfc {
        match builtin_rfc::body(name, t) {
            Decision::Varnish => {}
            Decision::Decided(a) => return a,
            Decision::HitMiss => return split_as("vcl_beresp_hitmiss", t, hook, rfc),
        }
    }
    if let Some(req) = t.req.as_deref_mut() {
        match name {
            "vcl_req_host" => return req_host(req),
            "vcl_req_method" => return req_method(req),
            "vcl_req_authorization" => return req.headers.has("authorization").then_some(Action::Pass),
            "vcl_req_cookie" => return req.headers.has("cookie").then_some(Action::Pass),
            _ => {}
        }
    }
    let b = t.beresp.as_deref_mut()?;
    if name == "vcl_beresp_hitmiss" {
        b.ttl = 120.0;
        b.uncacheable = true;
        return Some(Action::Deliver);
    }
    let h = &b.headers;
    let hitmiss = match name {
        "vcl_beresp_stale" => b.ttl <= 0.0,
        "vcl_beresp_cookie" => h.has("set-cookie"),
        "vcl_beresp_control" => match h.has("surrogate-control") {
            true => h.contains_ci("surrogate-control", "no-store"),
            false => ["no-cache", "no-store", "private"].iter().any(|d| h.contains_ci("cache-control", d)),
        },
        // Varnish's builtin takes only a Vary that is exactly `*`; a `*`
        // anywhere in any Vary line (`*, *`, `foo, *`, a second line) also
        // means the response never matches a later request (RFC 9110
        // §12.5.5, RFC 9111 §4.1): cachekit's RFC fix in the default, as
        // no VCL can rely on reusing such a response (cache-tests
        // vary-syntax-*, c1093).
        "vcl_beresp_vary" => {
            h.iter().any(|(n, v)| n.eq_ignore_ascii_case(b"vary") && v.split(|&c| c == b',').any(|e| e.trim_ascii() == b"*"))
        }
        _ => false,
    };
    if hitmiss {
        split_as("vcl_beresp_hitmiss", t, hook, rfc)
    } else {
        None
    }
}

fn req_host(req: &mut Req) -> Option<Action> {
    if let Some(h) = req.headers.get("host") {
        if h.iter().any(u8::is_ascii_uppercase) {
            let lower = Bytes::from(h.to_ascii_lowercase());
            req.headers.set("host", lower);
        }
    }
    if !req.headers.has("host") && req.esi_level == 0 && req.proto() == b"HTTP/1.1" {
        return Some(Action::Synth(400, "Bad Request".into()));
    }
    None
}

fn req_method(req: &Req) -> Option<Action> {
    if &req.method[..] == b"PRI" {
        return Some(Action::Synth(405, "Method Not Allowed".into()));
    }
    if !KNOWN_METHODS.contains(&&req.method[..]) {
        return Some(Action::Pipe);
    }
    if &req.method[..] != b"GET" && &req.method[..] != b"HEAD" {
        return Some(Action::Pass);
    }
    None
}

pub fn builtin_hash(req: &Req, key: &mut Vec<u8>) {
    for piece in hash_inputs(req) {
        key.extend_from_slice(piece);
        key.push(0);
    }
}

/// The built-in vcl_hash's inputs: the URL, then Host (or the address
/// the request came to).
fn hash_inputs(req: &Req) -> [&[u8]; 2] {
    [&req.url, req.headers.get("host").map_or(req.server_ip.as_bytes(), |h| &h[..])]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcl::model::{Bereq, Beresp, NoEnv, Resp};

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
        builtin(Sub::Recv, &mut t)
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
        req_host(&mut r);
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

    fn backend_response(bereq: &Bereq, b: &mut Beresp, hook: Hook<'_>) -> Action {
        let mut bereq = bereq.clone();
        let mut t = Task::new(&NoEnv);
        t.bereq = Some(&mut bereq);
        t.beresp = Some(b);
        builtin_with(Sub::BackendResponse, &mut t, hook)
    }

    #[test]
    fn builtin_backend_response_decisions() {
        let check = |hdrs: &[(&str, &str)], ttl: f64| {
            let mut b = Beresp { status: 200, headers: req("GET", hdrs).headers, ttl, grace: 10.0, ..Beresp::default() };
            let a = backend_response(&Bereq::default(), &mut b, &|_, _| Split::Builtin);
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
        // A `*` anywhere in any Vary line, too (RFC 9110 §12.5.5).
        for vary in
            [&[("Vary", "*, *")][..], &[("Vary", ", *")], &[("Vary", "foo, *")], &[("Vary", " * ,foo")], &[("Vary", "foo"), ("Vary", "*")]]
        {
            assert_eq!(check(vary, 60.0), (true, 120.0), "{vary:?}");
        }
        assert_eq!(check(&[("Vary", "foo, **")], 60.0), (false, 60.0));
        // A pass is delivered as it is.
        let mut b = Beresp { status: 200, ttl: 0.0, ..Beresp::default() };
        let pass = Bereq { uncacheable: true, ..Bereq::default() };
        assert_eq!(backend_response(&pass, &mut b, &|_, _| Split::Builtin), Action::Deliver);
        assert!(!b.uncacheable);
    }

    #[test]
    fn split_subs_run_before_their_builtin_body() {
        // vcl_beresp_stale { return; }: a stale response is not made hit-for-miss.
        let mut b = Beresp { status: 200, ttl: -2.0, ..Beresp::default() };
        let stale_done = |n: &str, _: &mut Task<'_>| if n == "vcl_beresp_stale" { Split::Done } else { Split::Builtin };
        assert_eq!(backend_response(&Bereq::default(), &mut b, &stale_done), Action::Deliver);
        assert!(!b.uncacheable);
        // vcl_req_cookie { return; }: a request with a cookie is looked up.
        let mut r = req("GET", &[("Host", "a"), ("Cookie", "x=1")]);
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        let cookie_done = |n: &str, _: &mut Task<'_>| if n == "vcl_req_cookie" { Split::Done } else { Split::Builtin };
        assert_eq!(builtin_with(Sub::Recv, &mut t, &cookie_done), Action::Hash);
    }

    #[test]
    fn builtin_parts_run_first_and_may_end_or_skip_the_method() {
        let mut r = req("POST", &[("Host", "a")]);
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        // vcl_builtin_recv { return; }: the parts are skipped, return (hash) follows.
        let done = |n: &str, _: &mut Task<'_>| if n == "vcl_builtin_recv" { Split::Done } else { Split::Builtin };
        assert_eq!(builtin_with(Sub::Recv, &mut t, &done), Action::Hash);
        let piped = |n: &str, _: &mut Task<'_>| if n == "vcl_builtin_recv" { Split::Return(Action::Pipe) } else { Split::Builtin };
        assert_eq!(builtin_with(Sub::Recv, &mut t, &piped), Action::Pipe);
        assert_eq!(builtin_with(Sub::Recv, &mut t, &|_, _| Split::Builtin), Action::Pass);
        assert_eq!(builtin_part("vcl_builtin_backend_error"), Some(Sub::BackendError));
        assert_eq!(builtin_part("vcl_builtin_init"), None);
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
        assert_eq!(builtin(Sub::Synth, &mut t), Action::Deliver);
        let page = String::from_utf8(body).unwrap();
        assert!(page.contains("<h1>Error 503 Service Unavailable</h1>") && page.contains("XID: 42"), "{page}");
        assert_eq!(resp.headers.get("retry-after").unwrap(), &b"5"[..]);
    }
}
