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
