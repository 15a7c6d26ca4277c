//! The disk tier's own costs, without a network: how long a persistent
//! store of 1,000,000 objects takes to open (its records scanned, the
//! index rebuilt), and reading bodies back with pread (what cache-d
//! does) against copying them out of an mmap of the same file, with the
//! page cache warm. Prints its figures (one run; not criterion: each
//! step takes seconds).
//!
//! Run: `cargo bench -p cache-d --bench disk [-- OBJECTS]` (default
//! 1000000). The stores go in $CACHEKIT_BENCH_DIR (default: a temporary
//! directory under /var/tmp, on disk rather than tmpfs).

use std::time::Instant;

use bytes::Bytes;
use cache_d::cache::body::ObjBody;
use cache_d::cache::disk::Loc;
use cache_d::cache::spec::{resolve, Kind as StoreKind, Spec};
use cache_d::cache::ttl::Life;
use cache_d::cache::{Cache, Kind, ObjHeaders, Object};

fn obj(i: usize, body: usize) -> Object {
    let etag = format!("\"{i:x}-5f3e\"");
    let headers: [(&[u8], &[u8]); 5] = [
        (b"Content-Type", b"text/html; charset=utf-8"),
        (b"Cache-Control", b"public, max-age=86400"),
        (b"ETag", etag.as_bytes()),
        (b"Last-Modified", b"Tue, 01 Dec 2026 10:00:00 GMT"),
        (b"Server", b"origin/1.0"),
    ];
    Object {
        vxid: i as u32,
        status: 200,
        headers: ObjHeaders::from_pairs(b"OK", headers.into_iter()),
        body: ObjBody::Whole(Bytes::from(vec![(i % 251) as u8; body])),
        life: Life { t_origin: cache_d::util::now(), ttl: 1e7, grace: 10.0, keep: 0.0 },
        kind: Kind::Normal,
        vary: None,
        coding: None,
    }
}

fn open(dir: &std::path::Path, size: u64) -> Cache {
    let spec = Spec { name: "p".into(), kind: StoreKind::Persistent { path: dir.to_path_buf(), size, wipe: false } };
    Cache::open(&resolve(&[spec]).unwrap(), None).unwrap()
}

/// Fill a store with `n` objects of `body` bytes; their places on disk.
fn fill(dir: &std::path::Path, size: u64, n: usize, body: usize) -> Vec<Loc> {
    let c = open(dir, size);
    let mut locs = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("http://example.com/page/{i}");
        let (oc, _) = c.insert_in(c.private_guard(key.as_bytes()), obj(i, body), 0);
        c.persist(&oc);
        if let Some(l) = oc.disk().and_then(|d| d.loc.get()) {
            locs.push(*l);
        }
    }
    c.flush();
    locs
}

/// Drop the page cache if we may (root); whether it was dropped.
fn drop_caches() -> bool {
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000_000);
    let base = std::env::var("CACHEKIT_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into());
    let tmp = tempfile::tempdir_in(base).unwrap();
    // Open time: n objects of 100 bytes.
    let size = (n as u64 * 600).max(64 << 20);
    let t = Instant::now();
    fill(tmp.path(), size, n, 100);
    println!("filled {n} objects in {:.1} s ({:.0} MB store)", t.elapsed().as_secs_f64(), size as f64 / 1e6);
    for cold in [false, true] {
        if cold && !drop_caches() {
            println!("open, page cache cold: not measured (cannot drop caches: not root)");
            continue;
        }
        let t = Instant::now();
        let c = open(tmp.path(), size);
        let secs = t.elapsed().as_secs_f64();
        println!(
            "open {} objects, page cache {}: {secs:.2} s ({:.0} objects/s)",
            c.objects(),
            if cold { "cold" } else { "warm" },
            c.objects() as f64 / secs
        );
    }
    // Reads: 20,000 bodies of 16 KiB, read 200,000 times at random.
    let dir = tmp.path().join("reads");
    std::fs::create_dir(&dir).unwrap();
    let locs = fill(&dir, 512 << 20, 20_000, 16 << 10);
    let c = open(&dir, 512 << 20);
    let disk = c.stores().get(0).disk.as_ref().unwrap();
    let file = std::fs::File::open(&disk.path).unwrap();
    // SAFETY: a read-only map of a file nothing writes to meanwhile.
    let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
    let order: Vec<usize> = (0..200_000u64).map(|i| (i.wrapping_mul(2654435761) % locs.len() as u64) as usize).collect();
    let t = Instant::now();
    for &i in &order {
        disk.read(&locs[i]).unwrap();
    }
    let pread = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for &i in &order {
        let l = &locs[i];
        let b = Bytes::copy_from_slice(&map[l.body_off as usize..(l.body_off + l.body_len) as usize]);
        assert_eq!(crc32fast::hash(&b), l.body_crc);
    }
    let mmap = t.elapsed().as_secs_f64();
    let per = |s: f64| order.len() as f64 / s;
    println!(
        "16 KiB bodies, page cache warm, one thread, checksum checked: pread {:.0}/s, mmap copy {:.0}/s (pread/mmap {:.2}x)",
        per(pread),
        per(mmap),
        mmap / pread
    );
}
