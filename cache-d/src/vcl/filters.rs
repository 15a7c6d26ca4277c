//! beresp.filters and resp.filters as Varnish 7.1 shows them: the names
//! of the fetch and delivery filters the do_* knobs imply (its
//! cache_vrt_filter.c), and a list VCL sets, read back into the knobs
//! cache-d's fetch and delivery act on.

use crate::vcl::model::{Beresp, Task};

/// The fetch filters Varnish would run for `b` now (its
/// vbf_default_filter_list, http_gzip_support on): "gunzip", "esi",
/// "esi_gzip", "gzip", "testgunzip", in chain order.
pub fn beresp_default(b: &Beresp) -> String {
    let h = &b.headers;
    let no_body = h.get("content-length").is_some_and(|v| v.trim_ascii() == b"0") || matches!(b.status, 204 | 304);
    if no_body {
        return String::new();
    }
    let (is_gzip, is_plain) = match h.get("content-encoding") {
        Some(v) => (v.trim_ascii().eq_ignore_ascii_case(b"gzip"), false),
        None => (false, true),
    };
    let do_gunzip = b.do_gunzip && is_gzip;
    let do_gzip = b.do_gzip && is_plain;
    let mut out: Vec<&str> = Vec::new();
    if do_gunzip || (is_gzip && b.do_esi) {
        out.push("gunzip");
    }
    if b.do_esi {
        out.push(if do_gzip || (is_gzip && !do_gunzip) { "esi_gzip" } else { "esi" });
    } else {
        if do_gzip {
            out.push("gzip");
        }
        if is_gzip && !do_gunzip {
            out.push("testgunzip");
        }
    }
    out.join(" ")
}

/// `set beresp.filters = list`: the knobs the chain comes to (ESI if it
/// has esi or esi_gzip; the body stored gzip or not as its last coding
/// filter leaves it), the list kept as set.
pub fn beresp_set(b: &mut Beresp, list: &str) {
    let is_gzip = b.headers.get("content-encoding").is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"gzip"));
    let mut gzip = is_gzip;
    let mut esi = false;
    for f in list.split_ascii_whitespace() {
        match f {
            "gunzip" => gzip = false,
            "gzip" => gzip = true,
            "esi" => (esi, gzip) = (true, false),
            "esi_gzip" => (esi, gzip) = (true, true),
            _ => {}
        }
    }
    b.do_esi = esi;
    b.do_gunzip = is_gzip && !gzip;
    b.do_gzip = !is_gzip && gzip;
    b.filters = Some(list.split_ascii_whitespace().collect::<Vec<_>>().join(" "));
}

/// The delivery filters Varnish would run now (its
/// resp_default_filter_list): "esi" for an object with ESI instructions
/// followed, "gunzip" for a gzip object to a client that does not take
/// gzip, "range" for a 200 to a request with Range.
pub fn resp_default(t: &Task<'_>) -> String {
    let mut out: Vec<&str> = Vec::new();
    let (Some(resp), Some(req)) = (t.resp.as_deref(), t.req.as_deref()) else { return String::new() };
    // resp.do_esi reads true for any object ESI is not disabled for; the
    // filter is there only for one with ESI to process.
    if resp.do_esi && t.obj.is_some_and(|o| o.can_esi) {
        out.push("esi");
    }
    if t.obj.is_some_and(|o| o.gzip) && !crate::gzip::can_gzip(&req.headers) {
        out.push("gunzip");
    }
    if resp.status == 200 && req.headers.has("range") {
        out.push("range");
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn beresp(ce: Option<&str>) -> Beresp {
        let mut b = Beresp { status: 200, ..Beresp::default() };
        if let Some(ce) = ce {
            b.headers.set("Content-Encoding", Bytes::copy_from_slice(ce.as_bytes()));
        }
        b
    }

    #[test]
    fn default_lists_follow_the_knobs() {
        let mut b = beresp(None);
        assert_eq!(beresp_default(&b), "");
        b.do_esi = true;
        assert_eq!(beresp_default(&b), "esi");
        b.do_gzip = true;
        assert_eq!(beresp_default(&b), "esi_gzip");
        let mut g = beresp(Some("gzip"));
        assert_eq!(beresp_default(&g), "testgunzip");
        g.do_esi = true;
        assert_eq!(beresp_default(&g), "gunzip esi_gzip");
        (g.do_esi, g.do_gunzip) = (false, true);
        assert_eq!(beresp_default(&g), "gunzip");
    }

    #[test]
    fn a_set_list_becomes_the_knobs() {
        let mut b = beresp(None);
        beresp_set(&mut b, "gzip gunzip gzip gunzip gzip");
        assert!(b.do_gzip && !b.do_gunzip && !b.do_esi);
        let mut g = beresp(Some("gzip"));
        beresp_set(&mut g, "gunzip esi");
        assert!(g.do_esi && g.do_gunzip && !g.do_gzip);
        beresp_set(&mut g, "");
        assert!(!g.do_esi && !g.do_gunzip && !g.do_gzip);
        assert_eq!(g.filters.as_deref(), Some(""));
    }
}
