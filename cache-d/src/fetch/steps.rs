//! The backend-side state machine: each step is a function of one
//! backend transaction in progress ([`BeTxn`]) that returns the next step;
//! only [`run`]'s loop moves between them.
//!
//! ```text
//! Fetch (vcl_backend_fetch) ─▶ Send ─▶ Response (vcl_backend_response) ─▶ done
//!    ▲                           │            │ retry      │ error
//!    └──── retry ─── Error (vcl_backend_error) ◀───────────┘
//! ```

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};

use crate::cache::ttl::{self, Lifetime};
use crate::cache::ObjRef;
use crate::error::{Error, Side};
use crate::fetch::txn::{Fetch, Response};
use crate::http1::head::{self, Framing};
use crate::req::transport::ReqBody;
use crate::shared::Shared;
use crate::util::{http_date, now};
use crate::vcl::model::{Action, Bereq, Beresp, Ends, Headers, Sub, Task};
use crate::vcl::policy::{run_sub, Policy};

/// How the backend side of a transaction ended. (The response's variant
/// is the large one and the common one, and the value is moved once or
/// twice per fetch: no box, which would be an allocation per fetch.)
#[allow(clippy::large_enum_variant)]
pub enum Fetched {
    /// A response whose body is still to be read, its head as
    /// vcl_backend_response left it; `action` is deliver or pass(ttl).
    Resp { resp: Response, beresp: Beresp, life: Lifetime, action: Action },
    /// vcl_backend_error's synthetic response.
    Synthetic { beresp: Beresp, body: Vec<u8>, life: Lifetime },
    /// Abandoned (or failed) with nothing to deliver.
    Abandoned(Error),
    /// The client's request body could not be read (a pass).
    Client(Error),
}

/// One backend transaction on its way through the steps (Varnish's
/// `struct busyobj`).
pub struct BeTxn<'a, B> {
    pub sh: &'a Shared,
    pub policy: &'a dyn Policy,
    pub f: &'a mut Fetch,
    pub bereq: &'a mut Bereq,
    /// A pass's client, whose request body is streamed to the backend.
    pub client: Option<&'a mut B>,
    /// That body's framing (None: no body).
    pub framing: Framing,
    /// The client's and our address (client.ip, server.ip).
    pub addrs: Ends,
    /// A stale object whose validators made the request conditional: a
    /// 304 refreshes it.
    pub stale: Option<&'a ObjRef>,
    /// The body was kept by std.cache_req_body(): `unset bereq.body` does
    /// not drop it (Varnish 7.1 unsets only a body still with the client).
    pub kept: bool,
    /// The Range the fetch began with (before vcl_backend_fetch): what a
    /// Content-Range must answer.
    range0: Option<Bytes>,
}

/// The steps of the backend side. (A response head is large, but the step
/// value only moves within [`run`]'s loop: no box.)
#[allow(clippy::large_enum_variant)]
enum Step {
    /// vcl_backend_fetch.
    Fetch,
    /// Send the request to the backend vcl_backend_fetch chose.
    Send,
    /// vcl_backend_response on the response head.
    Response(Response),
    /// vcl_backend_error with this status and reason.
    Error(u16, String),
    Done(Fetched),
}

/// Run the backend side to its end: a response to stream, vcl_backend_error's
/// page, or nothing.
pub async fn run<B: ReqBody>(t: &mut BeTxn<'_, B>) -> Fetched {
    // The VCL the fetch runs in comes first, as Varnish logs it.
    t.f.log.rec(Tag::VclUse, LogSide::Backend, t.f.vxid, t.policy.name().as_bytes());
    run_from(t, Step::Fetch).await
}

/// The steps again after a body that failed before anything was delivered
/// (do_stream = false, or an ESI page read whole): vcl_backend_error, which
/// may retry, as Varnish's F_STP_ERROR.
pub async fn run_after_body_error<B: ReqBody>(t: &mut BeTxn<'_, B>) -> Fetched {
    run_from(t, Step::Error(503, "Backend fetch failed".into())).await
}

async fn run_from<B: ReqBody>(t: &mut BeTxn<'_, B>, first: Step) -> Fetched {
    let mut step = first;
    loop {
        step = match step {
            Step::Fetch => vcl_backend_fetch(t),
            Step::Send => send(t).await,
            Step::Response(resp) => vcl_backend_response(t, resp),
            Step::Error(status, reason) => vcl_backend_error(t, status, reason),
            Step::Done(f) => return f,
        };
    }
}

impl<'a, B> BeTxn<'a, B> {
    /// A transaction with no request body to send and nothing stale to
    /// refresh (set `client`/`framing` or `stale` after).
    pub fn new(sh: &'a Shared, policy: &'a dyn Policy, f: &'a mut Fetch, bereq: &'a mut Bereq, addrs: Ends) -> Self {
        let range0 = bereq.headers.get("range").cloned();
        bereq.keep_original();
        BeTxn { sh, policy, f, bereq, client: None, framing: Framing::None, addrs, stale: None, kept: false, range0 }
    }

    /// Run a backend-side subroutine; it sees bereq, and beresp and the
    /// synthetic body where given.
    fn call(&mut self, sub: Sub, beresp: Option<&mut Beresp>, body: Option<&mut Vec<u8>>) -> Action {
        let mut task = Task::new(self.sh);
        task.log = Some((&mut self.f.log, self.f.vxid, LogSide::Backend));
        task.clock = Some(&mut self.f.clock);
        task.bereq = Some(self.bereq);
        task.ends = Some(&self.addrs);
        task.beresp = beresp;
        task.body = body;
        let a = run_sub(self.policy, sub, &mut task);
        if a == Action::Fail {
            self.sh.seg.add(C::VclFail, 1);
        }
        a
    }

    /// May the request be sent again? (Not if its body was streamed.)
    fn can_retry(&self) -> bool {
        self.bereq.retries < self.sh.params().max_retries && (self.framing == Framing::None || self.f.replayable)
    }

    /// Start over from vcl_backend_fetch.
    fn retry(&mut self) -> Step {
        self.bereq.retries += 1;
        self.f.stamp("Retry");
        self.f.retry_txn();
        self.f.errored = false;
        Step::Fetch
    }
}

fn vcl_backend_fetch<B>(t: &mut BeTxn<'_, B>) -> Step {
    match t.call(Sub::BackendFetch, None, None) {
        Action::Fetch => {
            t.f.stamp("Fetch");
            Step::Send
        }
        Action::Error(s, r) => Step::Error(s, r),
        a => Step::Done(Fetched::Abandoned(Error::new(Side::Internal, format!("vcl_backend_fetch returned {}", a.word())))),
    }
}

async fn send<B: ReqBody>(t: &mut BeTxn<'_, B>) -> Step {
    let bereq = &mut *t.bereq;
    // The backend vcl_backend_fetch left in bereq.backend. One named that
    // picks none (a director with every member sick, a dynamic name with
    // no address) fails the fetch, as in Varnish; without a name, the
    // default backend.
    match t.policy.backend(bereq.backend.as_deref(), bereq.hash.as_deref().unwrap_or(&bereq.url)) {
        Some(be) => t.f.be = be,
        None if bereq.backend.is_some() => {
            t.f.error(&Error::new(Side::Backend, "No backend"));
            t.f.stamp("Beresp");
            return Step::Error(503, "Backend fetch failed".into());
        }
        None => t.f.be = t.sh.backend.clone(),
    }
    if let (None, Some(h)) = (bereq.headers.get("host"), t.f.be.cfg.host_header.clone()) {
        bereq.headers.set("Host", Bytes::from(h));
    }
    t.f.vcl_timeouts = [bereq.connect_timeout, bereq.first_byte_timeout, bereq.between_bytes_timeout];
    let mut wire = Vec::with_capacity(1024);
    if bereq.no_body && !t.kept {
        (t.framing, t.client) = (Framing::None, None);
    }
    t.f.build_request(&bereq.method.clone(), bereq, t.framing, &mut wire);
    match t.f.send(t.framing, t.client.as_deref_mut(), &mut wire).await {
        Ok(resp) => Step::Response(resp),
        Err(e) if e.side == Side::Client => Step::Done(Fetched::Client(e)),
        Err(e) => {
            t.f.error(&e);
            // No response: Beresp all the same, as Varnish stamps it
            // after any attempt to get one.
            t.f.stamp("Beresp");
            Step::Error(503, "Backend fetch failed".into())
        }
    }
}

fn vcl_backend_response<B>(t: &mut BeTxn<'_, B>, resp: Response) -> Step {
    // A 304 to a request that was not conditional cannot be stored (a
    // pass delivers it as it is), as Varnish.
    if resp.head.status == 304 && t.stale.is_none() && !t.bereq.uncacheable {
        t.f.close_after = true;
        t.f.release(resp);
        t.f.error(&Error::new(Side::Backend, "304 response but not conditional fetch"));
        return Step::Error(503, "Backend fetch failed".into());
    }
    let (mut beresp, mut life) = beresp_of(t.sh, t.f, &resp, t.stale, t.bereq.uncacheable);
    let seen = beresp.ttl;
    t.bereq.rolled_back = false;
    let action = t.call(Sub::BackendResponse, Some(&mut beresp), None);
    // A Connection: close the policy put on beresp closes the backend
    // connection after the body, as Varnish's doclose.
    if beresp.headers.0.iter().any(|(n, v)| n.eq_ignore_ascii_case(b"connection") && crate::http1::head::has_token(v, "close")) {
        t.f.close_after = true;
    }
    beresp.headers.unset("connection");
    // std.rollback(bereq) dropped the backend connection: no body.
    if std::mem::take(&mut t.bereq.rolled_back) && matches!(action, Action::Deliver | Action::PassFor(_)) {
        t.f.close_after = true;
        t.f.release(resp);
        t.f.error(&Error::new(Side::Internal, "No backend connection (rollback?)"));
        return Step::Error(503, "Backend fetch failed".into());
    }
    if let Some(why) = range_fault(t, &resp) {
        t.f.release(resp);
        t.f.log.recf(Tag::Error, LogSide::Backend, t.f.vxid, format_args!("{why}"));
        return Step::Error(503, "Backend fetch failed".into());
    }
    // ESI cannot take partial content: the fetch pipeline does not open
    // (Varnish's vfp_esi_init), whatever vcl_backend_response chose.
    let has_body = !matches!(resp.framing, Framing::None | Framing::Length(0));
    if beresp.do_esi && has_body && beresp.partial() && matches!(action, Action::Deliver | Action::PassFor(_)) {
        t.f.release(resp);
        t.f.log.rec(Tag::VclError, LogSide::Backend, t.f.vxid, b"Attempted ESI on partial (206) response");
        t.f.error(&Error::new(Side::Internal, "Fetch pipeline failed to open"));
        return Step::Error(503, "Backend fetch failed".into());
    }
    match action {
        Action::Deliver | Action::PassFor(_) => {
            t.f.stamp("Process");
            // A TTL the policy set counts from now: from the object's
            // origin it is that much longer (never below 0, as Varnish).
            if beresp.ttl.to_bits() != seen.to_bits() {
                life.ttl = (beresp.ttl + beresp.age).max(0.0);
            }
            life.grace = beresp.grace;
            life.keep = beresp.keep;
            return Step::Done(Fetched::Resp { resp, beresp, life, action });
        }
        _ => t.f.release(resp),
    }
    match action {
        Action::Retry if t.can_retry() => t.retry(),
        Action::Retry => {
            t.f.error(&Error::new(Side::Internal, "Too many retries, delivering 503"));
            Step::Error(503, "Backend fetch failed".into())
        }
        Action::Error(s, r) => Step::Error(s, r),
        a => Step::Done(Fetched::Abandoned(Error::new(Side::Internal, format!("vcl_backend_response returned {}", a.word())))),
    }
}

/// A Content-Range that does not answer the fetch's Range (Varnish's
/// VRG_CheckBo, whatever vcl_backend_response chose).
fn range_fault<B>(t: &BeTxn<'_, B>, resp: &Response) -> Option<String> {
    if !t.sh.params().http_range_support {
        return None;
    }
    let h = &resp.head;
    crate::fetch::crange::fault(t.range0.as_deref(), h.status, h.get("content-range"), h.get("content-length"))
}

fn vcl_backend_error<B>(t: &mut BeTxn<'_, B>, status: u16, reason: String) -> Step {
    t.f.stamp("Error");
    t.f.errored = true;
    let mut beresp = Beresp {
        status,
        reason: Bytes::from(reason),
        headers: Headers(vec![
            (Bytes::from_static(b"Date"), Bytes::from(http_date(now()))),
            (Bytes::from_static(b"Server"), Bytes::from_static(b"cachekit")),
        ]),
        backend: t.f.be.name.clone(),
        storage: next_store(t.sh),
        ..Beresp::default()
    };
    let mut body = Vec::new();
    match t.call(Sub::BackendError, Some(&mut beresp), Some(&mut body)) {
        Action::Deliver => {
            // A status over 999 goes out as its last three digits (503 if
            // they are below 100), as Varnish sends it.
            if beresp.status >= 1000 {
                // Below 100 it is a 503 with its standard reason too.
                let low = beresp.status % 1000 < 100;
                beresp.status = crate::vcl::builtin::wire_status(beresp.status);
                if low {
                    beresp.reason = Bytes::from_static(crate::vcl::builtin::reason_phrase(503).as_bytes());
                }
            }
            let now = now();
            let life = Lifetime {
                t_origin: now,
                ttl: beresp.ttl,
                grace: beresp.grace,
                keep: beresp.keep,
                date: now,
                expires: -1.0,
                max_age: -1.0,
            };
            Step::Done(Fetched::Synthetic { beresp, body, life })
        }
        Action::Retry if t.can_retry() => t.retry(),
        a => Step::Done(Fetched::Abandoned(Error::new(Side::Internal, format!("vcl_backend_error returned {}", a.word())))),
    }
}

/// The backend response as vcl_backend_response sees it, and its
/// lifetime from the headers (RFC 9111 and the default_* parameters).
/// A pass's (`pass`) has no TTL, grace or keep and goes to Transient, as
/// Varnish's private objects (no TTL record either).
fn beresp_of(sh: &Shared, f: &mut Fetch, resp: &Response, stale: Option<&ObjRef>, pass: bool) -> (Beresp, Lifetime) {
    let t = now();
    let mut fresh = stored_headers(&resp.head);
    // Spread over several lines, these two are read outside VCL: one line
    // each, as Varnish's http_CollectHdr.
    let mut collected = Headers(fresh);
    for name in ["Cache-Control", "Vary"] {
        collected.collect(name, ", ");
    }
    fresh = collected.0;
    let was_304 = resp.head.status == 304 && stale.is_some();
    // A 304's lifetime is read from its own headers (handled like a 200,
    // a Date added if it has none), as Varnish's RFC2616_Ttl before the
    // merge.
    let mut life_of = None;
    let (status, reason, headers) = match stale.filter(|_| was_304) {
        Some(s) => {
            sh.seg.add(C::Fetch304, 1);
            let mut own = Headers(fresh.clone());
            if !own.has("date") {
                own.0.push((Bytes::from_static(b"Date"), Bytes::from(http_date(t))));
            }
            life_of = Some(own);
            (s.obj.status, s.reason(), merge_304(s, &mut fresh, sh.params().rfc9111()))
        }
        None => {
            let mut h = fresh;
            // The backend's Content-Length is beresp's (VCL reads it, the
            // object keeps it unless a filter changes the body), when it
            // frames the body, or on an answer to HEAD (a pass).
            if matches!(resp.framing, Framing::None | Framing::Length(_)) {
                if let Some((n, v)) = resp.head.iter().find(|(n, _)| n.eq_ignore_ascii_case(b"content-length")) {
                    h.push((Bytes::copy_from_slice(n), Bytes::copy_from_slice(v)));
                }
            }
            // A status line without a reason gets the standard one, as
            // Varnish's HTTP1_DissectResponse gives it.
            let reason = match resp.head.reason() {
                b"" => Bytes::from_static(crate::vcl::builtin::reason_phrase(resp.head.status).as_bytes()),
                r => Bytes::copy_from_slice(r),
            };
            (resp.head.status, reason, h)
        }
    };
    let mut h = Headers(headers);
    // The backend's Connection header is there for the policy to read (it
    // goes after vcl_backend_response: hop-by-hop).
    if let (false, Some(c)) = (was_304, resp.head.get("connection")) {
        h.0.push((Bytes::from_static(b"Connection"), Bytes::copy_from_slice(c)));
    }
    // A response without a Date gets one, as Varnish adds it on fetch.
    if !h.has("date") {
        h.0.push((Bytes::from_static(b"Date"), Bytes::from(http_date(t))));
    }
    let p = sh.params();
    let defaults = ttl::Defaults::new(p.default_ttl, p.default_grace, p.default_keep, p.has_feature("http_date_postel"));
    let (of_status, of) = life_of.as_ref().map_or((status, &h), |own| (200, own));
    // RFC mode (issue 36): lifetimes as RFC 9111 computes them (the bit read once a fetch).
    let compute = if p.rfc9111() { crate::cache::rfc::compute } else { ttl::compute };
    let mut life = compute(of_status, of.iter(), t, &defaults);
    if pass {
        (life.ttl, life.grace, life.keep) = (0.0, 0.0, 0.0);
    }
    let word = if life.ttl > 0.0 { "cacheable" } else { "uncacheable" };
    if !pass {
        f.log.recf(
            Tag::Ttl,
            LogSide::Backend,
            f.vxid,
            format_args!(
                "RFC {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {word}",
                life.ttl, life.grace, life.keep, t, life.t_origin, life.date, life.expires, life.max_age
            ),
        );
    }
    let beresp = Beresp {
        status,
        reason,
        headers: h,
        // VCL's beresp.ttl counts from now, as Varnish's: a backend's Age
        // is taken off (max-age 23 with Age 4 reads 19).
        ttl: vcl_ttl(&life, t),
        grace: life.grace,
        keep: life.keep,
        was_304,
        do_stream: true,
        backend: f.be.name.clone(),
        age: (t - life.t_origin).max(0.0),
        // bo->uncacheable, which bereq.uncacheable reads too: set on a pass.
        uncacheable: pass,
        storage: if pass { crate::cache::spec::TRANSIENT.into() } else { next_store(sh) },
        ..Beresp::default()
    };
    (beresp, life)
}

/// beresp.ttl as VCL sees it: the TTL left from now (Varnish's
/// VRT_r_beresp_ttl: a TTL at or below 0 reads as 0 less the age).
fn vcl_ttl(life: &ttl::Lifetime, now: f64) -> f64 {
    life.ttl.max(0.0) - (now - life.t_origin).max(0.0)
}

/// The store an object goes to unless VCL says otherwise (Varnish's
/// STV_next(): round robin over the stores but Transient; over the
/// persistent ones when there are any, see [`crate::cache::spec::unplaced`]).
fn next_store(sh: &Shared) -> String {
    let stores = sh.cache.stores();
    stores.get(stores.next()).name.clone()
}

/// The response headers vcl_backend_response sees (hop-by-hop ones
/// dropped), as slices of the response head; [`not_stored`] says which of
/// them an object does not keep.
pub fn stored_headers(h: &head::Head) -> Vec<(Bytes, Bytes)> {
    let hop = head::connection_tokens(h.iter());
    h.headers
        .iter()
        .filter(|(n, _)| !head::is_hop_by_hop(&h.raw[n.clone()]) && !head::is_listed(&hop, &h.raw[n.clone()]))
        .map(|(n, v)| (h.raw.slice(n.clone()), h.raw.slice(v.clone())))
        .collect()
}

/// Response headers a cached object does not keep (Varnish's HTTPH_A_INS;
/// the hop-by-hop ones go before).
pub fn not_stored(name: &[u8]) -> bool {
    const NOT: [&str; 6] = ["age", "accept-ranges", "content-range", "proxy-authenticate", "proxy-authorization", "range"];
    not_passed(name) || NOT.iter().any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
}

/// Response headers a pass's (or an uncacheable) object does not keep
/// (Varnish's HTTPH_A_PASS): Age, Varnish's own is added on delivery.
pub fn not_passed(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"age") || name.eq_ignore_ascii_case(b"http2-settings")
}

/// A 304 refreshes the stale object, as Varnish's HTTP_Merge: the 304's
/// headers (every one, in order; never its Content-Encoding or
/// Content-Length, which would relabel the stored body), then each stored
/// header whose name the 304 does not have. When the fetch that made the
/// object changed its encoding, a new ETag is weakened. In RFC mode the
/// stored ETag and Content-MD5 stay too: the 304 validated the stored
/// representation, which another ETag would relabel, and a digest
/// describes the body the 304 does not carry.
fn merge_304(stale: &ObjRef, fresh: &mut Vec<(Bytes, Bytes)>, rfc: bool) -> Vec<(Bytes, Bytes)> {
    let mut h = Headers(std::mem::take(fresh));
    h.unset("content-encoding");
    h.unset("content-length");
    if rfc {
        h.unset("etag");
        h.unset("content-md5");
    }
    if stale.obj.coding().is_some_and(|c| c.chgce) {
        crate::gzip::weaken_etag(&mut h);
    }
    let stored = stale.headers().to_headers();
    let theirs = h.0.len();
    for (n, v) in stored.0 {
        if !h.0[..theirs].iter().any(|(m, _)| m.eq_ignore_ascii_case(&n)) {
            h.0.push((n, v));
        }
    }
    h.0
}
