//! A backend body claimed to be gzip, from arbitrary bytes in arbitrary
//! pieces: the gzip-bits walk and the test gunzip never panic, agree
//! that a member they both finish is one, and the walk's buffer stays
//! bounded.
#![no_main]

use cache_d::gzip::bits::Scanner;
use cache_d::gzip::code::{Dir, Settings, Zstream};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the piece size, the rest is the body.
    let Some((&cut, body)) = data.split_first() else { return };
    let piece = 1 + cut as usize % 64;
    let mut scan = Scanner::default();
    let mut scan_ok = true;
    let s = Settings { buffer: 2048, ..Settings::default() };
    let mut z = Zstream::new(Dir::Test, &s);
    let mut z_ok = true;
    for p in body.chunks(piece) {
        scan_ok = scan_ok && scan.feed(p).is_ok();
        z_ok = z_ok && z.feed(p, false, &mut |_| ()).is_ok();
    }
    z_ok = z_ok && z.feed(&[], true, &mut |_| ()).is_ok();
    if z_ok {
        // zlib took it whole: the walk found its final block.
        assert!(scan.bits().is_some(), "zlib accepted what the walk did not");
    }
    // Gunzip to a bounded buffer and gzip back, from the same bytes.
    let mut u = Zstream::new(Dir::Gunzip, &s);
    let mut out = 0usize;
    let _ = u.feed(body, true, &mut |b| out += b.len());
    let mut g = Zstream::new(Dir::Gzip, &s);
    let mut zipped = Vec::new();
    g.feed(body, true, &mut |b| zipped.extend_from_slice(&b)).expect("gzip never fails");
    assert!(cache_d::gzip::bits::scan([&zipped[..]]).is_ok());
});
