//! Compression: Varnish's gzip handling (`http_gzip_support`) and Brotli
//! beyond it. Accept-Encoding as Varnish reads and washes it, the fetch
//! filters a response gets (gzip, gunzip, testgunzip, and the Brotli
//! copy), the delivery gunzip, and the gzip bits.

pub mod bits;
pub mod code;
pub mod fetch;
pub mod stream;

use std::sync::OnceLock;

use bytes::Bytes;

use crate::cache::body::ObjBody;
use crate::vcl::model::Headers;

/// Is `token` in a comma-separated header value (case-insensitive, or
/// quoted)? Returns what follows it in its list item (its parameters).
fn token<'v>(value: &'v [u8], token: &str) -> Option<&'v [u8]> {
    value.split(|&c| c == b',').find_map(|item| {
        let item = item.trim_ascii_start();
        let t = token.as_bytes();
        let quoted = item.len() >= t.len() + 2 && item[0] == b'"' && item[1..=t.len()].eq_ignore_ascii_case(t) && item[t.len() + 1] == b'"';
        if quoted {
            return Some(&item[t.len() + 2..]);
        }
        let tchar = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
        (item.len() >= t.len() && item[..t.len()].eq_ignore_ascii_case(t) && item.get(t.len()).is_none_or(|c| !tchar(*c)))
            .then(|| &item[t.len()..])
    })
}

/// The q value a header value gives `token` (Varnish's `http_GetHdrQ`):
/// 0 when it is not there, 1 without a q parameter.
pub fn q(value: &[u8], name: &str) -> f64 {
    let Some(params) = token(value, name) else { return 0.0 };
    let Some(v) = params.split(|&c| c == b';').map(|p| p.trim_ascii()).find_map(|p| {
        let rest = p.strip_prefix(b"q")?.trim_ascii_start();
        rest.strip_prefix(b"=").map(|v| v.trim_ascii_start())
    }) else {
        return 1.0;
    };
    // Digits, then an optional fraction, read as far as they go.
    let int_end = v.iter().position(|c| !c.is_ascii_digit()).unwrap_or(v.len());
    if int_end == 0 && v.first() != Some(&b'.') {
        return 0.0;
    }
    let mut a: f64 = v[..int_end].iter().fold(0.0, |a, d| a * 10.0 + (d - b'0') as f64);
    if v.get(int_end) == Some(&b'.') {
        let mut f = 0.1;
        for d in v[int_end + 1..].iter().take_while(|c| c.is_ascii_digit()) {
            a += f * (d - b'0') as f64;
            f *= 0.1;
        }
    }
    a
}

/// Can the client take gzip (Varnish's `RFC2616_Req_Gzip`: `x-gzip`, or
/// `gzip` with a q above 0, in the first Accept-Encoding header)?
pub fn can_gzip(req: &Headers) -> bool {
    req.get("accept-encoding").is_some_and(|v| token(v, "x-gzip").is_some() || q(v, "gzip") > 0.0)
}

/// Can the client take Brotli (`br` with a q above 0)?
pub fn can_brotli(req: &Headers) -> bool {
    req.get("accept-encoding").is_some_and(|v| q(v, "br") > 0.0)
}

/// Wash Accept-Encoding after vcl_recv (not for pipe or pass), as
/// Varnish does for the sake of Vary: `gzip` if the client can take it,
/// else removed. With Brotli on, `br` is kept in front when the client
/// takes it: `br, gzip`, `br`. Returns the header lines removed and the
/// value set, for the log (Varnish's ReqUnset and ReqHeader records);
/// a header that already reads as wanted is left alone.
pub fn wash(req: &mut Headers, brotli: bool) -> (Vec<(Bytes, Bytes)>, Option<&'static [u8]>) {
    let (gz, br) = (can_gzip(req), brotli && can_brotli(req));
    let want: Option<&'static [u8]> = match (br, gz) {
        (true, true) => Some(b"br, gzip"),
        (true, false) => Some(b"br"),
        (false, true) => Some(b"gzip"),
        (false, false) => None,
    };
    let first = req.get("accept-encoding");
    if let (Some(w), Some(f)) = (want, first) {
        if f.eq_ignore_ascii_case(w) {
            return (Vec::new(), None);
        }
    }
    let removed: Vec<(Bytes, Bytes)> = req.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"accept-encoding")).cloned().collect();
    req.unset("accept-encoding");
    if let Some(w) = want {
        req.set("Accept-Encoding", Bytes::from_static(w));
    }
    (removed, want)
}

/// `ETag: "x"` becomes `ETag: W/"x"` (a changed encoding is not the same
/// bytes).
pub fn weaken_etag(h: &mut Headers) {
    if let Some(e) = h.get("etag") {
        if !e.starts_with(b"W/") {
            let mut w = b"W/".to_vec();
            w.extend_from_slice(e);
            h.set("ETag", Bytes::from(w));
        }
    }
}

/// Add Accept-Encoding to Vary (Varnish's `RFC2616_Vary_AE`).
pub fn vary_ae(h: &mut Headers) {
    match h.get("vary") {
        Some(v) if token(v, "Accept-Encoding").is_some() => {}
        Some(v) => {
            let mut n = v.to_vec();
            n.extend_from_slice(b", Accept-Encoding");
            h.set("Vary", Bytes::from(n));
        }
        None => h.set("Vary", Bytes::from_static(b"Accept-Encoding")),
    }
}

/// A gzip body's bits and plain length, known once it is complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GzipInfo {
    pub bits: bits::Bits,
    /// Bytes once gunzipped (the Content-Length a gunzip delivery sends).
    pub plain_len: u64,
}

/// What an object's body is, for delivery: gzip (Varnish's `OF_GZIPED`)
/// and whether it has a Brotli copy.
#[derive(Clone, Default)]
pub struct Coding {
    pub gzip: bool,
    pub info: OnceLock<GzipInfo>,
    /// The Brotli copy (`beresp.do_brotli`), made once at fetch.
    pub br: Option<ObjBody>,
    /// `beresp.do_esi`: the body is parsed once it is complete; its
    /// instructions, if it held any ESI.
    pub esi: bool,
    pub esi_data: OnceLock<std::sync::Arc<crate::esi::EsiData>>,
    /// The fetch changed the body's Content-Encoding (gzip, gunzip, an
    /// ESI page kept gzip): a 304 refreshing the object has its ETag
    /// weakened (Varnish's OF_CHGCE). Not kept across a restart.
    pub chgce: bool,
}

/// A `Gzip` log record's payload as Varnish writes it:
/// `<kind> <total in> <total out> <start bit> <last bit> <stop bit>`.
pub fn record(kind: &str, total_in: u64, total_out: u64, b: bits::Bits) -> String {
    format!("{kind} {total_in} {total_out} {} {} {}", b.start, b.last, b.stop)
}

#[cfg(test)]
mod tests;
