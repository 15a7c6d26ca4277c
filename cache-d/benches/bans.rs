//! Bans at scale: adding with 10,000 bans present, the first lookup of an
//! object older than 10,000 bans (it tests them all), and later lookups
//! (nothing left to test).
//!
//! Run: `cargo bench -p cache-d --bench bans`.

use std::sync::Arc;

use bytes::Bytes;
use cache_d::cache::body::{Body, ObjBody};
use cache_d::cache::ttl::Life;
use cache_d::cache::{Cache, Kind, Lookup, ObjHeaders, Object};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

fn obj() -> Object {
    Object {
        vxid: 1,
        status: 200,
        headers: ObjHeaders::from_pairs(b"OK", [(&b"Content-Type"[..], &b"text/plain"[..])].into_iter()),
        body: ObjBody::Live(Arc::new(Body::whole(Bytes::from_static(b"hello")))),
        life: Life { t_origin: 0.0, ttl: 1e9, grace: 0.0, keep: 0.0 },
        kind: Kind::Normal,
        vary: None,
        coding: None,
    }
}

fn none() -> std::iter::Empty<(&'static [u8], &'static [u8])> {
    std::iter::empty()
}

fn insert(c: &Cache, key: &[u8]) {
    if let Lookup::Miss { guard, .. } = c.lookup(key, none(), 1.0) {
        c.insert(guard, obj());
    }
}

fn add_bans(c: &Cache, n: usize) {
    for i in 0..n {
        let args: Vec<String> = ["req.url", "==", &format!("/gone/{i}")].iter().map(|s| s.to_string()).collect();
        c.ban(&args, 1.0, false).expect("valid ban");
    }
}

fn bans(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("bans");
    g.sample_size(20);
    let c = Cache::new(1 << 30, None);
    add_bans(&c, 10_000);
    let eq: Vec<String> = ["req.url", "==", "/news/"].iter().map(|s| s.to_string()).collect();
    let re: Vec<String> = ["req.url", "~", "^/news/"].iter().map(|s| s.to_string()).collect();
    // The list only grows here: a constant time per add is the O(1) append.
    g.bench_function("add one (==), 10,000+ present", |b| b.iter(|| c.ban(&eq, 1.0, false)));
    g.bench_function("add one (~, regex compiled), 10,000+ present", |b| b.iter(|| c.ban(&re, 1.0, false)));
    g.bench_function("first lookup past 10,000 bans", |b| {
        b.iter_batched(
            || {
                let c = Cache::new(1 << 30, None);
                insert(&c, b"/keep");
                add_bans(&c, 10_000);
                c
            },
            |c| {
                c.check_bans(b"/keep", b"/keep", none());
                assert!(matches!(c.lookup(b"/keep", none(), 2.0), Lookup::Hit(_)));
                c
            },
            BatchSize::PerIteration,
        )
    });
    let c = Cache::new(1 << 30, None);
    insert(&c, b"/keep");
    add_bans(&c, 10_000);
    c.check_bans(b"/keep", b"/keep", none());
    g.bench_function("later lookups, 10,000 bans seen", |b| {
        b.iter(|| {
            c.check_bans(b"/keep", b"/keep", none());
            matches!(c.lookup(b"/keep", none(), 2.0), Lookup::Hit(_))
        })
    });
    g.finish();
}

criterion_group!(benches, bans);
criterion_main!(benches);
