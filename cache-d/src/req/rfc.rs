//! RFC mode (feature rfc9111) on the request side. RFC 9111 §4.1:
//! Accept-Language values that mean the same (order of equal
//! preferences, case, spaces) select the same stored response.
//!
//! RFC 9111 §4.4: a non-error response to an
//! unsafe method invalidates what the cache holds for the request's URL,
//! and for the URLs its Location and Content-Location name on the same
//! host. Varnish leaves that to each policy (a purge in vcl_recv); here it
//! is the cache's own, after the response came.
//!
//! "Invalidate" is a purge of every variant under the key vcl_hash makes
//! for that URL (the request's own key, or vcl_hash run again with the
//! other URL as req.url), so a policy's hash (host normalised, cookies
//! hashed, ...) decides what the URL's objects are, as it does for lookups.

use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};

use crate::req::state::{Request, With};
use crate::req::transport::Transport;
use crate::vcl::model::{Headers, Sub};

/// Safe methods (RFC 9110 §9.2.1); every other one, known or not, is unsafe.
fn safe(method: &[u8]) -> bool {
    matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE")
}

/// After a backend response to this request: invalidate when RFC mode is
/// on, the method is unsafe and the status is not an error (2xx, 3xx).
pub fn after_response<T: Transport>(r: &mut Request<'_, T>, status: u16, headers: &Headers) {
    if safe(&r.req.method) || !(200..400).contains(&status) || !r.p.rfc9111() {
        return;
    }
    let mut n = 0;
    if let Some(key) = r.req.hash.clone() {
        n += r.sh.cache.purge(&key);
    }
    let host = r.req.headers.get("host").cloned().unwrap_or_default();
    let mut urls: Vec<Vec<u8>> = Vec::new();
    for name in ["location", "content-location"] {
        if let Some(url) = headers.get(name).and_then(|v| same_host_path(v.trim_ascii(), &host, &r.req.url)) {
            if url != r.req.url[..] && !urls.contains(&url) {
                urls.push(url);
            }
        }
    }
    for url in urls {
        let key = hash_of(r, &url);
        n += r.sh.cache.purge(&key);
        r.log.rec_parts(Tag::Debug, LogSide::Client, r.rxid, &[b"RFC 9111 invalidation of ", &url]);
    }
    r.log.recf(Tag::Debug, LogSide::Client, r.rxid, format_args!("RFC 9111 invalidation: {n} objects"));
    r.sh.seg.add(C::NObjPurged, n as u64);
}

/// Accept-Language as one normal value: language ranges lowercased,
/// spaces and empty members gone, `q=1` dropped, other qvalues written as
/// given, ordered by preference and then by name (the order of equal
/// preferences means nothing). Logged as the Accept-Encoding wash is.
pub fn normalise_accept_language<T: Transport>(r: &mut Request<'_, T>) {
    let values: Vec<&[u8]> =
        r.req.headers.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"accept-language")).map(|(_, v)| &v[..]).collect();
    if values.is_empty() {
        return;
    }
    let normal = normal_language_list(&values);
    if values.len() == 1 && values[0] == &normal[..] {
        return;
    }
    for (n, v) in r.req.headers.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"accept-language")) {
        r.log.rec_parts(Tag::ReqUnset, LogSide::Client, r.rxid, &[n, b": ", v]);
    }
    r.req.headers.unset("accept-language");
    r.log.rec_parts(Tag::ReqHeader, LogSide::Client, r.rxid, &[b"Accept-Language: ", &normal]);
    r.req.headers.set("Accept-Language", bytes::Bytes::from(normal));
}

/// The normal form of Accept-Language field lines (see above).
pub fn normal_language_list(lines: &[&[u8]]) -> Vec<u8> {
    let mut items = crate::cache::rfc::language::ranges(lines.iter().copied());
    items.sort_by(|a, b| b.q.total_cmp(&a.q).then_with(|| a.tag.cmp(&b.tag)));
    let mut out = Vec::new();
    for r in items {
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(&r.tag);
        if !r.q_text.is_empty() {
            out.extend_from_slice(b";q=");
            out.extend_from_slice(&r.q_text);
        }
    }
    out
}

/// The key vcl_hash makes for `url` in this request's place.
fn hash_of<T: Transport>(r: &mut Request<'_, T>, url: &[u8]) -> Vec<u8> {
    let saved = std::mem::replace(&mut r.req.url, bytes::Bytes::copy_from_slice(url));
    let mut key = Vec::with_capacity(url.len() + 32);
    r.call(Sub::Hash, With { key: Some(&mut key), ..With::default() });
    r.req.url = saved;
    key
}

/// The path (with query) `reference` names when it is on `host`: an
/// absolute URL whose authority is the Host, an absolute path, or a
/// relative reference resolved against `base` (RFC 3986 §5.2, without
/// dot segments). None for another host or an empty reference.
pub fn same_host_path(reference: &[u8], host: &[u8], base: &[u8]) -> Option<Vec<u8>> {
    if reference.is_empty() {
        return None;
    }
    let lower = reference.to_ascii_lowercase();
    for scheme in [&b"http://"[..], b"https://"] {
        if lower.starts_with(scheme) {
            let rest = &reference[scheme.len()..];
            let end = rest.iter().position(|&b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(rest.len());
            if !rest[..end].eq_ignore_ascii_case(host) || host.is_empty() {
                return None;
            }
            let path = strip_fragment(&rest[end..]);
            return Some(if path.first() == Some(&b'/') { path.to_vec() } else { [b"/", path].concat() });
        }
    }
    if reference.starts_with(b"//") || lower.iter().take_while(|&&b| b != b'/').any(|&b| b == b':') {
        return None; // a network-path reference or another scheme
    }
    let path = strip_fragment(reference);
    if path.first() == Some(&b'/') {
        return Some(path.to_vec());
    }
    let base = &base[..base.iter().position(|&b| b == b'?').unwrap_or(base.len())];
    let dir = &base[..base.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1)];
    Some(if dir.is_empty() { [b"/", path].concat() } else { [dir, path].concat() })
}

fn strip_fragment(v: &[u8]) -> &[u8] {
    &v[..v.iter().position(|&b| b == b'#').unwrap_or(v.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(reference: &str, host: &str, base: &str) -> Option<String> {
        same_host_path(reference.as_bytes(), host.as_bytes(), base.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn location_urls_on_the_same_host_only() {
        assert_eq!(p("/a/b?x=1", "h", "/c"), Some("/a/b?x=1".into()));
        assert_eq!(p("http://H:8080/a#top", "h:8080", "/c"), Some("/a".into()));
        assert_eq!(p("https://h", "h", "/c"), Some("/".into()));
        assert_eq!(p("http://other/a", "h", "/c"), None);
        assert_eq!(p("//other/a", "h", "/c"), None);
        assert_eq!(p("mailto:x@y", "h", "/c"), None);
        assert_eq!(p("", "h", "/c"), None);
        // Relative to the request's directory.
        assert_eq!(p("new", "h", "/dir/old?q"), Some("/dir/new".into()));
        assert_eq!(p("new", "h", "old"), Some("/new".into()));
    }

    #[test]
    fn accept_language_in_one_normal_form() {
        let n = |lines: &[&str]| String::from_utf8(normal_language_list(&lines.iter().map(|l| l.as_bytes()).collect::<Vec<_>>())).unwrap();
        assert_eq!(n(&["en, de"]), "de, en");
        assert_eq!(n(&["de, en"]), "de, en");
        assert_eq!(n(&["eN, De"]), "de, en");
        assert_eq!(n(&[" en ,   de"]), "de, en");
        assert_eq!(n(&["en", "de"]), "de, en");
        assert_eq!(n(&["fr;q=0.5, de;Q=1.0, en-GB ; q = 0.8"]), "de, en-gb;q=0.8, fr;q=0.5");
        assert_eq!(n(&["da, en-gb;q=0.8, en;q=0.7"]), "da, en-gb;q=0.8, en;q=0.7");
        assert_eq!(n(&[", ,"]), "");
    }

    #[test]
    fn safe_methods() {
        for m in ["GET", "HEAD", "OPTIONS", "TRACE"] {
            assert!(safe(m.as_bytes()));
        }
        for m in ["POST", "PUT", "DELETE", "PATCH", "M-SEARCH", "get"] {
            assert!(!safe(m.as_bytes()));
        }
    }
}
