use super::parse::*;

fn run(url: &str, body: &[u8], pieces: usize) -> (Option<Vec<Instr>>, Vec<String>) {
    let mut p = Parser::new(url.as_bytes(), Features::default());
    for c in body.chunks(pieces.max(1)) {
        p.parse(c);
    }
    let (i, r, _, _) = p.finish();
    (i, r)
}

/// What a client gets from `body` with each include replaced by `[url]`.
fn render(body: &[u8], instrs: &[Instr]) -> String {
    let mut out = String::new();
    let mut at = 0usize;
    for i in instrs {
        match i {
            Instr::Verbatim(n) => {
                out.push_str(&String::from_utf8_lossy(&body[at..at + *n as usize]));
                at += *n as usize;
            }
            Instr::Skip(n) => at += *n as usize,
            Instr::Include { url, host, .. } => {
                out.push_str(&format!("[{}{url}]", host.as_deref().map(|h| format!("{h}|")).unwrap_or_default()))
            }
        }
    }
    assert_eq!(at, body.len(), "the instructions cover the body");
    out
}

fn rendered(url: &str, body: &str) -> String {
    let whole = run(url, body.as_bytes(), usize::MAX);
    for n in [1, 2, 3, 7] {
        assert_eq!(run(url, body.as_bytes(), n), whole, "fed {n} bytes at a time");
    }
    match whole.0 {
        Some(i) => render(body.as_bytes(), &i),
        None => "(no esi)".into(),
    }
}

#[test]
fn includes_removes_and_comments() {
    assert_eq!(rendered("/a/b?x=1", r#"<p>before <esi:include src="/frag"/> after</p>"#), "<p>before [/frag] after</p>");
    assert_eq!(rendered("/a/b?x=1", r#"<p><esi:include src="rel?x=&amp;y"/></p>"#), "<p>[/a/rel?x=&y]</p>");
    assert_eq!(rendered("/a/b", r#"<p><esi:include src="http://other.example/f"/></p>"#), "<p>[other.example|/f]</p>");
    assert_eq!(rendered("/", "<p>a<esi:remove>gone <b>x</b></esi:remove>b</p>"), "<p>ab</p>");
    assert_eq!(rendered("/", "<p>a<!--esi <b>shown</b> -->b</p>"), "<p>a <b>shown</b> b</p>");
    assert_eq!(rendered("/", "<p>a<esi:comment text=\"x\"/>b</p>"), "<p>ab</p>");
    assert_eq!(rendered("/", "<p>a<!-- plain comment -->b</p>"), "(no esi)");
    assert_eq!(rendered("/", "no xml <esi:include src=\"/x\"/>"), "(no esi)");
}

#[test]
fn errors_are_recorded_with_varnish_words() {
    let (i, r) = run("/", b"<p><esi:bogus/>x</p>", usize::MAX);
    assert!(i.is_some());
    assert_eq!(r, vec!["ERR after 3 ESI 1.0 <esi:bogus> element".to_string()]);
    let (_, r) = run("/", b"<p><esi:include/></p>", usize::MAX);
    assert_eq!(r, vec!["ERR after 3 ESI 1.0 <esi:include> lacks src attr".to_string()]);
    let (_, r) = run("/", b"<p><esi:include src=\"/a\"></p>", usize::MAX);
    assert_eq!(r, vec!["WARN after 3 ESI 1.0 <esi:include> lacks final '/'".to_string()]);
    let (_, r) = run("/", b"<p><esi:include src=\"https://x/a\"/></p>", usize::MAX);
    assert_eq!(r, vec!["WARN after 3 ESI 1.0 <esi:include> with https:// ignored".to_string()]);
    let (_, r) = run("/", b"<p><esi:remove>", usize::MAX);
    assert!(r.is_empty(), "{r:?}");
    let (_, r) = run("/", b"<p><esi:include src=\"/a\"", usize::MAX);
    assert_eq!(r.last().map(String::as_str), Some("ERR after 3 VEP ended inside a tag"));
}

#[test]
fn control_bytes_in_a_src_never_reach_an_include() {
    let one = |body: &[u8]| {
        let (i, r) = run("/p", body, usize::MAX);
        let urls: Vec<String> =
            i.unwrap_or_default().into_iter().filter_map(|x| if let Instr::Include { url, .. } = x { Some(url) } else { None }).collect();
        (urls, r)
    };
    // A NUL ends the src, as Varnish's C string ends (whitespace past it unseen).
    assert_eq!(one(b"<p><esi:include src=\"/a\0b\"/></p>"), (vec!["/a".to_string()], vec![]));
    assert_eq!(one(b"<p><esi:include src=\"/a\0 b\"/></p>"), (vec!["/a".to_string()], vec![]));
    assert_eq!(one(b"<p><esi:include src=\"/a\" onerror=\"continue\0x\"/></p>").0, ["/a"]);
    let (urls, r) = one(b"<p><esi:include src=\"http://h\0x/a\"/></p>");
    assert!(urls.is_empty());
    assert_eq!(r, ["ERR after 3 ESI 1.0 <esi:include> invalid src= URL"]);
    // Any other control byte: refused (Varnish would send it on).
    for c in [1u8, 0x1b, 0x7f] {
        let (urls, r) = one(&[b"<p><esi:include src=\"/a".as_slice(), &[c], b"b\"/></p>"].concat());
        assert!(urls.is_empty(), "{c:#x}");
        assert_eq!(r, ["ERR after 3 ESI 1.0 <esi:include> has a control character in src= attribute"], "{c:#x}");
    }
}

#[test]
fn hostile_markup_is_bounded() {
    // 10,000 includes: 10,000 instructions, nothing more.
    let body: String = "<p>".to_string() + &"<esi:include src=\"/f\"/>".repeat(10_000);
    let (i, _) = run("/", body.as_bytes(), 4096);
    assert_eq!(i.unwrap().iter().filter(|x| matches!(x, Instr::Include { .. })).count(), 10_000);
    // A 1 MB attribute is cut and refused.
    let body = format!("<p><esi:include src=\"/{}\"/>", "a".repeat(1 << 20));
    let (i, r) = run("/", body.as_bytes(), 65536);
    assert!(i.is_none_or(|i| !i.iter().any(|x| matches!(x, Instr::Include { .. }))));
    assert!(r.iter().any(|m| m.contains("too long")), "{r:?}");
    // Unclosed tags and random bytes: instructions that cover the body.
    let mut x: u32 = 7;
    let mut junk = b"<".to_vec();
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        junk.push(b"<esi:include src=/> \"'-!x"[(x % 25) as usize]);
    }
    let (i, _) = run("/", &junk, 97);
    if let Some(i) = i {
        render(&junk, &i);
    }
}

mod gzip {
    use std::io::{Read, Write};

    use bytes::Bytes;

    use super::super::gz::*;
    use super::super::parse::*;
    use crate::gzip::bits::scan;
    use crate::gzip::code::{crc32, crc32_combine, inflate_segment, Settings};

    fn gz(data: &[u8], level: u32) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn gunzip(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(b).read_to_end(&mut out).expect("one valid gzip stream");
        out
    }

    /// A page kept gzip, assembled as delivery does with a gzip fragment
    /// spliced in and a plain one in stored blocks, is one valid gzip
    /// stream of the page; its verbatim segments inflate on their own.
    #[test]
    fn gzip_pages_splice_into_one_stream() {
        let page = b"<html>head <esi:include src=\"/a\"/> middle <esi:remove>gone</esi:remove><esi:include src=\"/b\"/> tail</html>";
        let mut p = Parser::new(b"/", Features::default());
        p.parse(page);
        let instrs = p.finish().0.unwrap();
        let (body, data) = gzip_page(&[Bytes::from_static(page)], &instrs, &Settings::default());
        // The stored body is the page, gzipped.
        let whole: Vec<u8> = body.iter().flat_map(|b| b.iter().copied()).collect();
        assert_eq!(gunzip(&whole), page);
        for level in [0, 1, 6, 9] {
            let frag_a = format!("fragment A at level {level}, ").repeat(40);
            let frag_b = b"plain B";
            let ga = gz(frag_a.as_bytes(), level);
            let bits = scan([&ga[..]]).unwrap();
            let mut out = GZIP_HDR.to_vec();
            let (mut crc, mut len) = (crc32(0, &[]), 0u64);
            let mut at = 0usize;
            let mut crcs = data.gzip.as_ref().unwrap().iter();
            let mut plain_out = Vec::new();
            for i in &data.instrs {
                match i {
                    Instr::Verbatim(n) => {
                        let seg = &whole[at..at + *n as usize];
                        out.extend_from_slice(seg);
                        let (c, l) = crcs.next().unwrap();
                        crc = crc32_combine(crc, *c, *l);
                        len += l;
                        inflate_segment(seg, &mut |b| plain_out.extend_from_slice(&b)).unwrap();
                        at += *n as usize;
                    }
                    Instr::Skip(n) => at += *n as usize,
                    Instr::Include { url, .. } if url == "/a" => {
                        let (bytes, c, l) = splice(&ga, bits.start, bits.last, bits.stop).unwrap();
                        out.extend_from_slice(&bytes);
                        crc = crc32_combine(crc, c, l);
                        len += l;
                        plain_out.extend_from_slice(frag_a.as_bytes());
                    }
                    Instr::Include { .. } => {
                        stored_blocks(frag_b, &mut out);
                        crc = crc32_combine(crc, crc32(0, frag_b), frag_b.len() as u64);
                        len += frag_b.len() as u64;
                        plain_out.extend_from_slice(frag_b);
                    }
                }
            }
            out.extend_from_slice(&tail(crc, len));
            let want = format!("<html>head {frag_a} middle plain B tail</html>");
            assert_eq!(String::from_utf8(gunzip(&out)).unwrap(), want, "level {level}");
            assert_eq!(String::from_utf8(plain_out).unwrap(), want);
        }
    }
}
