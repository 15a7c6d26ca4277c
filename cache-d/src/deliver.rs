//! Delivering a cached object (vcl_deliver): Age and X-Varnish, client
//! conditionals (304), byte ranges (206/416), HEAD, and streaming the body
//! while it may still be arriving from the backend.

use std::io::Write as _;

use bytes::Bytes;
use common::vsl::Batch;
use tokio::io::AsyncWriteExt;

use crate::cache::{ObjCore, Object};
use crate::policy::{run_sub, Action, Req, Resp, Sub};
use crate::session::{close_reason, obj_view, Client, Clock, Reason, ReqCtx, Sess, Step};
use crate::util::now;

/// A parsed `Range` request against a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeReq {
    /// Serve the whole body (no Range, or one we do not honour).
    Whole,
    /// Serve bytes `first..=last`.
    Part(u64, u64),
    Unsatisfiable,
}

/// Parse a single `bytes=` range (RFC 9110 §14.1). Several ranges, other
/// units and bad syntax are ignored (the whole body is served), as Varnish
/// does.
pub fn parse_range(v: &[u8], len: u64) -> RangeReq {
    let Ok(v) = std::str::from_utf8(v) else { return RangeReq::Whole };
    let Some(spec) = v.trim().strip_prefix("bytes=") else { return RangeReq::Whole };
    if spec.contains(',') {
        return RangeReq::Whole;
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return RangeReq::Whole };
    let num = |s: &str| if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) { None } else { s.parse::<u64>().ok() };
    match (a.trim(), b.trim()) {
        ("", suffix) => match num(suffix) {
            Some(0) => RangeReq::Unsatisfiable,
            Some(_) if len == 0 => RangeReq::Unsatisfiable,
            Some(n) => RangeReq::Part(len.saturating_sub(n), len - 1),
            None => RangeReq::Whole,
        },
        (first, "") => match num(first) {
            Some(f) if f >= len => RangeReq::Unsatisfiable,
            Some(f) => RangeReq::Part(f, len - 1),
            None => RangeReq::Whole,
        },
        (first, last) => match (num(first), num(last)) {
            (Some(f), Some(l)) if f > l => RangeReq::Whole,
            (Some(f), Some(_)) if f >= len => RangeReq::Unsatisfiable,
            (Some(f), Some(l)) => RangeReq::Part(f, l.min(len - 1)),
            _ => RangeReq::Whole,
        },
    }
}

fn strip_weak(t: &[u8]) -> &[u8] {
    let t = t.trim_ascii();
    t.strip_prefix(b"W/").unwrap_or(t)
}

/// Does the client's cached copy match (If-None-Match, else
/// If-Modified-Since)? Only for 200 responses to GET and HEAD.
pub fn not_modified(req: &Req, obj: &Object) -> bool {
    if obj.status != 200 || !(&req.method[..] == b"GET" || &req.method[..] == b"HEAD") {
        return false;
    }
    if let Some(inm) = req.headers.get("if-none-match") {
        let Some(etag) = obj.header("etag") else { return false };
        return inm.split(|&c| c == b',').any(|t| t.trim_ascii() == b"*" || strip_weak(t) == strip_weak(&etag));
    }
    if let Some(ims) = req.headers.get("if-modified-since") {
        let parse = |v: &[u8]| std::str::from_utf8(v).ok().and_then(common::httpdate::parse);
        if let (Some(ims), Some(lm)) = (parse(ims), obj.header("last-modified").and_then(|v| parse(&v))) {
            return lm <= ims;
        }
    }
    false
}

/// Write to the client (within the response's send deadlines); false if
/// it failed or timed out.
async fn send(c: &mut Client, bytes: &[u8]) -> bool {
    c.io.write_all(bytes).await.is_ok()
}

impl Sess {
    /// Send `oc`'s object to the client. `hit` adds the object's vxid to
    /// X-Varnish.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn deliver(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        oc: &ObjCore,
        hit: bool,
        mut log: Batch,
        mut clock: Clock,
        ctx: &mut ReqCtx,
    ) -> Step {
        let rxid = ctx.rxid;
        let obj = &oc.obj;
        let mut keep = ctx.keep && ctx.framing == crate::http::Framing::None;
        let t = now();
        let mut resp = Resp {
            status: obj.status,
            reason: obj.reason.clone(),
            headers: obj.headers.to_headers(),
            is_streaming: obj.body.progress().done == crate::cache::body::Done::Streaming,
        };
        let age = (t - obj.life.t_origin).max(0.0) as u64;
        resp.headers.set("Age", Bytes::from(age.to_string()));
        let policy = self.policy();
        let view = policy.defines(Sub::Deliver).then(|| obj_view(oc, t, false));
        let action = {
            let mut task = self.task(&mut log, rxid);
            task.req = Some(req);
            task.resp = Some(&mut resp);
            task.obj = view.as_ref();
            run_sub(&*policy, Sub::Deliver, &mut task)
        };
        if action != Action::Deliver {
            return self.divert(c, req, log, clock, ctx, action).await;
        }
        let mut headers = resp.headers;
        let len = obj.body.known_len();
        let (mut status, mut reason): (u16, &[u8]) = (resp.status, &resp.reason);
        let mut span: Option<(u64, u64)> = None;
        let mut send_body = !ctx.head_only;
        let framing: Option<(&[u8], String)>;
        let mut chunked = false;
        if status == obj.status && not_modified(req, obj) {
            (status, reason) = (304, b"Not Modified");
            headers.unset("content-length");
            send_body = false;
            framing = None;
        } else {
            let range = match (status, req.headers.get("range"), len) {
                (200, Some(r), Some(n)) => parse_range(r, n),
                _ => RangeReq::Whole,
            };
            let total = len.unwrap_or(0);
            match range {
                RangeReq::Part(a, b) => {
                    (status, reason) = (206, b"Partial Content");
                    headers.set("Content-Range", Bytes::from(format!("bytes {a}-{b}/{total}")));
                    span = Some((a, b));
                    framing = Some((b"Content-Length", (b - a + 1).to_string()));
                }
                RangeReq::Unsatisfiable => {
                    (status, reason) = (416, b"Range Not Satisfiable");
                    headers.set("Content-Range", Bytes::from(format!("bytes */{total}")));
                    send_body = false;
                    framing = Some((b"Content-Length", "0".to_string()));
                }
                RangeReq::Whole => match len {
                    Some(n) => framing = Some((b"Content-Length", n.to_string())),
                    None if req.minor >= 1 => {
                        chunked = send_body;
                        framing = Some((b"Transfer-Encoding", "chunked".to_string()));
                    }
                    None => {
                        keep = false;
                        framing = None;
                    }
                },
            }
        }
        let mut wire = std::mem::take(&mut self.wire);
        let obj_vxid = hit.then_some(obj.vxid);
        self.write_head(&mut wire, &mut log, rxid, status, reason, &headers, obj_vxid, framing, keep, obj.status == 200);
        // Processing done, delivery begins (Varnish's Process timestamp).
        clock.stamp(&mut log, rxid, "Process");
        let hdr_tx = wire.len() as u64;
        // send_timeout bounds the whole response, as in Varnish.
        self.arm_send(c);
        let body = &obj.body;
        let mut reader = body.reader();
        let mut pos = 0u64;
        let mut body_tx = 0u64;
        let mut failed = false;
        if send_body {
            loop {
                // Gather what is there; before waiting for more, send it.
                let next = match reader.try_next() {
                    Some(n) => n,
                    None => {
                        if !wire.is_empty() {
                            if !send(c, &wire).await {
                                failed = true;
                                break;
                            }
                            wire.clear();
                        }
                        reader.next().await
                    }
                };
                let chunk = match next {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(()) => {
                        failed = true;
                        break;
                    }
                };
                let start = pos;
                pos += chunk.len() as u64;
                let part = match span {
                    None => chunk,
                    Some((a, b)) => {
                        if pos <= a || start > b {
                            continue;
                        }
                        let from = a.saturating_sub(start) as usize;
                        let to = ((b + 1).min(pos) - start) as usize;
                        chunk.slice(from..to)
                    }
                };
                if chunked {
                    let _ = write!(wire, "{:x}\r\n", part.len());
                }
                // Gather small pieces into one write with the head.
                if wire.len() + part.len() <= 64 * 1024 {
                    wire.extend_from_slice(&part);
                } else {
                    if !send(c, &wire).await || !send(c, &part).await {
                        failed = true;
                        break;
                    }
                    wire.clear();
                }
                body_tx += part.len() as u64;
                if chunked {
                    wire.extend_from_slice(b"\r\n");
                    body_tx += 2;
                }
                if span.is_some_and(|(_, b)| pos > b) {
                    break;
                }
            }
            if chunked && !failed {
                wire.extend_from_slice(b"0\r\n\r\n");
                body_tx += 5;
            }
        }
        if !wire.is_empty() && !send(c, &wire).await {
            failed = true;
        }
        self.wire = wire;
        self.end_req(log, &mut clock, rxid, (ctx.hdr_rx, ctx.body_rx), (hdr_tx, body_tx));
        if failed {
            // The body did not arrive whole (or the client left): close,
            // never end the response cleanly.
            return Step::Done(Some(Reason::RespClose));
        }
        Step::Done(close_reason(keep, req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeReq::*;
        assert_eq!(parse_range(b"bytes=0-9", 100), Part(0, 9));
        assert_eq!(parse_range(b"bytes=90-", 100), Part(90, 99));
        assert_eq!(parse_range(b"bytes=-10", 100), Part(90, 99));
        assert_eq!(parse_range(b"bytes=-500", 100), Part(0, 99));
        assert_eq!(parse_range(b"bytes=50-500", 100), Part(50, 99));
        assert_eq!(parse_range(b"bytes=100-", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=200-300", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=5-1", 100), Whole);
        assert_eq!(parse_range(b"bytes=0-1,5-6", 100), Whole);
        assert_eq!(parse_range(b"items=0-1", 100), Whole);
        assert_eq!(parse_range(b"bytes=x-1", 100), Whole);
        assert_eq!(parse_range(b"bytes=0-0", 0), Unsatisfiable);
    }
}
