//! Log ring and counter throughput: encode + append a typical transaction's
//! records with 1 and 2 writer threads, and counter increments on private
//! shards versus one shared cache line.
//!
//! Run: `cargo bench -p common --bench ring`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::counters::C;
use common::log::vsl::{Batch, Side, Tag};
use common::segment::SegmentWriter;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// The records of one client transaction, roughly as cache-d logs them.
fn encode(b: &mut Batch, vxid: u32) {
    b.clear();
    b.recf(Tag::Begin, Side::Client, vxid, format_args!("req {} rxreq", vxid - 1));
    b.recf(Tag::Timestamp, Side::Client, vxid, format_args!("Start: {:.6} {:.6} {:.6}", 1_790_000_000.123456f64, 0.0, 0.0));
    b.recf(Tag::ReqStart, Side::Client, vxid, format_args!("127.0.0.1 {} a0", 40000 + vxid % 1000));
    b.rec(Tag::ReqMethod, Side::Client, vxid, b"GET");
    b.recf(Tag::ReqUrl, Side::Client, vxid, format_args!("/size/{}", vxid % 4096));
    b.rec(Tag::ReqProtocol, Side::Client, vxid, b"HTTP/1.1");
    b.rec(Tag::ReqHeader, Side::Client, vxid, b"Host: 127.0.0.1:8080");
    b.rec(Tag::ReqHeader, Side::Client, vxid, b"User-Agent: wrk");
    b.rec(Tag::RespProtocol, Side::Client, vxid, b"HTTP/1.1");
    b.rec(Tag::RespStatus, Side::Client, vxid, b"200");
    b.rec(Tag::RespReason, Side::Client, vxid, b"OK");
    b.rec(Tag::RespHeader, Side::Client, vxid, b"Content-Length: 1024");
    b.recf(Tag::RespHeader, Side::Client, vxid, format_args!("X-Varnish: {vxid}"));
    b.recf(Tag::ReqAcct, Side::Client, vxid, format_args!("{} 0 {} {} 1024 {}", 60, 60, 180, 1204));
    b.rec(Tag::End, Side::Client, vxid, b"");
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = SegmentWriter::create(dir.path(), 64 << 20).expect("segment");
    let mut g = c.benchmark_group("log_append");
    g.throughput(Throughput::Elements(15));
    g.bench_function("1 writer, records", |bn| {
        let mut b = Batch::new();
        let mut v = 1;
        bn.iter(|| {
            v += 1;
            encode(&mut b, v);
            seg.log(&b);
        })
    });
    g.bench_function("2 writers, records", |bn| {
        bn.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for t in 0..2u32 {
                    let seg = &seg;
                    s.spawn(move || {
                        let mut b = Batch::new();
                        for i in 0..iters.div_ceil(2) as u32 {
                            encode(&mut b, t * 1_000_000 + i + 1);
                            seg.log(&b);
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    g.finish();
}

fn counters(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = SegmentWriter::create(dir.path(), 1 << 20).expect("segment");
    let shared = AtomicU64::new(0);
    let mut g = c.benchmark_group("counter_add_2_threads");
    g.throughput(Throughput::Elements(1));
    let run = |iters: u64, f: &(dyn Fn() + Sync)| -> Duration {
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..iters.div_ceil(2) {
                        f();
                    }
                });
            }
        });
        start.elapsed()
    };
    g.bench_function("sharded (cache-d)", |bn| bn.iter_custom(|n| run(n, &|| seg.add(C::ClientReq, 1))));
    g.bench_function("one shared line", |bn| {
        bn.iter_custom(|n| {
            run(n, &|| {
                shared.fetch_add(1, Ordering::Relaxed);
            })
        })
    });
    g.finish();
}

criterion_group!(benches, append, counters);
criterion_main!(benches);
