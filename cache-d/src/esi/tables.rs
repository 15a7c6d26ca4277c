//! The ESI parser's match tables and character classes (Varnish's
//! `vep_match_*` tables and `vct` classes).

/// The parser's states (Varnish's VEP_* states).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum St {
    Start,
    Bom,
    TestXml,
    NotXml,
    NextTag,
    NotMyTag,
    StartTag,
    CommentEsi,
    Comment,
    Cdata,
    EsiTag,
    EsiEndTag,
    EsiRemove,
    EsiInclude,
    EsiComment,
    EsiBogon,
    InTag,
    TagError,
    Attr,
    SkipAttr,
    AttrDelim,
    AttrGetVal,
    AttrVal,
    Until,
    MatchBuf,
    Match,
}

pub(super) type Table = &'static [(Option<&'static [u8]>, St)];

pub(super) const MATCH_STARTTAG: Table = &[
    (Some(b"!--esi"), St::CommentEsi),
    (Some(b"!---->"), St::NextTag),
    (Some(b"!--"), St::Comment),
    (Some(b"/esi:"), St::EsiEndTag),
    (Some(b"esi:"), St::EsiTag),
    (Some(b"![CDATA["), St::Cdata),
    (None, St::NotMyTag),
];
pub(super) const MATCH_ESI: Table =
    &[(Some(b"include"), St::EsiInclude), (Some(b"remove"), St::EsiRemove), (Some(b"comment"), St::EsiComment), (None, St::EsiBogon)];
pub(super) const MATCH_ATTR_INCLUDE: Table = &[(Some(b"src="), St::AttrGetVal), (Some(b"onerror="), St::AttrGetVal), (None, St::SkipAttr)];
// Varnish 7.1 matches EB BB BF here (the UTF-8 BOM is EF BB BF); kept,
// so that the same bodies are treated the same.
pub(super) const MATCH_BOM: Table = &[(Some(b"\xeb\xbb\xbf"), St::Start), (None, St::Bom)];

pub(super) fn is_lws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}
pub(super) fn is_sp(c: u8) -> bool {
    matches!(c, b' ' | b'\t')
}
pub(super) fn is_xml_name_start(c: u8) -> bool {
    c == b':' || c == b'_' || c.is_ascii_alphabetic() || (0xc0..=0xff).contains(&c) && c != 0xd7 && c != 0xf7
}
pub(super) fn is_xml_name(c: u8) -> bool {
    is_xml_name_start(c) || c == b'-' || c == b'.' || c.is_ascii_digit() || c == 0xb7
}

/// Match `b` against a table: the entry, or None when more input is
/// needed to tell.
pub(super) fn lookup(table: Table, b: &[u8]) -> Option<(Option<&'static [u8]>, St)> {
    for (m, st) in table {
        let Some(m) = m else { return Some((None, *st)) };
        let n = m.len().min(b.len());
        if m[..n] == b[..n] {
            if n == m.len() {
                return Some((Some(*m), *st));
            }
            return None;
        }
    }
    None
}
