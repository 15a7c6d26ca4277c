//! Surrogate-key purges cost the objects they touch, not the cache: a
//! purge of one key's 100 objects among 1,000 cached objects and among
//! 1,000,000, and the soft purge of the same.
//!
//! Run: `cargo bench -p cache-d --bench xkey`.

use std::sync::Arc;

use bytes::Bytes;
use cache_d::cache::body::{Body, ObjBody};
use cache_d::cache::ttl::Life;
use cache_d::cache::{Cache, Kind, Lookup, ObjHeaders, Object};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

fn obj(keys: &str) -> Object {
    Object {
        vxid: 1,
        status: 200,
        headers: ObjHeaders::from_pairs(b"OK", [(&b"xkey"[..], keys.as_bytes())].into_iter()),
        body: ObjBody::Live(Arc::new(Body::whole(Bytes::from_static(b"hello")))),
        life: Life { t_origin: 0.0, ttl: 1e9, grace: 10.0, keep: 0.0 },
        kind: Kind::Normal,
        vary: None,
        coding: None,
    }
}

fn insert(c: &Cache, key: &[u8], keys: &str) {
    if let Lookup::Miss { guard, .. } = c.lookup(key, std::iter::empty(), 1.0) {
        c.insert(guard, obj(keys));
    }
}

/// A cache of `n` objects, each under one of `n / 100` keys ("k0"...),
/// and "all" for none of them (so other keys exist).
fn cache(n: usize) -> Cache {
    let c = Cache::new(1 << 34, None);
    for i in 0..n {
        insert(&c, format!("/o/{i}").as_bytes(), &format!("k{} site", i % (n / 100)));
    }
    c
}

/// Put the 100 objects of "k7" back (between purges).
fn refill(c: &Cache, n: usize) {
    for i in (7..n).step_by(n / 100) {
        insert(c, format!("/o/{i}").as_bytes(), &format!("k{} site", i % (n / 100)));
    }
}

fn xkey(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("xkey");
    g.sample_size(20);
    for n in [1_000usize, 1_000_000] {
        let c = cache(n);
        g.bench_function(format!("purge one key's 100 objects among {n}"), |b| {
            b.iter_batched(|| refill(&c, n), |()| assert_eq!(c.xkey_purge(b"k7", false, 2.0), 100), BatchSize::PerIteration)
        });
        // Soft purges leave the objects: the same 100 each time.
        refill(&c, n);
        g.bench_function(format!("softpurge one key's 100 objects among {n}"), |b| {
            b.iter(|| assert_eq!(c.xkey_purge(b"k7", true, 2.0), 100))
        });
    }
    g.finish();
}

criterion_group!(benches, xkey);
criterion_main!(benches);
