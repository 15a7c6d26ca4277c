//! RFC mode's language selection under Vary: Accept-Language.

/// RFC mode's language selection (RFC 9110 §12.5.4, RFC 9111 §4.1): a
/// variant stored with `Content-Language: L` serves a request whose
/// Accept-Language prefers L alone above every other range (the highest
/// qvalue, no tie): the origin, which chose L when L was on offer, would
/// choose it again. A tie, a wildcard or several content languages: no.
pub fn language_selects<'a>(req: impl Iterator<Item = (&'a [u8], &'a [u8])>, content_language: Option<&[u8]>) -> bool {
    let Some(lang) = content_language.map(<[u8]>::trim_ascii).filter(|l| !l.is_empty() && !l.contains(&b',')) else { return false };
    let mut best: Option<(f64, &[u8])> = None;
    let mut tie = false;
    for (_, v) in req.filter(|(n, _)| n.eq_ignore_ascii_case(b"accept-language")) {
        for member in v.split(|&b| b == b',') {
            let mut parts = member.split(|&b| b == b';');
            let tag = parts.next().unwrap_or_default().trim_ascii();
            let q = parts
                .filter_map(|p| p.trim_ascii().strip_prefix(b"q=").or_else(|| p.trim_ascii().strip_prefix(b"Q=")))
                .find_map(|v| std::str::from_utf8(v.trim_ascii()).ok()?.parse::<f64>().ok())
                .unwrap_or(1.0);
            if tag.is_empty() || q <= 0.0 {
                continue;
            }
            match best {
                Some((bq, _)) if q < bq => {}
                Some((bq, _)) if q == bq => tie = true,
                _ => (best, tie) = (Some((q, tag)), false),
            }
        }
    }
    matches!(best, Some((_, tag)) if !tie && tag != b"*" && tag.eq_ignore_ascii_case(lang))
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
