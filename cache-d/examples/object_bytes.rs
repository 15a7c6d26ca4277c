//! What the cache's structures cost per object, without the request path:
//! 100,000 objects of 1 KiB with the test origin's headers inserted
//! directly, anonymous memory before and after (`OBJ_OVERHEAD` in
//! `cache/object.rs` is measured with this and with
//! `scripts/bench-memory.sh`, which goes through the request path).
//!
//! `cargo run --release -p cache-d --example object_bytes [objects]`

use cache_d::cache::body::ObjBody;
use cache_d::cache::ttl::Life;
use cache_d::cache::{Cache, Kind, Lookup, ObjHeaders, Object};

fn anon_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status.lines().find_map(|l| l.strip_prefix("RssAnon:")).and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    kib.expect("RssAnon in /proc/self/status") * 1024
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    // SAFETY: mallopt only sets a tunable; called before any other thread
    // exists. One arena, as the child runs (child/mod.rs).
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    let now = 1_700_000_000.0;
    let cache = Cache::new(1 << 40, None);
    let body = vec![b'x'; 1024];
    let date = b"Tue, 01 Dec 2026 19:28:32 GMT";
    let pairs: [(&[u8], &[u8]); 6] = [
        (b"content-type", b"application/octet-stream"),
        (b"etag", b"\"400-6b0f1fe0\""),
        (b"x-request-body-bytes", b"0"),
        (b"last-modified", date),
        (b"cache-control", b"public, max-age=3600"),
        (b"date", date),
    ];
    let before = anon_bytes();
    for i in 0..n {
        let key = format!("/size/1024?max_age=3600&n={i}");
        let Lookup::Miss { guard, .. } = cache.lookup(key.as_bytes(), std::iter::empty(), now) else {
            panic!("{key}: expected a miss");
        };
        let (headers, b) = ObjHeaders::with_body(b"OK", pairs.iter().copied(), &body);
        let life = Life { t_origin: now, ttl: 3600.0, grace: 10.0, keep: 0.0 };
        let obj = Object { vxid: 7, status: 200, headers, body: ObjBody::Whole(b), life, kind: Kind::Normal, vary: None, coding: None };
        let (oc, stored) = cache.insert(guard, obj);
        assert!(stored);
        // A delivery's view of the head, as a hit makes.
        drop(oc.headers().to_headers());
    }
    let after = anon_bytes();
    println!(
        "{n} objects of 1 KiB: {} anonymous bytes per object, {} charged, core {} bytes",
        (after - before) / n,
        cache.used() / n,
        std::mem::size_of::<cache_d::cache::ObjCore>()
    );
}
