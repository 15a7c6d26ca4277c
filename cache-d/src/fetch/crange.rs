//! A backend's Content-Range checked against the range the fetch asked
//! for (Varnish's VRG_CheckBo): a response whose range is malformed,
//! unasked for, or not the one asked for fails the fetch (503) rather
//! than reach a client, or the cache, as the whole object.

/// The number at the start of `s` (digits only) and the rest; None
/// without digits, Err on overflow.
fn num(s: &[u8]) -> (Result<Option<u64>, ()>, &[u8]) {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return (Ok(None), s);
    }
    let v = std::str::from_utf8(&s[..n]).ok().and_then(|d| d.parse::<u64>().ok()).filter(|&v| v <= i64::MAX as u64);
    (v.map(Some).ok_or(()), &s[n..])
}

fn lws_end(s: &[u8]) -> bool {
    s.iter().all(|&c| c == b' ' || c == b'\t')
}

/// A request's `Range: bytes=LO-HI` (either side may be missing), as
/// Varnish's http_GetRange: Err with its reason when malformed.
pub fn request_range(v: &[u8]) -> Result<(Option<u64>, Option<u64>), &'static str> {
    let Some(eq) = v.iter().position(|&c| c == b'=') else { return Err("Missing '='") };
    if !v[..eq].eq_ignore_ascii_case(b"bytes") {
        return Err("Not Bytes");
    }
    let (lo, rest) = num(&v[eq + 1..]);
    let lo = lo.map_err(|()| "Low number too big")?;
    let Some(rest) = rest.strip_prefix(b"-") else { return Err("Missing hyphen") };
    let (hi, rest) = num(rest);
    let hi = hi.map_err(|()| "High number too big")?;
    match (lo, hi) {
        (None, None) => return Err("Neither high nor low"),
        (None, Some(0)) => return Err("No low, high is zero"),
        (Some(l), Some(h)) if h < l => return Err("high smaller than low"),
        _ => {}
    }
    if !lws_end(rest) {
        return Err("Trailing stuff");
    }
    Ok((lo, hi))
}

/// A Content-Range: its range (None for `*`) and the whole length.
pub struct ContentRange {
    pub range: Option<(u64, u64)>,
    pub len: u64,
}

/// A response's `Content-Range: bytes LO-HI/LEN` (`*` for the range or
/// the length): None for another unit, Err when malformed (Varnish's
/// http_GetContentRange, which also refuses an unknown length `/*`).
pub fn content_range(v: &[u8]) -> Result<Option<ContentRange>, ()> {
    let Some(sp) = v.iter().position(|&c| c == b' ') else { return Err(()) };
    if !v[..sp].eq_ignore_ascii_case(b"bytes") {
        return Ok(None);
    }
    let mut b = &v[sp + 1..];
    let range = if let Some(rest) = b.strip_prefix(b"*") {
        b = rest;
        None
    } else {
        let (lo, rest) = num(b);
        let Ok(Some(lo)) = lo else { return Err(()) };
        let Some(rest) = rest.strip_prefix(b"-") else { return Err(()) };
        let (hi, rest) = num(rest);
        let Ok(Some(hi)) = hi else { return Err(()) };
        b = rest;
        Some((lo, hi))
    };
    let Some(b) = b.strip_prefix(b"/") else { return Err(()) };
    // An unknown length (`/*`) fails the checks below in Varnish too.
    let (len, rest) = num(b);
    let Ok(Some(len)) = len else { return Err(()) };
    if len == 0 || !lws_end(rest) {
        return Err(());
    }
    match range {
        Some((lo, hi)) if lo > hi || hi >= len => Err(()),
        range => Ok(Some(ContentRange { range, len })),
    }
}

/// Why a response with these headers does not answer the request's
/// `range` (the Range the fetch began with), or None when it does.
/// `content_length`: the response's Content-Length header, if any.
pub fn fault(range: Option<&[u8]>, status: u16, crange: Option<&[u8]>, content_length: Option<&[u8]>) -> Option<String> {
    let asked = match range.map(request_range) {
        Some(Err(why)) => return Some(format!("Invalid range header ({why})")),
        Some(Ok(r)) => Some(r),
        None => None,
    };
    let cr = match crange.map(content_range) {
        Some(Err(())) => return Some("Invalid content-range header".into()),
        Some(Ok(cr)) => cr,
        None => None,
    };
    let clen = match content_length.map(|v| std::str::from_utf8(v.trim_ascii()).ok().and_then(|s| s.parse::<u64>().ok())) {
        Some(None) => return Some("Invalid content-length header".into()),
        Some(Some(n)) => Some(n),
        None => None,
    };
    let ContentRange { range, len } = cr?;
    let Some((lo, hi)) = asked else { return Some("Unexpected content-range header".into()) };
    let (crlo, crhi) = match range {
        Some(r) => r,
        None if status == 416 => return None,
        None => (0, len - 1),
    };
    let crlen = crhi - crlo + 1;
    if let Some(c) = clen.filter(|&c| c != crlen) {
        return Some(format!("Expected content length {crlen}, got {c}"));
    }
    // Without a low end the high one was fitted to the length: nothing
    // more to check.
    let lo = lo?;
    if lo != crlo {
        return Some(format!("Expected low range {crlo}, got {lo}"));
    }
    match hi {
        Some(h) if h < crhi => Some(format!("Expected minimum high range {crhi}, got {h}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(range: Option<&str>, status: u16, cr: Option<&str>, cl: Option<&str>) -> Option<String> {
        fault(range.map(str::as_bytes), status, cr.map(str::as_bytes), cl.map(str::as_bytes))
    }

    #[test]
    fn ranges_as_varnish_checks_them() {
        // No Content-Range: nothing to check.
        assert_eq!(f(None, 200, None, Some("100")), None);
        assert_eq!(f(Some("bytes=10-19"), 206, Some("bytes 10-19/100"), Some("10")), None);
        assert_eq!(f(Some("bytes=10-19"), 206, Some("bytes 0-49/100"), Some("40")).unwrap(), "Expected content length 50, got 40");
        assert_eq!(f(Some("bytes=10-19"), 206, Some("bytes 10-19/100"), Some("40")).unwrap(), "Expected content length 10, got 40");
        assert_eq!(f(Some("bytes=10-19"), 206, Some("bytes 0-9/100"), Some("10")).unwrap(), "Expected low range 0, got 10");
        assert_eq!(f(Some("bytes=10-19"), 206, Some("bytes 10-29/100"), Some("20")).unwrap(), "Expected minimum high range 29, got 19");
        assert_eq!(f(Some("bytes=90-119"), 416, Some("bytes */100"), Some("100")), None);
        assert_eq!(f(None, 200, Some("bytes 0-49/100"), Some("40")).unwrap(), "Unexpected content-range header");
        assert_eq!(f(None, 200, Some("bytes */100"), Some("100")).unwrap(), "Unexpected content-range header");
        assert_eq!(f(None, 200, Some("bytes=0-99/100"), Some("100")).unwrap(), "Invalid content-range header");
        assert_eq!(f(Some("bytes=0-0"), 200, Some("bytes */*"), Some("100")).unwrap(), "Invalid content-range header");
        assert_eq!(f(Some("bytes=-5"), 206, Some("bytes 95-99/100"), Some("5")), None);
        assert_eq!(f(Some("bytes=0-1,4-5"), 206, Some("bytes 0-1/100"), None).unwrap(), "Invalid range header (Trailing stuff)");
        // Another unit is not ours to judge.
        assert_eq!(f(None, 200, Some("items 0-1/2"), None), None);
    }
}
