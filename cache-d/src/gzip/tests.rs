use std::io::Write;

use super::bits::{scan, Bits, Scanner};
use super::code::{Dir, Settings, Zstream};
use super::*;

fn h(pairs: &[(&str, &str)]) -> Headers {
    Headers(pairs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect())
}

fn gz(data: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn text(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"the quick brown fox jumps over the lazy dog 0123456789\n"[i % 55] ^ ((i / 997) as u8 & 1)).collect()
}

#[test]
fn accept_encoding_is_read_as_varnish_reads_it() {
    let can = |v: &str| can_gzip(&h(&[("Accept-Encoding", v)]));
    assert!(can("gzip"));
    assert!(can("gzip, deflate, br"));
    assert!(can("br;q=1.0, GZIP;q=0.5"));
    assert!(can("x-gzip"));
    assert!(can("x-gzip;q=0"), "x-gzip is taken without looking at q");
    assert!(can("\"gzip\""));
    assert!(can("gzip;level=1"));
    assert!(can("gzip; q=.5"));
    assert!(!can("gzip;q=0"));
    assert!(!can("gzip;q=0.0"));
    assert!(!can("gzip;q="));
    assert!(!can("gzip;q=x"));
    assert!(!can("*"));
    assert!(!can("deflate, br"));
    assert!(!can("gzipx"));
    assert!(!can(""));
    assert!(!can_gzip(&h(&[])));
    // Only the first Accept-Encoding header counts, as in Varnish.
    assert!(!can_gzip(&h(&[("Accept-Encoding", "br"), ("Accept-Encoding", "gzip")])));
    assert_eq!(q(b"br;q=0.25", "br"), 0.25);
    assert_eq!(q(b"br;q=1x", "br"), 1.0);
}

#[test]
fn washing_keeps_gzip_or_removes_and_keeps_br_when_asked() {
    let wash_of = |v: Option<&str>, br: bool| {
        let mut hd = h(&v.map(|v| vec![("Accept-Encoding", v)]).unwrap_or_default());
        let _ = wash(&mut hd, br);
        hd.get("accept-encoding").map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(wash_of(Some("gzip, deflate, br"), false).as_deref(), Some("gzip"));
    assert_eq!(wash_of(Some("x-gzip"), false).as_deref(), Some("gzip"));
    assert_eq!(wash_of(Some("gzip;q=0"), false), None);
    assert_eq!(wash_of(Some("*"), false), None);
    assert_eq!(wash_of(None, false), None);
    assert_eq!(wash_of(Some("gzip, deflate, br"), true).as_deref(), Some("br, gzip"));
    assert_eq!(wash_of(Some("br"), true).as_deref(), Some("br"));
    assert_eq!(wash_of(Some("br;q=0, gzip"), true).as_deref(), Some("gzip"));
    // What the log is told: the lines removed and the one set; nothing
    // when the header already reads "gzip".
    let mut hd = h(&[("Accept-Encoding", "gzip, br"), ("accept-encoding", "x")]);
    let (gone, set) = wash(&mut hd, false);
    assert_eq!(gone.len(), 2);
    assert_eq!(set, Some(&b"gzip"[..]));
    assert_eq!(hd.0.len(), 1);
    assert_eq!(wash(&mut hd, false), (Vec::new(), None));
}

#[test]
fn etag_and_vary() {
    let mut hd = h(&[("ETag", "\"abc\""), ("Vary", "Cookie")]);
    weaken_etag(&mut hd);
    vary_ae(&mut hd);
    assert_eq!(hd.get("etag").unwrap(), &b"W/\"abc\""[..]);
    assert_eq!(hd.get("vary").unwrap(), &b"Cookie, Accept-Encoding"[..]);
    weaken_etag(&mut hd);
    vary_ae(&mut hd);
    assert_eq!(hd.get("etag").unwrap(), &b"W/\"abc\""[..]);
    assert_eq!(hd.get("vary").unwrap(), &b"Cookie, Accept-Encoding"[..]);
}

/// The bits of a member flate2 made: the header is 10 bytes, the final
/// block ends right before the 8-byte trailer's byte.
fn check_bits(g: &[u8], b: Bits) {
    assert_eq!(b.start, 80);
    assert!(b.last >= b.start && b.stop > b.last, "{b:?}");
    assert_eq!(b.stop.div_ceil(8), g.len() as u64 - 8, "{b:?} for {} bytes", g.len());
}

#[test]
fn bits_of_fixed_dynamic_and_stored_blocks() {
    for (data, level) in
        [(b"hello".to_vec(), 6), (text(200_000), 6), (text(100_000), 0), (text(300_000), 1), (Vec::new(), 6), (text(70_000), 9)]
    {
        let g = gz(&data, level);
        let b = scan([&g[..]]).unwrap();
        check_bits(&g, b);
        // Fed a byte at a time, the walk finds the same.
        let mut s = Scanner::default();
        for c in g.chunks(1) {
            s.feed(c).unwrap();
        }
        assert_eq!(s.bits(), Some(b));
    }
}

#[test]
fn bits_walk_refuses_what_is_not_gzip_and_waits_on_truncation() {
    assert!(scan([&b"hello world, this is not gzip"[..]]).is_err());
    let g = gz(&text(10_000), 6);
    assert!(scan([&g[..g.len() / 2]]).is_err());
    let mut bad = g.clone();
    bad[10] |= 0b110; // block type 3
    assert!(scan([&bad[..]]).is_err());
}

#[test]
fn gzip_then_gunzip_round_trips_and_reports_totals() {
    let data = text(250_000);
    let s = Settings { buffer: 4096, ..Settings::default() };
    let mut zipped = Vec::new();
    let mut z = Zstream::new(Dir::Gzip, &s);
    for c in data.chunks(7000) {
        z.feed(c, false, &mut |b| zipped.extend_from_slice(&b)).unwrap();
    }
    z.feed(&[], true, &mut |b| zipped.extend_from_slice(&b)).unwrap();
    assert_eq!((z.total_in(), z.total_out()), (data.len() as u64, zipped.len() as u64));
    check_bits(&zipped, scan([&zipped[..]]).unwrap());
    let mut plain = Vec::new();
    let mut u = Zstream::new(Dir::Gunzip, &s);
    for c in zipped.chunks(999) {
        u.feed(c, false, &mut |b| plain.extend_from_slice(&b)).unwrap();
    }
    u.feed(&[], true, &mut |_| ()).unwrap();
    assert_eq!(plain, data);
    assert_eq!((u.total_in(), u.total_out()), (zipped.len() as u64, data.len() as u64));
}

#[test]
fn bad_gzip_is_an_error_with_varnish_words() {
    let s = Settings::default();
    let g = gz(&text(50_000), 6);
    // Not gzip at all.
    let e = Zstream::new(Dir::Test, &s).feed(b"not gzip at all, no", true, &mut |_| ()).unwrap_err();
    assert_eq!(e.fetch_error, "Invalid Gzip data: incorrect header check");
    assert_eq!(e.record.as_deref(), Some("Gunzip error: -3 (incorrect header check)"));
    // Cut short.
    let e = Zstream::new(Dir::Test, &s).feed(&g[..g.len() - 20], true, &mut |_| ()).unwrap_err();
    assert_eq!(e.fetch_error, "tGunzip failed");
    let e = Zstream::new(Dir::Gunzip, &s).feed(&g[..g.len() - 20], true, &mut |_| ()).unwrap_err();
    assert_eq!(e.fetch_error, "Gunzip error at the very end");
    // Junk after the end.
    let mut j = g.clone();
    j.extend_from_slice(b"junk");
    let e = Zstream::new(Dir::Test, &s).feed(&j, true, &mut |_| ()).unwrap_err();
    assert_eq!(e.fetch_error, "Junk after gzip data");
    // A flipped bit in the middle: bad data or a bad check, never success.
    for at in [g.len() / 3, g.len() / 2, g.len() - 6] {
        let mut f = g.clone();
        f[at] ^= 0x10;
        assert!(Zstream::new(Dir::Test, &s).feed(&f, true, &mut |_| ()).is_err(), "flip at {at}");
    }
}

#[test]
fn the_walk_takes_hostile_bytes_without_panicking_or_growing() {
    // A gzip header whose name never ends: refused past a bound.
    let mut s = Scanner::default();
    s.feed(&[0x1f, 0x8b, 8, 8, 0, 0, 0, 0, 0, 3]).unwrap();
    let name = vec![b'a'; 64 * 1024];
    let mut refused = false;
    for _ in 0..40 {
        if s.feed(&name).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused);
    // Rows of bad deflate after a good header: each is an error, none a panic.
    let hdr = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    for body in [
        &[0x07][..],                                                               // block type 3
        &[0x01, 0x05, 0x00, 0x05, 0x00],                                           // stored, LEN/NLEN mismatch
        &[0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // dynamic, over-subscribed
        &[0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],       // dynamic, repeat with no first length
    ] {
        let mut g = hdr.to_vec();
        g.extend_from_slice(body);
        g.extend_from_slice(&[0; 16]);
        assert!(scan([&g[..]]).is_err(), "{body:?}");
    }
}

#[test]
fn mutated_gzip_never_panics_and_the_walk_agrees_with_zlib() {
    let s = Settings { buffer: 4096, ..Settings::default() };
    let members: Vec<Vec<u8>> = vec![gz(&text(3000), 6), gz(&text(40_000), 1), gz(&text(5000), 0), gz(b"abcabcabcabcabc", 9)];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    for round in 0..3000 {
        let mut g = members[round % members.len()].clone();
        match rnd(3) {
            0 => {
                let at = rnd(g.len());
                g[at] ^= 1 << rnd(8);
            }
            1 => {
                let at = 10 + rnd(g.len() - 10);
                g[at] = rnd(256) as u8;
            }
            _ => g.truncate(rnd(g.len())),
        }
        let piece = 1 + rnd(700);
        let mut walk = Scanner::default();
        let mut z = Zstream::new(Dir::Test, &s);
        let mut ok = true;
        for p in g.chunks(piece) {
            let _ = walk.feed(p);
            ok = ok && z.feed(p, false, &mut |_| ()).is_ok();
        }
        ok = ok && z.feed(&[], true, &mut |_| ()).is_ok();
        if ok {
            assert!(walk.bits().is_some(), "round {round}: zlib took a member the walk did not finish");
        }
    }
}
