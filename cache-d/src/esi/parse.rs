//! The ESI parser: a port of Varnish 7.1's VEP state machine (its states,
//! marks and messages, so the same body gives the same instructions and
//! the same `ESI_xmlerror` records), fed a body piece by piece as it is
//! fetched. It produces the instruction list an object keeps: bytes to
//! send as they are, bytes to skip, and includes.

/// One step of an ESI object's delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instr {
    /// Send this many bytes of the stored body.
    Verbatim(u64),
    /// Skip this many.
    Skip(u64),
    /// Run a sub-request for `url` (with `host` as its Host if the src
    /// named one); `abort` when `onerror="continue"` was not given.
    Include { url: String, host: Option<String>, abort: bool },
}

/// Feature bits the parser looks at (Varnish's `feature` parameter).
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    pub disable_xml_check: bool,
    pub ignore_https: bool,
    pub ignore_other_elements: bool,
    pub remove_bom: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Verbatim,
    Skip,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Doer {
    Include,
    Remove,
    Comment,
}

use super::tables::*;

/// Longest include src kept (a longer one is an error, not memory).
const MAX_ATTR: usize = 8192;

/// The parser's state between pieces.
pub struct Parser {
    url: Vec<u8>,
    features: Features,
    out: Vec<Instr>,
    /// `ESI_xmlerror` payloads, and how many were errors and warnings.
    pub records: Vec<String>,
    pub errors: u64,
    pub warnings: u64,
    state: St,
    startup: bool,
    esi_found: bool,
    endtag: bool,
    emptytag: bool,
    canattr: bool,
    remove: bool,
    o_wait: u64,
    o_pending: u64,
    o_last: u64,
    /// Bytes the default callback has counted (Varnish's cb_x).
    cb_x: u64,
    last_mark: Mark,
    until: &'static [u8],
    until_p: usize,
    until_s: St,
    in_esi_tag: bool,
    esicmt: Option<&'static [u8]>,
    esicmt_p: usize,
    attr: Option<Table>,
    attr_val: Option<Vec<u8>>,
    attr_delim: u8,
    matching: Option<Table>,
    match_hit: Option<&'static [u8]>,
    tag: [u8; 8],
    tag_i: usize,
    dostuff: Option<Doer>,
    include_src: Option<Vec<u8>>,
    include_continue: bool,
}

impl Parser {
    /// A parser for the body of the object fetched for `url` (relative
    /// includes are resolved against it).
    pub fn new(url: &[u8], features: Features) -> Parser {
        Parser {
            url: url.to_vec(),
            features,
            out: Vec::new(),
            records: Vec::new(),
            errors: 0,
            warnings: 0,
            state: St::Start,
            startup: true,
            esi_found: false,
            endtag: false,
            emptytag: false,
            canattr: false,
            remove: false,
            o_wait: 0,
            o_pending: 0,
            o_last: 0,
            cb_x: 0,
            last_mark: Mark::Skip,
            until: b"",
            until_p: 0,
            until_s: St::NextTag,
            in_esi_tag: false,
            esicmt: None,
            esicmt_p: 0,
            attr: None,
            attr_val: None,
            attr_delim: 0,
            matching: None,
            match_hit: None,
            tag: [0; 8],
            tag_i: 0,
            dostuff: None,
            include_src: None,
            include_continue: false,
        }
    }

    fn error(&mut self, what: &str) {
        self.errors += 1;
        self.records.push(format!("ERR after {} {what}", self.o_last));
    }

    fn warn(&mut self, what: &str) {
        self.warnings += 1;
        self.records.push(format!("WARN after {} {what}", self.o_last));
    }

    fn emit(&mut self, l: u64, mark: Mark) {
        if l == 0 {
            return;
        }
        self.out.push(match mark {
            Mark::Skip => Instr::Skip(l),
            Mark::Verbatim => Instr::Verbatim(l),
        });
    }

    /// Mark the input from `ver` up to `p` (indexes in this piece).
    fn mark(&mut self, ver: &mut usize, p: usize, mark: Mark) {
        if self.last_mark == mark && p == *ver && self.o_pending == 0 {
            return;
        }
        if self.last_mark != mark && (self.o_wait > 0 || self.startup) {
            let lcb = self.cb_x;
            self.emit(lcb - self.o_last, self.last_mark);
            self.o_last = lcb;
            self.o_wait = 0;
        }
        if self.o_pending > 0 {
            self.cb_x += self.o_pending;
            self.o_wait += self.o_pending;
            self.o_pending = 0;
        }
        let l = (p - *ver) as u64;
        *ver = p;
        self.o_wait += l;
        self.last_mark = mark;
        self.cb_x += l;
    }

    fn pending(&mut self, ver: &mut usize, p: usize) {
        self.o_pending += (p - *ver) as u64;
        *ver = p;
    }

    /// An `<esi:include>` or `<esi:comment>` starts: legal outside a
    /// remove and never as an end tag. True if its attributes follow.
    fn empty_element(&mut self, name: &str, doer: Doer) -> bool {
        if self.remove {
            self.error(&format!("ESI 1.0 <esi:{name}> element nested in <esi:remove>"));
        } else if self.endtag {
            self.error(&format!("ESI 1.0 </esi:{name}> illegal end-tag"));
        } else {
            self.dostuff = Some(doer);
            self.state = St::InTag;
            return true;
        }
        self.state = St::TagError;
        false
    }

    fn do_stuff(&mut self, tag: bool) {
        match self.dostuff {
            Some(Doer::Comment) if !self.emptytag => self.error("ESI 1.0 <esi:comment> needs final '/'"),
            Some(Doer::Comment) => {}
            Some(Doer::Remove) => {
                if self.emptytag {
                    self.error("ESI 1.0 <esi:remove/> not legal");
                } else if self.remove && !self.endtag {
                    self.error("ESI 1.0 <esi:remove> already open");
                } else if !self.remove && self.endtag {
                    self.error("ESI 1.0 <esi:remove> not open");
                } else {
                    self.remove = !self.endtag;
                }
            }
            Some(Doer::Include) if !tag => self.include_attr(),
            Some(Doer::Include) => self.include_tag(),
            None => {}
        }
    }

    fn include_attr(&mut self) {
        let mut val = self.attr_val.take().unwrap_or_default();
        // Varnish reads the value as a C string: it ends at a NUL byte
        // (`/a\0b` includes `/a`; `http://h\0x/a` has no path). A NUL
        // never reaches a request line.
        if let Some(nul) = val.iter().position(|&c| c == 0) {
            val.truncate(nul);
        }
        if self.match_hit == Some(b"src=") {
            if self.include_src.is_some() {
                self.error("ESI 1.0 <esi:include> has multiple src= attributes");
                self.state = St::TagError;
                self.include_src = None;
                return;
            }
            if val.iter().any(|c| is_lws(*c)) {
                self.error("ESI 1.0 <esi:include> has whitespace in src= attribute");
                self.state = St::TagError;
                return;
            }
            // Other control bytes Varnish sends to the backend as they
            // are; a request-target has none (RFC 9112 §3.2), and
            // backends differ in what they make of one: refused here, as
            // whitespace is.
            if val.iter().any(|c| c.is_ascii_control()) {
                self.error("ESI 1.0 <esi:include> has a control character in src= attribute");
                self.state = St::TagError;
                return;
            }
            self.include_src = Some(val);
        } else {
            self.include_continue = val == b"continue";
        }
    }

    fn include_tag(&mut self) {
        if !self.emptytag {
            self.warn("ESI 1.0 <esi:include> lacks final '/'");
        }
        let Some(src) = self.include_src.take() else {
            self.error("ESI 1.0 <esi:include> lacks src attr");
            return;
        };
        let abort = !std::mem::take(&mut self.include_continue);
        // http:// and (if allowed) https:// name a host; the path follows.
        let authority: Option<&[u8]> = if src.len() > 7 && src.starts_with(b"http://") {
            Some(&src[7..])
        } else if src.len() > 8 && src.starts_with(b"https://") {
            if !self.features.ignore_https {
                self.warn("ESI 1.0 <esi:include> with https:// ignored");
                self.state = St::TagError;
                return;
            }
            self.warn("ESI 1.0 <esi:include> https:// treated as http://");
            Some(&src[8..])
        } else {
            None
        };
        let (host, path): (Option<&[u8]>, &[u8]) = match authority {
            None => (None, &src[..]),
            Some(h) => match h.iter().position(|c| *c == b'/') {
                Some(i) => (Some(&h[..i]), &h[i..]),
                None => {
                    self.error("ESI 1.0 <esi:include> invalid src= URL");
                    self.state = St::TagError;
                    return;
                }
            },
        };
        let mut url = Vec::new();
        if host.is_none() && path.first() != Some(&b'/') {
            // Relative: after the last '/' before any '?' of our URL.
            let q = self.url.iter().position(|c| *c == b'?').unwrap_or(self.url.len());
            let cut = match self.url[..q].iter().rposition(|c| *c == b'/') {
                Some(h) => h,
                None => (q + 1).min(self.url.len()),
            };
            url.extend_from_slice(&self.url[..cut]);
            url.push(b'/');
        }
        // The five XML entities, as Varnish decodes them.
        let mut i = 0;
        while i < path.len() {
            let rest = &path[i..];
            let ent: Option<(usize, u8)> = [(&b"&apos;"[..], b'\''), (b"&quot;", b'"'), (b"&lt;", b'<'), (b"&gt;", b'>'), (b"&amp;", b'&')]
                .iter()
                .find(|(e, _)| rest.starts_with(e))
                .map(|(e, c)| (e.len(), *c));
            match ent {
                Some((n, c)) => {
                    url.push(c);
                    i += n;
                }
                None => {
                    url.push(path[i]);
                    i += 1;
                }
            }
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        self.out.push(Instr::Include { url: text(&url), host: host.map(text), abort });
    }

    /// Parse the next piece of the body.
    pub fn parse(&mut self, piece: &[u8]) {
        if piece.is_empty() {
            return;
        }
        let mut ver = 0usize;
        if self.startup {
            self.last_mark = Mark::Skip;
            self.mark(&mut ver, 0, Mark::Verbatim);
            self.startup = false;
        }
        let e = piece.len();
        let mut p = 0usize;
        while p < e {
            p = match self.state {
                St::Start | St::Bom | St::TestXml | St::NotXml => self.prolog(piece, p, &mut ver),
                St::NotMyTag | St::NextTag | St::Until => self.text(piece, p, &mut ver),
                St::StartTag
                | St::Comment
                | St::CommentEsi
                | St::Cdata
                | St::EsiEndTag
                | St::EsiTag
                | St::EsiInclude
                | St::EsiRemove
                | St::EsiComment
                | St::EsiBogon => self.tag(p, &mut ver),
                St::InTag | St::TagError => self.intag(piece, p, &mut ver),
                St::Attr | St::SkipAttr | St::AttrGetVal | St::AttrDelim | St::AttrVal => self.attrs(piece, p),
                St::Match | St::MatchBuf => self.matching(piece, p),
            };
        }
        // Everything given is marked: as skip inside an ESI tag or a
        // remove, else pending until the next piece tells.
        if p == ver {
        } else if self.in_esi_tag || self.remove {
            self.mark(&mut ver, p, Mark::Skip);
        } else {
            self.pending(&mut ver, p);
        }
    }

    /// Section A: the start of the body (BOM, is it XML at all).
    fn prolog(&mut self, piece: &[u8], mut p: usize, ver: &mut usize) -> usize {
        let e = piece.len();
        match self.state {
            St::Start => {
                if self.features.remove_bom && piece[p] == 0xeb {
                    self.matching = Some(MATCH_BOM);
                    self.state = St::Match;
                } else {
                    self.state = St::Bom;
                }
            }
            St::Bom => {
                self.mark(ver, p, Mark::Skip);
                self.state = if self.features.disable_xml_check { St::NextTag } else { St::TestXml };
            }
            St::TestXml => {
                while p < e && is_lws(piece[p]) {
                    p += 1;
                }
                self.mark(ver, p, Mark::Verbatim);
                if p < e && piece[p] == b'<' {
                    p += 1;
                    self.state = St::StartTag;
                } else if p < e && piece[p] == 0xeb {
                    self.records.push("No ESI processing, first char not '<' but BOM. (See feature esi_remove_bom)".into());
                    self.state = St::NotXml;
                } else if p < e {
                    self.records.push("No ESI processing, first char not '<'. (See feature esi_disable_xml_check)".into());
                    self.state = St::NotXml;
                }
            }
            St::NotXml => {
                p = e;
                self.mark(ver, p, Mark::Verbatim);
            }
            _ => unreachable!("state of another section"),
        }
        p
    }

    /// Section B: text between tags, and what skips to a closing string.
    fn text(&mut self, piece: &[u8], mut p: usize, ver: &mut usize) -> usize {
        let e = piece.len();
        match self.state {
            St::NotMyTag => {
                if self.features.ignore_other_elements {
                    p += 1;
                    self.state = St::NextTag;
                } else {
                    self.tag_i = 0;
                    while p < e {
                        p += 1;
                        if piece[p - 1] == b'>' {
                            self.state = St::NextTag;
                            break;
                        }
                    }
                }
                if p == e && !self.remove {
                    self.mark(ver, p, Mark::Verbatim);
                }
            }
            St::NextTag => {
                self.emptytag = false;
                self.attr = None;
                self.dostuff = None;
                while p < e && piece[p] != b'<' {
                    let Some(cmt) = self.esicmt else {
                        p += 1;
                        continue;
                    };
                    if piece[p] != cmt[self.esicmt_p] {
                        p += 1;
                        self.esicmt_p = 0;
                        continue;
                    }
                    if !self.remove && self.esicmt_p == 0 {
                        self.mark(ver, p, Mark::Verbatim);
                    }
                    p += 1;
                    self.esicmt_p += 1;
                    if self.esicmt_p == cmt.len() {
                        self.esi_found = true;
                        self.esicmt = None;
                        self.esicmt_p = 0;
                        // The end of the comment is not sent; what
                        // came before it is.
                        self.mark(ver, p, Mark::Skip);
                    }
                }
                if p < e {
                    if !self.remove {
                        self.mark(ver, p, Mark::Verbatim);
                    }
                    p += 1;
                    self.state = St::StartTag;
                } else if self.esicmt_p == 0 && !self.remove {
                    self.mark(ver, p, Mark::Verbatim);
                }
            }
            St::Until => {
                while p < e {
                    let c = piece[p];
                    p += 1;
                    if c != self.until[self.until_p] {
                        self.until_p = 0;
                    } else {
                        self.until_p += 1;
                        if self.until_p == self.until.len() {
                            self.state = self.until_s;
                            break;
                        }
                    }
                }
                if p == e && !self.remove {
                    self.mark(ver, p, Mark::Verbatim);
                }
            }

            _ => unreachable!("state of another section"),
        }
        p
    }

    /// Section C: what a tag turns out to be.
    fn tag(&mut self, p: usize, ver: &mut usize) -> usize {
        match self.state {
            St::StartTag => {
                self.endtag = false;
                self.matching = Some(MATCH_STARTTAG);
                self.state = St::Match;
            }
            St::Comment => {
                self.esicmt = None;
                self.esicmt_p = 0;
                (self.until, self.until_p, self.until_s) = (b"-->", 0, St::NextTag);
                self.state = St::Until;
            }
            St::CommentEsi => {
                if self.remove {
                    self.error("ESI 1.0 Nested <!--esi element in <esi:remove>");
                }
                self.esicmt = Some(b"-->");
                self.esicmt_p = 0;
                self.state = St::NextTag;
                self.mark(ver, p, Mark::Skip);
            }
            St::Cdata => {
                (self.until, self.until_p, self.until_s) = (b"]]>", 0, St::NextTag);
                self.state = St::Until;
            }
            St::EsiEndTag => {
                self.endtag = true;
                self.state = St::EsiTag;
            }
            St::EsiTag => {
                self.in_esi_tag = true;
                self.esi_found = true;
                self.mark(ver, p, Mark::Skip);
                self.matching = Some(MATCH_ESI);
                self.state = St::Match;
            }
            St::EsiInclude => {
                if self.empty_element("include", Doer::Include) {
                    self.attr = Some(MATCH_ATTR_INCLUDE);
                }
            }
            St::EsiRemove => {
                self.dostuff = Some(Doer::Remove);
                self.state = St::InTag;
            }
            St::EsiComment => {
                self.empty_element("comment", Doer::Comment);
            }
            St::EsiBogon => {
                self.error("ESI 1.0 <esi:bogus> element");
                self.state = St::TagError;
            }
            _ => unreachable!("state of another section"),
        }
        p
    }

    /// Section D: inside an ESI tag, and after an error in one.
    fn intag(&mut self, piece: &[u8], mut p: usize, ver: &mut usize) -> usize {
        let e = piece.len();
        match self.state {
            St::InTag => {
                self.tag_i = 0;
                while p < e && is_lws(piece[p]) && !self.emptytag {
                    p += 1;
                    self.canattr = true;
                }
                if p < e && piece[p] == b'/' && !self.emptytag {
                    p += 1;
                    self.emptytag = true;
                    self.canattr = false;
                }
                if p < e && piece[p] == b'>' {
                    p += 1;
                    self.mark(ver, p, Mark::Skip);
                    self.do_stuff(true);
                    self.in_esi_tag = false;
                    self.state = St::NextTag;
                } else if p < e && self.emptytag {
                    self.error("XML 1.0 '>' does not follow '/' in tag");
                    self.state = St::TagError;
                } else if p < e && self.canattr && is_xml_name_start(piece[p]) {
                    self.state = St::Attr;
                } else if p < e {
                    self.error("XML 1.0 Illegal attribute start char");
                    self.state = St::TagError;
                }
            }
            St::TagError => {
                while p < e && piece[p] != b'>' {
                    p += 1;
                }
                if p < e {
                    p += 1;
                    self.mark(ver, p, Mark::Skip);
                    self.in_esi_tag = false;
                    self.state = St::NextTag;
                    self.attr_val = None;
                }
            }
            _ => unreachable!("state of another section"),
        }
        p
    }

    /// Section E: an ESI tag's attributes.
    fn attrs(&mut self, piece: &[u8], mut p: usize) -> usize {
        let e = piece.len();
        match self.state {
            St::Attr => match self.attr {
                None => {
                    p += 1;
                    self.state = St::SkipAttr;
                }
                Some(t) => {
                    self.matching = Some(t);
                    self.state = St::Match;
                }
            },
            St::SkipAttr => {
                while p < e && is_xml_name(piece[p]) {
                    p += 1;
                }
                if p < e && piece[p] == b'=' {
                    p += 1;
                    self.state = St::AttrDelim;
                } else if p < e && (piece[p] == b'>' || piece[p] == b'/' || is_sp(piece[p])) {
                    self.state = St::InTag;
                } else if p < e {
                    self.error("XML 1.0 Illegal attr char");
                    self.state = St::TagError;
                }
            }
            St::AttrGetVal => {
                self.attr_val = Some(Vec::new());
                self.state = St::AttrDelim;
            }
            St::AttrDelim => {
                if piece[p] == b'"' || piece[p] == b'\'' {
                    self.attr_delim = piece[p];
                    p += 1;
                    self.state = St::AttrVal;
                } else if !is_sp(piece[p]) {
                    self.attr_delim = b' ';
                    self.state = St::AttrVal;
                } else {
                    self.error("XML 1.0 Illegal attribute delimiter");
                    self.state = St::TagError;
                }
            }
            St::AttrVal => {
                let d = self.attr_delim;
                let start = p;
                while p < e && piece[p] != b'>' && piece[p] != d && (d != b' ' || !is_sp(piece[p])) {
                    p += 1;
                }
                if let Some(v) = self.attr_val.as_mut() {
                    let room = MAX_ATTR.saturating_sub(v.len());
                    v.extend_from_slice(&piece[start..p][..(p - start).min(room)]);
                }
                if p < e && piece[p] == b'>' {
                    self.error("XML 1.0 Missing end attribute delimiter");
                    self.state = St::TagError;
                    self.attr_delim = 0;
                    self.attr_val = None;
                } else if p < e {
                    self.attr_delim = 0;
                    p += 1;
                    self.state = St::InTag;
                    if self.attr_val.as_ref().is_some_and(|v| v.len() >= MAX_ATTR) {
                        self.error("ESI include src= attribute too long");
                        self.state = St::TagError;
                        self.attr_val = None;
                    } else if self.attr_val.is_some() {
                        self.do_stuff(false);
                    }
                }
            }
            _ => unreachable!("state of another section"),
        }
        p
    }

    /// Matching the input against a table, across pieces.
    fn matching(&mut self, piece: &[u8], mut p: usize) -> usize {
        let e = piece.len();
        match self.state {
            St::Match => {
                let table = self.matching.unwrap_or(MATCH_STARTTAG);
                match lookup(table, &piece[p..]) {
                    Some((m, st)) => {
                        self.match_hit = m;
                        if let Some(m) = m {
                            p += m.len();
                        }
                        self.state = st;
                        self.matching = None;
                        self.tag_i = 0;
                    }
                    None => {
                        let rest = &piece[p..];
                        self.tag[..rest.len()].copy_from_slice(rest);
                        self.tag_i = rest.len();
                        self.state = St::MatchBuf;
                        p = e;
                    }
                }
            }
            St::MatchBuf => {
                let table = self.matching.unwrap_or(MATCH_STARTTAG);
                let i = (self.tag.len() - self.tag_i).min(e - p);
                self.tag[self.tag_i..self.tag_i + i].copy_from_slice(&piece[p..p + i]);
                match lookup(table, &self.tag[..self.tag_i + i]) {
                    None => {
                        self.tag_i += i;
                        p += i;
                    }
                    Some((m, st)) => {
                        self.match_hit = m;
                        self.state = st;
                        if let Some(m) = m {
                            if m.len() > self.tag_i {
                                p += m.len() - self.tag_i;
                            }
                        }
                        self.matching = None;
                        self.tag_i = 0;
                    }
                }
            }
            _ => unreachable!("state of another section"),
        }
        p
    }

    /// The body ended: the instructions, if it held any ESI.
    pub fn finish(mut self) -> (Option<Vec<Instr>>, Vec<String>, u64, u64) {
        if !matches!(self.state, St::Start | St::Bom | St::TestXml | St::NotXml | St::NextTag) {
            self.error("VEP ended inside a tag");
        }
        if self.o_pending > 0 {
            let mut ver = 0;
            let mark = self.last_mark;
            self.mark(&mut ver, 0, mark);
        }
        if self.o_wait > 0 {
            let lcb = self.cb_x;
            self.emit(lcb - self.o_last, self.last_mark);
        }
        let found = self.esi_found && !self.out.is_empty();
        (found.then_some(self.out), self.records, self.errors, self.warnings)
    }
}
