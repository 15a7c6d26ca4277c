//! The built-in policy's decisions under feature rfc9111 (issue 36): what
//! is looked up, stored and passed where RFC 9111/9110 and Varnish's
//! builtin.vcl differ. [`crate::vcl::builtin`] dispatches here, read once
//! per vcl_recv and vcl_backend_response; with the feature off nothing
//! here runs.
//!
//! - Requests: `Authorization` and `Cookie` are looked up (RFC 9111 §3.5,
//!   §3); a method outside GET/HEAD passes, an unknown one too (Varnish
//!   pipes it), so the invalidation after unsafe methods sees it; CONNECT
//!   still pipes (a tunnel); PRI is still a 405.
//! - Responses, read from the field that governs this cache (as
//!   cache/rfc.rs reads it: `CDN-Cache-Control` (RFC 9213), else
//!   `Surrogate-Control` when it says max-age or no-store, else
//!   `Cache-Control`): `no-store` and `private` are not stored
//!   (hit-for-miss, as the built-in makes it); `must-understand` with a
//!   status RFC 9110 does not define is not stored, with one it does it
//!   overrides `no-store` (§5.2.2.3); the response to a request with
//!   `Authorization` is stored only with `public`, `must-revalidate` or
//!   `s-maxage` (§3.5); a response with `Set-Cookie`, or to a request with
//!   `Cookie`, is stored when the origin gave it explicit freshness
//!   (max-age, s-maxage, Expires) or `public` — RFC 9111 §3 does not
//!   forbid it, and then the origin chose — but not from default_ttl or a
//!   heuristic (see cache-vcl(7) RFC MODE).
//! - Stored stale: a `no-cache` response, and one stale on arrival, is
//!   stored when it can be revalidated (a 200 with ETag or Last-Modified,
//!   some keep left) rather than made hit-for-miss, so that each use makes
//!   a conditional request (RFC 9111 §5.2.2.4, §4.3). `no-cache` with
//!   field names too (`no-cache="Set-Cookie"`): the fields could only be
//!   left out of the stored object by leaving them out for the client
//!   whose request fetched it, which gets the object as stored.

use crate::cache::rfc::{understood, Storing as Directives};
use crate::vcl::model::{Action, Beresp, Headers, Req, Task};

/// What feature rfc9111 makes of a split subroutine's built-in body.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// As Varnish's (vcl_req_host, vcl_beresp_vary, vcl_beresp_hitmiss).
    Varnish,
    /// The body's outcome: `Some` ends the method with that action.
    Decided(Option<Action>),
    /// Not stored: the built-in vcl_beresp_hitmiss follows.
    HitMiss,
}

/// The body of split subroutine `name` under feature rfc9111.
pub fn body(name: &str, t: &mut Task<'_>) -> Decision {
    if let Some(req) = t.req.as_deref() {
        match name {
            "vcl_req_method" => return Decision::Decided(req_method(req)),
            // Looked up: RFC 9111 §3.5 decides on the response, and §3
            // stores responses whatever the request's Cookie.
            "vcl_req_authorization" | "vcl_req_cookie" => return Decision::Decided(None),
            _ => {}
        }
    }
    let Some(b) = t.beresp.as_deref_mut() else { return Decision::Varnish };
    let store = match name {
        "vcl_beresp_stale" => b.ttl > 0.0 || stored_stale(b),
        // With cookies, stored when the origin says it may be, explicitly:
        // not from default_ttl or a heuristic (see cache-vcl(7) RFC MODE).
        "vcl_beresp_cookie" => {
            let cookie = t.bereq.as_deref().is_some_and(|q| q.headers.has("cookie"));
            !(cookie || b.headers.has("set-cookie")) || directives(&b.headers).explicit
        }
        "vcl_beresp_control" => {
            let auth = t.bereq.as_deref().is_some_and(|q| q.headers.has("authorization"));
            control(b, auth)
        }
        _ => return Decision::Varnish,
    };
    match store {
        true => Decision::Decided(None),
        false => Decision::HitMiss,
    }
}

/// vcl_req_method: GET and HEAD are looked up; every other method passes
/// (unknown ones too, which Varnish pipes), but CONNECT, a tunnel, pipes.
fn req_method(req: &Req) -> Option<Action> {
    match &req.method[..] {
        b"PRI" => Some(Action::Synth(405, "Method Not Allowed".into())),
        b"GET" | b"HEAD" => None,
        b"CONNECT" => Some(Action::Pipe),
        _ => Some(Action::Pass),
    }
}

/// vcl_beresp_control: may `b` be stored? A `no-cache` one only stale
/// ([`stored_stale`]).
fn control(b: &mut Beresp, auth: bool) -> bool {
    let d = directives(&b.headers);
    if d.must_understand && !understood(b.status) {
        return false;
    }
    let no_store = d.no_store && !d.must_understand;
    if no_store || d.private || (auth && !d.shareable) {
        return false;
    }
    !d.no_cache || stored_stale(b)
}

/// Stores `b` stale, to be revalidated before any use, if it can be: the
/// next fetch can be made conditional on it (a 200 with ETag or
/// Last-Modified, as fetch/miss.rs's ims_candidate needs) and some of its
/// lifetime (ttl + grace + keep) is left. That lifetime moves into keep;
/// the ttl becomes the smallest positive one, so the lookup still finds
/// the object (it skips ttl 0, as Varnish's HSH_Lookup) while it is stale
/// from its origin on (t_origin + f64::MIN_POSITIVE == t_origin) — but
/// for the requests that waited for this fetch (freshness is judged at
/// a request's start). False: not stored.
fn stored_stale(b: &mut Beresp) -> bool {
    let life = b.ttl + b.grace.max(0.0) + b.keep.max(0.0);
    let validator = b.headers.has("etag") || b.headers.has("last-modified");
    if b.status != 200 || !validator || life <= 0.0 {
        return false;
    }
    (b.ttl, b.grace, b.keep) = (f64::MIN_POSITIVE, 0.0, life);
    true
}

/// The storing directives of the field that governs a shared cache, as
/// cache/rfc.rs reads them for the lifetimes: `CDN-Cache-Control` (when it
/// parses, RFC 9213), else `Surrogate-Control` when it says max-age or
/// no-store, else `Cache-Control` (with Expires).
pub fn directives(h: &Headers) -> Directives {
    crate::cache::rfc::storing(h.iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn headers(hdrs: &[(&str, &str)]) -> Headers {
        Headers(hdrs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect())
    }

    fn beresp(status: u16, hdrs: &[(&str, &str)], ttl: f64) -> Beresp {
        Beresp { status, headers: headers(hdrs), ttl, grace: 10.0, keep: 0.0, ..Beresp::default() }
    }

    #[test]
    fn directives_are_read_from_every_line_with_quoted_lists() {
        let d = directives(&headers(&[("Cache-Control", "no-cache=\"a, B\", max-age=3600"), ("Cache-Control", "Public")]));
        assert_eq!(d, Directives { no_cache: true, shareable: true, max_age: true, explicit: true, any: true, ..Directives::default() });
        let d = directives(&headers(&[("Cache-Control", "No-CaChE, nO-StOrE, must-understand")]));
        assert!(d.no_cache && d.no_store && d.must_understand && !d.private);
        assert!(directives(&headers(&[("Cache-Control", "private=\"set-cookie\"")])).private);
        // A quoted comma does not end the directive.
        let d = directives(&headers(&[("Cache-Control", r#"no-cache="x,\"y", private"#)]));
        assert!(d.no_cache && d.private);
    }

    #[test]
    fn the_targeted_field_governs() {
        let h = headers(&[("CDN-Cache-Control", "max-age=60"), ("Cache-Control", "no-store")]);
        assert_eq!(directives(&h), Directives { max_age: true, explicit: true, any: true, ..Directives::default() });
        // Surrogate-Control only with max-age or no-store (else ESI capabilities).
        let h = headers(&[("Surrogate-Control", "content=\"ESI/1.0\""), ("Cache-Control", "private")]);
        assert!(directives(&h).private);
        let h = headers(&[("Surrogate-Control", "no-store"), ("Cache-Control", "public")]);
        assert!(directives(&h).no_store && !directives(&h).shareable);
        let h = headers(&[("CDN-Cache-Control", "private"), ("Surrogate-Control", "max-age=60")]);
        assert!(directives(&h).private);
    }

    #[test]
    fn what_is_stored() {
        let stored = |status, hdrs: &[(&str, &str)], auth| control(&mut beresp(status, hdrs, 60.0), auth);
        assert!(stored(200, &[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")], false));
        assert!(!stored(200, &[("Cache-Control", "max-age=60, no-store")], false));
        assert!(!stored(200, &[("Cache-Control", "private, max-age=60")], false));
        assert!(!stored(200, &[("Cache-Control", "private=\"set-cookie\", max-age=60")], false));
        // Authorization: only explicitly shareable responses (RFC 9111 §3.5).
        assert!(!stored(200, &[("Cache-Control", "max-age=60")], true));
        for cc in ["max-age=60, public", "max-age=60, must-revalidate", "s-maxage=60"] {
            assert!(stored(200, &[("Cache-Control", cc)], true), "{cc}");
        }
        // must-understand: an unknown status is not stored; a known one overrides no-store.
        assert!(!stored(599, &[("Cache-Control", "max-age=60, must-understand")], false));
        assert!(stored(200, &[("Cache-Control", "max-age=60, must-understand, no-store")], false));
    }

    #[test]
    fn no_cache_is_stored_for_revalidation() {
        let mut b = beresp(200, &[("Cache-Control", "max-age=60, no-cache"), ("ETag", "\"x\"")], 60.0);
        assert!(control(&mut b, false));
        assert_eq!((b.ttl, b.grace, b.keep), (f64::MIN_POSITIVE, 0.0, 70.0));
        assert_eq!(1.8e9 + b.ttl, 1.8e9);
        // Nothing to revalidate with, or no lifetime at all: not stored.
        assert!(!control(&mut beresp(200, &[("Cache-Control", "max-age=60, no-cache")], 60.0), false));
        let mut b = beresp(200, &[("Cache-Control", "no-cache"), ("ETag", "\"x\"")], 0.0);
        b.grace = 0.0;
        assert!(!control(&mut b, false));
        b.keep = 3600.0;
        assert!(control(&mut b, false) && b.keep == 3600.0);
        // Field names: revalidated all the same, the fields kept.
        let mut b = beresp(200, &[("Cache-Control", "no-cache=\"a, b\", max-age=60"), ("A", "1"), ("Last-Modified", "x")], 60.0);
        assert!(control(&mut b, false));
        assert!(b.headers.has("a") && b.keep == 70.0);
    }

    #[test]
    fn stale_on_arrival_is_stored_when_it_can_be_revalidated() {
        let mut b = beresp(200, &[("ETag", "\"x\"")], 0.0);
        b.keep = 3600.0;
        assert!(stored_stale(&mut b));
        assert_eq!((b.ttl, b.grace, b.keep), (f64::MIN_POSITIVE, 0.0, 3610.0));
        let mut b = beresp(404, &[("ETag", "\"x\"")], 0.0);
        b.keep = 3600.0;
        assert!(!stored_stale(&mut b));
        assert!(!stored_stale(&mut beresp(200, &[("Cache-Control", "max-age=0")], -5.0)));
    }

    #[test]
    fn each_split_body_decides() {
        use crate::vcl::model::{Bereq, NoEnv};
        let recv = |name: &str, method: &'static str| {
            let mut r = Req { method: Bytes::from_static(method.as_bytes()), headers: headers(&[("Cookie", "x=1")]), ..Req::default() };
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            body(name, &mut t)
        };
        assert_eq!(recv("vcl_req_cookie", "GET"), Decision::Decided(None));
        assert_eq!(recv("vcl_req_authorization", "GET"), Decision::Decided(None));
        assert_eq!(recv("vcl_req_method", "BREW"), Decision::Decided(Some(Action::Pass)));
        assert_eq!(recv("vcl_req_host", "GET"), Decision::Varnish);
        let response = |name: &str, hdrs: &[(&str, &str)], auth: bool| {
            let mut bereq = Bereq::default();
            if auth {
                bereq.headers = headers(&[("Authorization", "Basic x"), ("Cookie", "c=1")]);
            }
            let mut b = beresp(200, hdrs, 60.0);
            let mut t = Task::new(&NoEnv);
            (t.bereq, t.beresp) = (Some(&mut bereq), Some(&mut b));
            (body(name, &mut t), b.ttl)
        };
        // Set-Cookie: stored with explicit freshness (or public) only.
        for explicit in [("Cache-Control", "max-age=60"), ("Cache-Control", "s-maxage=60"), ("Cache-Control", "public"), ("Expires", "x")] {
            let hdrs = [("Set-Cookie", "a=b"), explicit];
            assert_eq!(response("vcl_beresp_cookie", &hdrs, false), (Decision::Decided(None), 60.0), "{explicit:?}");
        }
        assert_eq!(response("vcl_beresp_cookie", &[("Set-Cookie", "a=b")], false).0, Decision::HitMiss);
        let no_cache =
            [("Set-Cookie", "a=b"), ("Cache-Control", "no-cache, must-revalidate"), ("Expires", "x"), ("CDN-Cache-Control", "no-cache")];
        assert_eq!(response("vcl_beresp_cookie", &no_cache, false).0, Decision::HitMiss);
        assert_eq!(response("vcl_beresp_cookie", &[("Cache-Control", "no-cache")], false).0, Decision::Decided(None));
        // A request with Cookie (and Authorization): the same.
        assert_eq!(response("vcl_beresp_cookie", &[("Cache-Control", "no-cache")], true).0, Decision::HitMiss);
        assert_eq!(response("vcl_beresp_cookie", &[("Cache-Control", "max-age=60")], true).0, Decision::Decided(None));
        assert_eq!(response("vcl_beresp_control", &[("Cache-Control", "max-age=60")], true).0, Decision::HitMiss);
        assert_eq!(response("vcl_beresp_control", &[("Cache-Control", "public")], true).0, Decision::Decided(None));
        let no_cache = response("vcl_beresp_control", &[("Cache-Control", "no-cache"), ("ETag", "\"x\"")], false);
        assert_eq!(no_cache, (Decision::Decided(None), f64::MIN_POSITIVE));
        assert_eq!(response("vcl_beresp_vary", &[("Vary", "*")], false).0, Decision::Varnish);
        assert_eq!(response("vcl_beresp_hitmiss", &[], false).0, Decision::Varnish);
    }

    #[test]
    fn methods() {
        let m = |method: &'static str| req_method(&Req { method: Bytes::from_static(method.as_bytes()), ..Req::default() });
        assert_eq!((m("GET"), m("HEAD")), (None, None));
        for method in ["POST", "PUT", "DELETE", "PATCH", "M-SEARCH", "BREW"] {
            assert_eq!(m(method), Some(Action::Pass), "{method}");
        }
        assert_eq!(m("CONNECT"), Some(Action::Pipe));
        assert_eq!(m("PRI"), Some(Action::Synth(405, "Method Not Allowed".into())));
    }
}
