//! RFC mode's language selection under Vary: Accept-Language.

/// One member of Accept-Language: its qvalue, its language range
/// lowercased, and the qvalue as written (empty when it is 1).
pub struct Range {
    pub q: f64,
    pub tag: Vec<u8>,
    pub q_text: Vec<u8>,
}

/// The members of Accept-Language field lines, in order: split at commas
/// and semicolons, spaces dropped, names lowercased, empty members gone.
/// Both RFC mode's normal form (req/rfc.rs) and its selection read it.
pub fn ranges<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<Range> {
    let mut out = Vec::new();
    for member in lines.into_iter().flat_map(|l| l.split(|&b| b == b',')) {
        let mut parts = member.split(|&b| b == b';').map(<[u8]>::trim_ascii);
        let tag = parts.next().unwrap_or_default().to_ascii_lowercase();
        if tag.is_empty() {
            continue;
        }
        let mut range = Range { q: 1.0, tag, q_text: Vec::new() };
        for param in parts {
            let param: Vec<u8> = param.iter().filter(|b| !b.is_ascii_whitespace()).map(u8::to_ascii_lowercase).collect();
            if let Some(v) = param.strip_prefix(b"q=") {
                range.q = std::str::from_utf8(v).ok().and_then(|t| t.parse::<f64>().ok()).unwrap_or(1.0);
                range.q_text = if range.q == 1.0 { Vec::new() } else { v.to_vec() };
            }
        }
        out.push(range);
    }
    out
}

/// RFC mode's language selection (RFC 9110 §12.5.4, RFC 9111 §4.1): a
/// variant stored with `Content-Language: L` serves a request whose
/// Accept-Language prefers L alone above every other range (the highest
/// qvalue, no tie): the origin, which chose L when L was on offer, would
/// choose it again. A tie, a wildcard or several content languages: no.
pub fn language_selects<'a>(req: impl Iterator<Item = (&'a [u8], &'a [u8])>, content_language: Option<&[u8]>) -> bool {
    let Some(lang) = content_language.map(<[u8]>::trim_ascii).filter(|l| !l.is_empty() && !l.contains(&b',')) else { return false };
    let lines = req.filter(|(n, _)| n.eq_ignore_ascii_case(b"accept-language")).map(|(_, v)| v);
    let mut best: Option<Range> = None;
    let mut tie = false;
    for r in ranges(lines).into_iter().filter(|r| r.q > 0.0) {
        match &best {
            Some(b) if r.q < b.q => {}
            Some(b) if r.q == b.q => tie = true,
            _ => (best, tie) = (Some(r), false),
        }
    }
    matches!(best, Some(b) if !tie && b.tag != b"*" && b.tag.eq_ignore_ascii_case(lang))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_most_preferred_language_selects_a_variant() {
        let sel = |al: &[&str], cl: Option<&str>| {
            let h: Vec<(&[u8], &[u8])> = al.iter().map(|v| (&b"Accept-Language"[..], v.as_bytes())).collect();
            language_selects(h.iter().copied(), cl.map(str::as_bytes))
        };
        assert!(sel(&["fr;q=0.5, de;q=1.0"], Some("de")));
        assert!(sel(&["DE"], Some("de")));
        assert!(sel(&["en;q=0.2", "de;q=0.9"], Some("de")));
        assert!(!sel(&["fr, de;q=0.9"], Some("de")), "fr preferred");
        assert!(!sel(&["en, de"], Some("de")), "a tie");
        assert!(!sel(&["de;q=0"], Some("de")));
        assert!(!sel(&["*"], Some("de")));
        assert!(!sel(&["de"], None));
        assert!(!sel(&["de"], Some("de, en")));
        assert!(!sel(&[], Some("de")));
    }
}
