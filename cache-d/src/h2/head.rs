//! Heads between HTTP/2 and the request steps: a stream's request
//! (pseudo-headers and HPACK-decoded fields, as the `h2` crate gives them)
//! becomes the same [`Head`] an HTTP/1 request gives, logged as
//! `HTTP/2.0`; the HTTP/1.1 response head the steps write becomes the
//! stream's HEADERS, without the fields HTTP/2 forbids.

use bytes::{BufMut, BytesMut};

use crate::http1::head::Head;

/// Fields that belong to one HTTP/1 connection and are not sent on a
/// stream (RFC 9113 §8.2.2).
const HOP_BY_HOP: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];

/// A stream's request as a [`Head`] with version code 2. `:authority`
/// becomes a Host field where it stood, as Varnish turns it into one: a
/// request with a host field as well has two, and gets 400 ("Duplicate
/// Host header") as in Varnish, even when they agree. The cookie
/// crumbs are joined into one Cookie field with "; " (RFC 9113 §8.2.3),
/// and the URL is the `:path` (the authority for CONNECT).
pub fn request_head(parts: &http::request::Parts) -> Head {
    request_head_as(parts, 2)
}

/// As [`request_head`], for a stream of HTTP version `minor` (our code:
/// 2 for HTTP/2, 3 for HTTP/3, whose requests are made the same way,
/// RFC 9114 §4.3).
pub fn request_head_as(parts: &http::request::Parts, minor: u8) -> Head {
    let mut raw = BytesMut::with_capacity(256);
    let method = span(&mut raw, parts.method.as_str().as_bytes());
    raw.put_u8(b' ');
    let target = match parts.uri.path_and_query() {
        Some(pq) if parts.method != http::Method::CONNECT => pq.as_str(),
        _ => parts.uri.authority().map_or("", |a| a.as_str()),
    };
    let url = span(&mut raw, target.as_bytes());
    raw.put_u8(b' ');
    raw.put_slice(crate::http1::head::proto_name(minor).as_bytes());
    raw.put_slice(b"\r\n");
    let mut headers = Vec::with_capacity(parts.headers.len() + 1);
    let mut field = |raw: &mut BytesMut, name: &[u8], value: &[u8]| {
        let n = span(raw, name);
        raw.put_slice(b": ");
        let v = span(raw, value);
        raw.put_slice(b"\r\n");
        headers.push((n, v));
    };
    if let Some(a) = parts.uri.authority() {
        field(&mut raw, b"host", a.as_str().as_bytes());
    }
    let mut cookies: Vec<&[u8]> = Vec::new();
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE {
            cookies.push(value.as_bytes());
        } else {
            field(&mut raw, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if !cookies.is_empty() {
        field(&mut raw, b"cookie", &cookies.join(&b"; "[..]));
    }
    raw.put_slice(b"\r\n");
    Head { raw: raw.freeze(), first: method, url, minor, status: 0, headers }
}

/// Append `s` to `raw`; where it lies.
fn span(raw: &mut BytesMut, s: &[u8]) -> std::ops::Range<usize> {
    let start = raw.len();
    raw.put_slice(s);
    start..raw.len()
}

/// The stream's response for an HTTP/1.1 response head the steps wrote:
/// its status and fields, without the hop-by-hop ones (and those a
/// Connection field names, RFC 9113 §8.2.2, as Varnish drops them) and without any
/// field `http` cannot carry (a name or value a backend sent that is not
/// valid in HTTP/2), which are dropped.
pub fn response(head: &Head) -> http::Response<()> {
    let mut resp = http::Response::new(());
    *resp.status_mut() = http::StatusCode::from_u16(head.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    // The tokens of any Connection field (no allocation without one).
    let named: Vec<&[u8]> = head
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, v)| v.split(|&b| b == b',').map(<[u8]>::trim_ascii))
        .collect();
    let h = resp.headers_mut();
    for (name, value) in head.iter() {
        if HOP_BY_HOP.iter().any(|hop| name.eq_ignore_ascii_case(hop.as_bytes())) || named.iter().any(|t| t.eq_ignore_ascii_case(name)) {
            continue;
        }
        let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) else { continue };
        h.append(n, v);
    }
    resp
}

/// Does a response with this status to this request carry no body
/// (HEAD, 1xx, 204, 304)?
pub fn bodiless(status: u16, head_only: bool) -> bool {
    head_only || status < 200 || status == 204 || status == 304
}
