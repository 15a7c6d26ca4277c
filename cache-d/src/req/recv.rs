//! A request arrives: its head is checked and logged, the request object
//! built ([`admit`]); then vcl_recv and vcl_hash decide where it goes
//! ([`recv`]), and a purge is carried out ([`purge`]). Requests too
//! malformed for the policy get the built-in 400 or 417 here.

use std::sync::Arc;

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};

use crate::error::Error;
use crate::error::Side;
use crate::http1::body::Pace;
use crate::http1::head::{self, Framing, Head, HeadError};
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::state::{divert, end_log, Request, Sess, Step, With};
use crate::req::synth::refuse;
use crate::req::transport::Transport;
use crate::vcl::model::{Action, Headers, Req, Sub};

/// Check and log a request head and build the request; Err(reason) when
/// it was refused and the session ends.
pub async fn admit<'a, T: Transport>(
    s: &'a mut Sess,
    conn: &'a mut T,
    head: Head,
    t_start: f64,
    p: Arc<Params>,
) -> Result<Request<'a, T>, Reason> {
    let sh = s.sh.clone();
    let (rxid, mut log, mut clock) = s.begin_req(t_start, &p);
    let side = LogSide::Client;
    // This request runs on the policy active now, to its end; VCL_use
    // and ReqStart come first, as Varnish logs a request it could parse.
    let active = sh.policy();
    log.rec(Tag::VclUse, side, rxid, active.name.as_bytes());
    log.rec(Tag::ReqStart, side, rxid, &s.addr_text().req_start);
    log.rec(Tag::ReqMethod, side, rxid, head.method());
    log.rec(Tag::ReqUrl, side, rxid, head.url());
    log.rec(Tag::ReqProtocol, side, rxid, head.protocol().as_bytes());
    head.log_fields(&mut log, Tag::ReqHeader, side, rxid);
    let hdr_rx = head.wire_len() as u64;
    let framing = conn.framing(&head).unwrap_or_else(|| head::request_framing(&head));
    let checked = match checks(&head, framing, p.http_req_hdr_len) {
        Err(why) => {
            sh.seg.add(C::ClientReq400, 1);
            log.rec(Tag::Error, side, rxid, why.as_bytes());
            Err((400, "Bad Request"))
        }
        Ok(_) if expect_unknown(&head) => {
            sh.seg.add(C::ClientReq417, 1);
            Err((417, "Expectation Failed"))
        }
        Ok(framing) => Ok(framing),
    };
    let framing = match checked {
        Ok(f) => f,
        Err((status, reason)) => {
            let tx = refuse(s, conn, &mut log, rxid, status, reason).await;
            end_log(&sh, &mut log, &mut clock, rxid, (hdr_rx, 0), tx);
            return Err(Reason::RxJunk);
        }
    };
    // Expect: 100-continue, and the body is not on its way: answered after
    // vcl_recv (or, with std.late_100_continue(true), when the body is
    // read), as Varnish does.
    let continue_pending = head.get("expect").is_some() && framing != Framing::None && conn.buffered().is_empty();
    sh.seg.add(C::ClientReq, 1);
    sh.seg.add(C::SReqHdrbytes, hdr_rx);
    // HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only
    // when asked to (ApacheBench -k).
    let keep = match head.minor {
        0 => head.has_token("connection", "keep-alive") && !head.has_token("connection", "close"),
        _ => !head.has_token("connection", "close"),
    };
    let mut req = request_of(&head, &mut log, rxid, s, &p);
    req.body_size = match framing {
        Framing::None | Framing::Eof => None,
        Framing::Length(n) => Some(Some(n)),
        Framing::Chunked => Some(None),
    };
    s.minor = head.minor;
    if active.policy.may_esi() {
        req.http0 = Some(req.headers.clone());
    }
    // How fast the body must arrive; every reader of it keeps to this.
    conn.set_pace(Some(Pace::new(p.timeout_reqbody, p.reqbody_min_rate)));
    let head_only = &req.method[..] == b"HEAD";
    Ok(Request {
        sess: s,
        conn,
        sh,
        p,
        active,
        vcl0: None,
        req,
        log,
        clock,
        rxid,
        hdr_rx,
        body_rx: 0,
        keep,
        head_only,
        framing,
        body_consumed: false,
        piped: false,
        body_failed: false,
        hit_pass: false,
        continue_pending,
        interim: None,
        cached_body: None,
        body_error: None,
        loaded: None,
    })
}

/// The head's body framing, if the head is acceptable: framing headers,
/// header lengths, Host.
fn checks(head: &Head, framing: Result<Framing, &'static str>, hdr_len: usize) -> Result<Framing, &'static str> {
    framing.and_then(|f| match head.iter().any(|(n, v)| n.len() + 2 + v.len() > hdr_len) {
        true => Err("a header is longer than http_req_hdr_len"),
        false => head::request_checks(head).map(|()| f),
    })
}

/// Expect: only 100-continue is known.
fn expect_unknown(head: &Head) -> bool {
    head.get("expect").is_some_and(|e| !e.trim_ascii().eq_ignore_ascii_case(b"100-continue"))
}

/// The request as the policy sees it. An absolute-form target's authority
/// becomes Host and the URL keeps the path (as Varnish), so the cache key
/// is the same as for the origin-form request.
fn request_of(head: &Head, log: &mut common::log::vsl::Batch, rxid: u32, s: &mut Sess, p: &Params) -> Req {
    let side = LogSide::Client;
    // Room for what prep adds (X-Forwarded-For), without growing.
    let mut headers = Headers(Vec::with_capacity(head.headers.len() + 2));
    headers.0.extend(head.headers.iter().map(|(n, v)| (head.raw.slice(n.clone()), head.raw.slice(v.clone()))));
    let mut url = head.raw.slice(head.url.clone());
    if let Some((host, path)) = head::absolute_form(head.url(), p.https_scheme()) {
        let (host, path) = (head.raw.slice_ref(host), head.raw.slice_ref(path));
        if headers.has("host") {
            log.rec(Tag::ReqUnset, side, rxid, &[b"Host: ", &headers.get("host").cloned().unwrap_or_default()[..]].concat());
        }
        log.rec_parts(Tag::ReqHeader, side, rxid, &[b"Host: ", &host]);
        headers.set("Host", host);
        url = path;
    }
    Req {
        method: head.raw.slice(head.first.clone()),
        url,
        minor: head.minor,
        headers,
        server_ip: s.addr_text().server_ip.clone(),
        client_ip: Some(s.ends.client.ip()),
        xid: rxid,
        time: crate::util::now(),
        timeout_idle: s.timeout_idle.unwrap_or(p.timeout_idle).as_secs_f64(),
        ..Req::default()
    }
}

/// What Varnish does to a request before its first vcl_recv (not again on
/// a restart; an ESI include, which starts from its parent's request as
/// received, gets it too): repeated X-Forwarded-For and Cache-Control
/// headers joined with ", ", and the client's address appended to
/// X-Forwarded-For, so the policy sees what the backend will get.
fn prep<T: Transport>(r: &mut Request<'_, T>) {
    let (side, rxid) = (LogSide::Client, r.rxid);
    // The headers the client's Connection names are for this hop only:
    // VCL sees them, no backend request gets them (Varnish's
    // http_DoConnection marks them).
    let listed = head::connection_tokens(r.req.headers.iter());
    let hop = r.req.headers.0.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"connection") && head::is_listed(&listed, n));
    r.req.hop = hop.cloned().collect();
    let ip = match r.req.client_ip {
        Some(ip) if ip == r.sess.ends.client.ip() => r.sess.addr_text().client_ip.clone(),
        Some(ip) => Bytes::from(ip.to_string()),
        None => Bytes::new(),
    };
    for name in ["X-Forwarded-For", "Cache-Control"] {
        if let Some((old, joined)) = r.req.headers.collect(name, ", ") {
            r.log.rec_parts(Tag::ReqUnset, side, rxid, &[name.as_bytes(), b": ", &old]);
            r.log.rec_parts(Tag::ReqHeader, side, rxid, &[name.as_bytes(), b": ", &joined]);
        }
        if name != "X-Forwarded-For" {
            continue;
        }
        let xff = match r.req.headers.get(name).cloned() {
            Some(v) => {
                r.log.rec_parts(Tag::ReqUnset, side, rxid, &[b"X-Forwarded-For: ", &v]);
                r.req.headers.unset(name);
                Bytes::from([&v[..], b", ", &ip[..]].concat())
            }
            None => ip.clone(),
        };
        r.log.rec_parts(Tag::ReqHeader, side, rxid, &[b"X-Forwarded-For: ", &xff]);
        r.req.headers.0.push((Bytes::from_static(b"X-Forwarded-For"), xff));
    }
}

/// vcl_recv, then vcl_hash, and where they lead.
pub async fn recv<T: Transport>(r: &mut Request<'_, T>) -> Step {
    r.hit_pass = false;
    // The request as received, should vcl_recv hand it to a label's program.
    let received = (r.req.restarts == 0 && r.sh.has_labels()).then(|| r.req.clone());
    if r.req.restarts == 0 {
        prep(r);
    }
    let action = if r.req.restarts > r.p.max_restarts {
        r.log.rec(Tag::VclError, LogSide::Client, r.rxid, b"Too many restarts");
        Action::Synth(503, "Too many restarts".into())
    } else {
        r.call(Sub::Recv, With::default())
    };
    let action = match (action, received) {
        (Action::Vcl(label), Some(received)) => switch_vcl(r, &label, received),
        (action, _) => action,
    };
    if !r.req.late_100_continue && !r.send_continue().await {
        return Step::Done(Some(Reason::TxError));
    }
    if let Some(limit) = r.req.cache_body.filter(|_| r.cached_body.is_none() && r.framing != Framing::None) {
        if let Err(e) = cache_body(r, limit).await {
            return match e.side {
                // Over std.cache_req_body's limit: closed without a
                // response, as Varnish does.
                Side::Internal => {
                    r.log.recf(Tag::FetchError, LogSide::Client, r.rxid, format_args!("{e}"));
                    r.end((0, 0));
                    Step::Done(Some(Reason::RxBody))
                }
                _ => bad_body(r, &e).await,
            };
        }
    }
    r.head_only = &r.req.method[..] == b"HEAD";
    if !matches!(action, Action::Pipe | Action::Pass) {
        wash(r);
    }
    // vcl_hash runs whatever vcl_recv chose (as in Varnish), except
    // after fail or restart; its fail fails the request.
    let mut key = Vec::with_capacity(r.req.url.len() + 32);
    let mut action = action;
    if !matches!(action, Action::Fail | Action::Restart) {
        if r.call(Sub::Hash, With { key: Some(&mut key), ..With::default() }) == Action::Fail {
            action = Action::Fail;
        }
        r.req.hash = Some(Bytes::copy_from_slice(&key));
    }
    match action {
        // The body was read by an earlier pass: nothing to pipe.
        Action::Pipe if r.body_consumed => Step::Synth { status: 503, reason: "Service Unavailable".into() },
        // A stream cannot be piped: Varnish passes it instead.
        Action::Pipe if r.req.minor >= 2 => {
            let msg: &[u8] = if r.req.minor == 2 {
                b"vcl_recv{} returns pipe for HTTP/2 request.  Doing pass."
            } else {
                b"vcl_recv{} returns pipe for HTTP/3 request.  Doing pass."
            };
            r.log.rec(Tag::VclError, LogSide::Client, r.rxid, msg);
            Step::Pass
        }
        Action::Pipe => Step::Pipe,
        Action::Pass => Step::Pass,
        // Once only, and not after a restart (Varnish's rule).
        Action::Vcl(_) => {
            let why = if r.req.restarts > 0 { "Not after restarts" } else { "Only from active VCL" };
            r.log.recf(Tag::VclError, LogSide::Client, r.rxid, format_args!("Illegal return(vcl): {why}"));
            Step::Synth { status: 503, reason: "Service Unavailable".into() }
        }
        Action::Purge | Action::Hash => {
            // A body on its way to the cache fetch (a POST looked up):
            // read whole now, as the fetch runs apart from the client.
            let keep = action == Action::Hash && r.cached_body.is_none() && !matches!(&r.req.method[..], b"GET" | b"HEAD");
            let read = if keep { body_for_fetch(r).await } else { discard_body(r).await };
            if let Err(e) = read {
                return match e.side {
                    Side::Internal => {
                        r.log.recf(Tag::Error, LogSide::Client, r.rxid, format_args!("request body: {e}"));
                        r.keep = false;
                        Step::Synth { status: 503, reason: "Service Unavailable".into() }
                    }
                    _ => bad_body(r, &e).await,
                };
            }
            if action == Action::Purge {
                Step::Purge(key)
            } else {
                Step::Lookup(key)
            }
        }
        other => divert(other),
    }
}

/// vcl_recv's `return (vcl(LABEL))`: the request, as it was received,
/// starts vcl_recv again in the program the label names (its default
/// backend, none of what the first vcl_recv set); what that one returns
/// stands, a second switch included (which then fails the request).
/// Before vcl_hash of a lookup: Accept-Encoding washed for the sake of
/// Vary (Varnish's http_gzip_support); in RFC mode, Accept-Language
/// normalised (RFC 9111 §4.1: values that mean the same select the same
/// stored response).
fn wash<T: Transport>(r: &mut Request<'_, T>) {
    let p = r.sh.params();
    if p.http_gzip_support {
        let (gone, set) = crate::gzip::wash(&mut r.req.headers, p.http_brotli_support);
        for (n, v) in &gone {
            r.log.rec_parts(Tag::ReqUnset, LogSide::Client, r.rxid, &[n, b": ", v]);
        }
        if let Some(v) = set {
            r.log.rec_parts(Tag::ReqHeader, LogSide::Client, r.rxid, &[b"Accept-Encoding: ", v]);
        }
    }
    if p.rfc9111() {
        crate::req::rfc::normalise_accept_language(r);
    }
}

fn switch_vcl<T: Transport>(r: &mut Request<'_, T>, label: &str, received: Req) -> Action {
    let Some(to) = r.sh.label(label) else {
        return Action::Vcl(label.to_string());
    };
    // What is the session's or already under way is not rolled back.
    let (cache_body, idle) = (r.req.cache_body, (r.req.timeout_idle, r.req.timeout_idle_set));
    r.req = received;
    r.req.cache_body = cache_body;
    (r.req.timeout_idle, r.req.timeout_idle_set) = idle;
    if r.req.esi_level == 0 {
        r.vcl0 = Some(r.active.clone());
    }
    r.active = to;
    r.log.rec(Tag::VclUse, LogSide::Client, r.rxid, r.active.name.as_bytes());
    prep(r);
    r.call(Sub::Recv, With::default())
}

/// Purge every object under `key`, then vcl_purge.
pub fn purge<T: Transport>(r: &mut Request<'_, T>, key: &[u8]) -> Step {
    let n = r.sh.cache.purge(key);
    r.sh.seg.add(C::NPurges, 1);
    r.sh.seg.add(C::NObjPurged, n as u64);
    divert(r.call(Sub::Purge, With::default()))
}

/// std.cache_req_body(): read the body into memory once, so every fetch
/// (retries, restarts) can send it; more than `limit` bytes (known from
/// Content-Length or met while reading) fails with Side::Internal.
async fn cache_body<T: Transport>(r: &mut Request<'_, T>, limit: u64) -> Result<(), Error> {
    // A read vmod bodyaccess made in vcl_recv may have failed already.
    if let Some(e) = r.body_error.take() {
        return Err(e);
    }
    let too_big = || Error::new(Side::Internal, "Request body too big to cache");
    if r.req.body_size.flatten().is_some_and(|n| n > limit) {
        return Err(too_big());
    }
    if !r.send_continue().await {
        return Err(Error::new(Side::Client, "client closed before 100 Continue"));
    }
    let mut body = crate::util::Capped { v: Vec::new(), cap: usize::try_from(limit).unwrap_or(usize::MAX) };
    r.read_body(&mut body).await.map_err(|e| if e.side == Side::Internal { too_big() } else { e })?;
    r.cached_body = Some(Bytes::from(body.v));
    Ok(())
}

/// The body of a request looked up (a POST with `return (hash)`), read
/// into memory for the cache fetch to send (Varnish streams it from the
/// client; our fetch runs apart from the client). Bounded by
/// transit_buffer: a longer one fails (Side::Internal) rather than reach
/// the backend cut; such requests belong in a pass.
async fn body_for_fetch<T: Transport>(r: &mut Request<'_, T>) -> Result<(), Error> {
    if r.framing == Framing::None {
        return Ok(());
    }
    if !r.send_continue().await {
        return Err(Error::new(Side::Client, "client closed before 100 Continue"));
    }
    let cap = r.p.transit_buffer.max(64 * 1024) as usize;
    let mut body = crate::util::Capped { v: Vec::new(), cap };
    r.read_body(&mut body).await.map_err(|e| match e.side {
        Side::Internal => Error::new(Side::Internal, format!("longer than transit_buffer ({cap} bytes) for a cache fetch: pass it")),
        _ => e,
    })?;
    r.cached_body = Some(Bytes::from(body.v));
    Ok(())
}

/// Read and drop a request body the cache path does not forward (a GET
/// with a body).
async fn discard_body<T: Transport>(r: &mut Request<'_, T>) -> Result<(), Error> {
    if r.framing == Framing::None {
        return Ok(());
    }
    if !r.send_continue().await {
        return Err(Error::new(Side::Client, "client closed before 100 Continue"));
    }
    r.read_body(&mut tokio::io::sink()).await?;
    r.body_consumed = true;
    Ok(())
}

/// The request body could not be read: a malformed body (bad chunk
/// framing) gets 400; a client that went away gets nothing.
pub async fn bad_body<T: Transport>(r: &mut Request<'_, T>, e: &Error) -> Step {
    r.log.recf(Tag::Error, LogSide::Client, r.rxid, format_args!("request body: {e}"));
    let tx = if e.io.is_none() {
        r.sh.seg.add(C::ClientReq400, 1);
        refuse(r.sess, r.conn, &mut r.log, r.rxid, 400, "Bad Request").await
    } else {
        (0, 0)
    };
    r.end(tx);
    Step::Done(Some(Reason::RxBody))
}

/// A head that does not parse: 400, counted and logged, then the session
/// ends.
pub async fn bad_request<T: Transport>(s: &mut Sess, conn: &mut T, err: HeadError, t_start: f64) {
    let p = s.sh.params();
    let (rxid, mut log, mut clock) = s.begin_req(t_start, &p);
    s.sh.seg.add(C::ClientReq400, 1);
    let n = conn.buffered().len();
    log.rec(Tag::HttpGarbage, LogSide::Client, rxid, conn.buffered());
    // A header line Varnish's dissection refuses is a BogoHeader saying
    // which rule it broke, as varnishd logs it.
    match head::bogo_header(conn.buffered()).filter(|_| matches!(err, HeadError::Syntax(_))) {
        Some(why) => log.rec(Tag::BogoHeader, LogSide::Client, rxid, why.as_bytes()),
        None => log.rec(Tag::Error, LogSide::Client, rxid, err.text().as_bytes()),
    }
    let tx = refuse(s, conn, &mut log, rxid, 400, "Bad Request").await;
    let sh = s.sh.clone();
    end_log(&sh, &mut log, &mut clock, rxid, (n as u64, 0), tx);
}
