//! Cache index, coalescing, storage and expiry, without sockets or sleeps.

use super::*;
use crate::cache::body::{Body, ObjBody};
use crate::cache::ttl::Life;
use bytes::Bytes;

const NOW: f64 = 1_700_000_000.0;

fn obj(ttl: f64, grace: f64, body: &[u8], kind: Kind) -> Object {
    Object {
        vxid: 7,
        status: 200,
        headers: ObjHeaders::from_pairs(b"OK", [(&b"Content-Type"[..], &b"text/plain"[..])].into_iter()),
        body: ObjBody::Live(Arc::new(Body::whole(Bytes::copy_from_slice(body)))),
        life: Life { t_origin: NOW, ttl, grace, keep: 0.0 },
        kind,
        vary: None,
        coding: None,
    }
}

fn no_headers() -> std::iter::Empty<(&'static [u8], &'static [u8])> {
    std::iter::empty()
}

/// Insert `o` (its body is whole, so charged at once).
fn insert(c: &Cache, key: &[u8], o: Object) -> ObjRef {
    let Lookup::Miss { guard, .. } = c.lookup(key, no_headers(), NOW) else { panic!("expected a miss") };
    let (oc, ok) = c.insert(guard, o);
    assert!(ok);
    oc
}

#[test]
fn miss_then_hit_then_expiry() {
    let c = Cache::new(1 << 20, None);
    assert!(matches!(c.lookup(b"k", no_headers(), NOW), Lookup::Miss { .. }));
    // The failed miss above released its marker when the guard dropped.
    insert(&c, b"k", obj(60.0, 10.0, b"hello", Kind::Normal));
    assert!(matches!(c.lookup(b"k", no_headers(), NOW + 1.0), Lookup::Hit(_)));
    assert!(matches!(c.lookup(b"k", no_headers(), NOW + 65.0), Lookup::Grace(_, Some(_))));
    assert!(matches!(c.lookup(b"k", no_headers(), NOW + 75.0), Lookup::Miss { stale: None, .. }));
    assert_eq!(c.expire(NOW + 69.0), 0);
    assert_eq!(c.expire(NOW + 71.0), 1);
    assert_eq!(c.objects(), 0);
    assert_eq!(c.used(), 0);
}

#[test]
fn concurrent_misses_wait_for_one_fetch() {
    let c = Cache::new(1 << 20, None);
    let Lookup::Miss { guard, .. } = c.lookup(b"k", no_headers(), NOW) else { panic!() };
    let mut waiters: Vec<_> = (0..10)
        .map(|_| match c.lookup(b"k", no_headers(), NOW) {
            Lookup::Busy(rx) => rx,
            _ => panic!("second request must wait"),
        })
        .collect();
    c.insert(guard, obj(60.0, 0.0, b"x", Kind::Normal));
    for w in &mut waiters {
        assert_eq!(*w.borrow_and_update(), BusyState::Ready);
    }
    assert!(matches!(c.lookup(b"k", no_headers(), NOW), Lookup::Hit(_)));
}

#[test]
fn a_failed_fetch_releases_all_waiters_at_once() {
    let c = Cache::new(1 << 20, None);
    let Lookup::Miss { guard, .. } = c.lookup(b"k", no_headers(), NOW) else { panic!() };
    let waiters: Vec<_> = (0..5)
        .map(|_| match c.lookup(b"k", no_headers(), NOW) {
            Lookup::Busy(rx) => rx,
            _ => panic!(),
        })
        .collect();
    drop(guard);
    assert!(waiters.iter().all(|w| *w.borrow() == BusyState::Failed));
    // The marker is gone: the next request fetches.
    assert!(matches!(c.lookup(b"k", no_headers(), NOW), Lookup::Miss { .. }));
}

#[test]
fn hit_for_miss_and_hit_for_pass_do_not_coalesce() {
    let c = Cache::new(1 << 20, None);
    insert(&c, b"m", obj(120.0, 0.0, b"", Kind::HitForMiss));
    insert(&c, b"p", obj(120.0, 0.0, b"", Kind::HitForPass));
    for _ in 0..3 {
        assert!(matches!(c.lookup(b"m", no_headers(), NOW), Lookup::HitForMiss(_)));
        assert!(matches!(c.lookup(b"p", no_headers(), NOW), Lookup::HitForPass(_)));
    }
}

#[test]
fn vary_keeps_variants_apart() {
    let c = Cache::new(1 << 20, None);
    let en: [(&[u8], &[u8]); 1] = [(b"Accept-Language", b"en,  fr")];
    let de: [(&[u8], &[u8]); 1] = [(b"Accept-Language", b"de")];
    for (h, body) in [(&en, b"english" as &[u8]), (&de, b"dt")] {
        let Lookup::Miss { guard, .. } = c.lookup(b"v", h.iter().copied(), NOW) else { panic!() };
        let mut o = obj(60.0, 0.0, body, Kind::Normal);
        o.vary = Some(Box::new(vec![("accept-language".into(), vary_value(h.iter().copied(), "accept-language"))]));
        c.insert(guard, o);
    }
    let same_en: [(&[u8], &[u8]); 1] = [(b"accept-language", b"en, fr")];
    let Lookup::Hit(oc) = c.lookup(b"v", same_en.iter().copied(), NOW) else { panic!("normalized value must hit") };
    assert_eq!(oc.body().progress().len, 7);
    let Lookup::Hit(oc) = c.lookup(b"v", de.iter().copied(), NOW) else { panic!() };
    assert_eq!(oc.body().progress().len, 2);
    assert!(matches!(c.lookup(b"v", no_headers(), NOW), Lookup::Miss { .. }));
    assert_eq!(c.objects(), 2);
}

#[test]
fn vary_accept_encoding_splits_only_without_gzip_support() {
    let gz: [(&[u8], &[u8]); 1] = [(b"Accept-Encoding", b"gzip")];
    for support in [true, false] {
        let c = Cache::new(1 << 20, None);
        c.set_gzip_support(support);
        let Lookup::Miss { guard, .. } = c.lookup(b"v", gz.iter().copied(), NOW) else { panic!() };
        let mut o = obj(60.0, 0.0, b"zipped", Kind::Normal);
        o.vary = Some(Box::new(vec![("accept-encoding".into(), vary_value(gz.iter().copied(), "accept-encoding"))]));
        c.insert(guard, o);
        let plain = c.lookup(b"v", no_headers(), NOW);
        assert_eq!(matches!(plain, Lookup::Hit(_)), support, "gzip support {support}");
    }
}

#[test]
fn lru_evicts_the_least_recently_used() {
    let per = {
        let c = Cache::new(1 << 30, None);
        insert(&c, b"x", obj(60.0, 0.0, &[b'x'; 1000], Kind::Normal));
        c.used()
    };
    let c = Cache::new(per * 3 + per / 2, None);
    insert(&c, b"a", obj(60.0, 0.0, &[b'a'; 1000], Kind::Normal));
    insert(&c, b"b", obj(60.0, 0.0, &[b'b'; 1000], Kind::Normal));
    insert(&c, b"c", obj(60.0, 0.0, &[b'c'; 1000], Kind::Normal));
    // Touch "a" (past the LRU interval) so "b" is the oldest.
    assert!(matches!(c.lookup(b"a", no_headers(), NOW + 3.0), Lookup::Hit(_)));
    insert(&c, b"d", obj(60.0, 0.0, &[b'd'; 1000], Kind::Normal));
    assert!(matches!(c.lookup(b"b", no_headers(), NOW + 3.0), Lookup::Miss { .. }));
    for k in [b"a", b"c", b"d"] {
        assert!(matches!(c.lookup(k, no_headers(), NOW + 3.0), Lookup::Hit(_)), "{}", k[0] as char);
    }
    assert!(c.used() <= c.budget());
}

#[test]
fn objects_larger_than_storage_are_not_kept() {
    let c = Cache::new(4096, None);
    let Lookup::Miss { guard, .. } = c.lookup(b"big", no_headers(), NOW) else { panic!() };
    let (oc, ok) = c.insert(guard, obj(60.0, 0.0, b"", Kind::Normal));
    assert!(ok);
    assert!(!c.grow(&oc, 10_000, 10_000), "not kept: its body goes in transit");
    assert!(oc.is_dead());
    assert_eq!(c.used(), 0);
    assert!(matches!(c.lookup(b"big", no_headers(), NOW), Lookup::Miss { .. }));
}

#[test]
fn purge_removes_all_variants() {
    let c = Cache::new(1 << 20, None);
    insert(&c, b"p", obj(60.0, 0.0, b"1", Kind::Normal));
    assert_eq!(c.purge(b"p"), 1);
    assert_eq!(c.purge(b"p"), 0);
    assert!(matches!(c.lookup(b"p", no_headers(), NOW), Lookup::Miss { .. }));
}

#[test]
fn removed_objects_leave_no_expiry_entries() {
    let c = Cache::new(1 << 20, None);
    for i in 0..100u32 {
        insert(&c, format!("k{i}").as_bytes(), obj(3600.0, 0.0, b"x", Kind::Normal));
    }
    for i in 0..100u32 {
        c.purge(format!("k{i}").as_bytes());
    }
    assert_eq!(c.inner.stvs.get(0).store().expiring(), 0);
    assert_eq!(c.inner.stvs.get(0).store().stored(), 0);
}

fn args(s: &str) -> Vec<String> {
    common::adm::tokenize(s).unwrap()
}

#[test]
fn bans_kill_matching_objects_on_lookup() {
    let c = Cache::new(1 << 20, None);
    for k in ["/news/1", "/news/2", "/sport/1"] {
        insert(&c, k.as_bytes(), obj(60.0, 0.0, b"x", Kind::Normal));
    }
    c.ban(&args("req.url ~ ^/news"), NOW, true).unwrap();
    for (k, killed) in [("/news/1", true), ("/news/2", true), ("/sport/1", false)] {
        c.check_bans(k.as_bytes(), k.as_bytes(), no_headers());
        let hit = matches!(c.lookup(k.as_bytes(), no_headers(), NOW), Lookup::Hit(_));
        assert_eq!(hit, !killed, "{k}");
    }
    // Objects inserted after a ban are not tested against it.
    insert(&c, b"/news/3", obj(60.0, 0.0, b"x", Kind::Normal));
    c.check_bans(b"/news/3", b"/news/3", no_headers());
    assert!(matches!(c.lookup(b"/news/3", no_headers(), NOW), Lookup::Hit(_)));
}

#[test]
fn the_lurker_applies_obj_bans_without_traffic_and_deletes_them() {
    let c = Cache::new(1 << 20, None);
    let mut tagged = obj(60.0, 0.0, b"x", Kind::Normal);
    tagged.headers = ObjHeaders::from_pairs(b"OK", [(&b"X-Tag"[..], &b"blue"[..])].into_iter());
    insert(&c, b"a", tagged);
    insert(&c, b"b", obj(60.0, 0.0, b"x", Kind::Normal));
    c.ban(&args("obj.http.X-Tag == blue"), NOW, true).unwrap();
    c.ban(&args("req.url ~ /never"), NOW, true).unwrap();
    // Too young for the lurker.
    assert_eq!(c.lurk(NOW + 1.0, 60.0), 0);
    assert_eq!(c.lurk(NOW + 61.0, 60.0), 1);
    assert_eq!(c.objects(), 1);
    let list = c.ban_list();
    assert_eq!(list[0].spec, "req.url ~ /never", "the newest stays");
    assert!(list.iter().all(|b| b.spec != "obj.http.X-Tag == blue"), "completed bans are deleted");
}

#[test]
fn the_lurker_stops_objects_below_a_request_ban_and_keeps_the_bans_they_point_at() {
    let c = Cache::new(1 << 20, None);
    let tag = |v: &str| {
        let mut o = obj(60.0, 0.0, b"x", Kind::Normal);
        o.headers = ObjHeaders::from_pairs(b"OK", [(&b"Foo"[..], v.as_bytes())].into_iter());
        o
    };
    insert(&c, b"1", tag("bar1"));
    c.ban(&args("obj.http.foo == bar1"), NOW, true).unwrap();
    insert(&c, b"3", tag("bar3"));
    c.ban(&args("req.http.kill == yes"), NOW, true).unwrap();
    insert(&c, b"5", tag("bar5"));
    c.ban(&args("obj.http.foo == bar5"), NOW, true).unwrap();
    assert_eq!(c.lurk(NOW + 1.0, 0.0), 2, "/1 and /5 go");
    // The initial ban and the first obj ban go (nothing points at them);
    // /3 stays below the request ban, which requests must still test.
    let list = c.ban_list();
    let shown: Vec<(&str, u64, bool)> = list.iter().map(|b| (b.spec.as_str(), b.refs, b.completed)).collect();
    assert_eq!(shown, [("", 0, true), ("req.http.kill == yes", 0, false), ("", 1, true)]);
}

#[test]
fn duplicate_bans_are_completed() {
    let c = Cache::new(1 << 20, None);
    c.ban(&args("req.url ~ /x"), NOW, true).unwrap();
    c.ban(&args("req.url ~ /x"), NOW, true).unwrap();
    let list = c.ban_list();
    assert!(!list[0].completed && list[1].completed);
    assert!(c.ban(&args("req.url ~ ("), NOW, true).is_err());
}

#[test]
fn ten_thousand_bans_stay_cheap() {
    let c = Cache::new(1 << 20, None);
    insert(&c, b"/keep", obj(60.0, 0.0, b"x", Kind::Normal));
    let start = std::time::Instant::now();
    for i in 0..10_000 {
        c.ban(&args(&format!("req.url == /gone/{i}")), NOW, false).unwrap();
    }
    let add = start.elapsed();
    let start = std::time::Instant::now();
    c.check_bans(b"/keep", b"/keep", no_headers());
    assert!(matches!(c.lookup(b"/keep", no_headers(), NOW), Lookup::Hit(_)));
    let first = start.elapsed();
    let start = std::time::Instant::now();
    for _ in 0..1000 {
        c.check_bans(b"/keep", b"/keep", no_headers());
        assert!(matches!(c.lookup(b"/keep", no_headers(), NOW), Lookup::Hit(_)));
    }
    let later = start.elapsed() / 1000;
    // Figures for the note; the assertions only guard against the
    // pathological (quadratic adds, re-testing every ban on every lookup).
    eprintln!("10,000 bans: add {:?} each; first lookup {first:?}; then {later:?} per lookup", add / 10_000);
    assert!(add < std::time::Duration::from_secs(10));
    assert!(later < first || later < std::time::Duration::from_micros(50));
}

#[test]
fn the_object_layout_stays_compact() {
    // What OBJ_OVERHEAD is measured against (its bytes per object, with
    // `cargo run --release -p cache-d --example object_bytes`): a 96-byte
    // core in the object's allocation, 16-byte heads in the index.
    assert!(std::mem::size_of::<ObjCore>() <= 96, "ObjCore {} bytes", std::mem::size_of::<ObjCore>());
    assert_eq!(std::mem::size_of::<super::head::Head>(), 16);
    assert_eq!(std::mem::size_of::<ObjRef>(), 8);
}

#[test]
fn expiry_heap_and_ring_stay_consistent() {
    // Objects with shuffled lifetimes, some removed early: expiry takes
    // exactly the due ones, in any order of insertion and removal.
    let c = Cache::new(1 << 30, None);
    let mut keys = Vec::new();
    for i in 0..2000u64 {
        let ttl = ((i * 7919) % 500) as f64 + 1.0;
        let key = format!("k{i}");
        insert(&c, key.as_bytes(), obj(ttl, 0.0, b"x", Kind::Normal));
        keys.push((key, ttl));
    }
    for (key, _) in keys.iter().step_by(3) {
        c.purge(key.as_bytes());
    }
    let left = |t: f64| keys.iter().enumerate().filter(|(i, (_, ttl))| i % 3 != 0 && *ttl > t).count();
    for t in [0.0, 100.0, 250.0, 499.0, 501.0] {
        c.expire(NOW + t);
        assert_eq!(c.objects(), left(t), "at +{t}");
        assert_eq!(c.inner.stvs.get(0).store().stored(), left(t));
        assert_eq!(c.inner.stvs.get(0).store().expiring(), left(t));
    }
}

#[test]
fn a_compacted_ring_keeps_eviction_and_expiry_right() {
    let c = Cache::new(1 << 30, None);
    for i in 0..10_000u64 {
        insert(&c, format!("k{i}").as_bytes(), obj(if i % 2 == 0 { 10.0 } else { 100.0 }, 0.0, b"x", Kind::Normal));
    }
    // Purging 6,000 frees more than half the ring: it is compacted.
    for i in 0..6000u64 {
        c.purge(format!("k{i}").as_bytes());
    }
    assert_eq!(c.inner.stvs.get(0).store().stored(), 4000);
    assert_eq!(c.expire(NOW + 50.0), 2000);
    assert_eq!(c.objects(), 2000);
    assert_eq!(c.inner.stvs.get(0).store().expiring(), 2000);
    assert_eq!(c.expire(NOW + 200.0), 2000);
    assert_eq!(c.inner.stvs.get(0).store().stored(), 0);
}

/// Objects per ban id they were last tested up to.
type PerBan = Vec<(u64, u32)>;

/// What the shards' per-ban counts say, and what a walk over the index finds.
fn ban_refs_and_walk(c: &Cache) -> (PerBan, PerBan) {
    let mut counted = std::collections::BTreeMap::new();
    let mut walked = std::collections::BTreeMap::new();
    for shard in &c.inner.shards {
        let s = shard.lock().unwrap();
        for (id, n) in s.refs.iter() {
            *counted.entry(id).or_insert(0) += n;
        }
        for o in s.values().flat_map(|h| h.variants()) {
            *walked.entry(o.ban_id.load(Ordering::Acquire)).or_insert(0) += 1;
        }
    }
    (counted.into_iter().collect(), walked.into_iter().collect())
}

#[test]
fn ban_counts_follow_objects_through_tests_replacements_and_removals() {
    // Small storage, so that inserts evict too.
    let c = Cache::new(40 * 1024, None);
    let mut state = 7u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state >> 33
    };
    for round in 0..3000 {
        let key = format!("/o/{}", next() % 200);
        match next() % 10 {
            0 => {
                c.ban(&args(&format!("req.url == /o/{}", next() % 200)), NOW, false).unwrap();
            }
            1 => {
                c.purge(key.as_bytes());
            }
            2 => {
                c.lurk(NOW + 120.0, 60.0);
            }
            3 | 4 => {
                c.check_bans(key.as_bytes(), key.as_bytes(), no_headers());
            }
            _ => {
                // A new object, or one replacing the variant under the key.
                let found = c.lookup_banned(key.as_bytes(), key.as_bytes(), no_headers(), Bounds::default(), NOW);
                let guard = match found {
                    Lookup::Miss { guard, .. } => guard,
                    _ => c.private_guard(key.as_bytes()),
                };
                c.insert(guard, obj(60.0, 0.0, &vec![b'x'; 300 + (next() % 900) as usize], Kind::Normal));
            }
        }
        let (counted, walked) = ban_refs_and_walk(&c);
        assert_eq!(counted, walked, "after step {round}");
    }
    // The lurker deletes every ban older than the one the objects point
    // at (Varnish keeps that one, with its reference count), without
    // walking the cache; tested objects free the bans they passed.
    for i in 0..200 {
        let k = format!("/o/{i}");
        c.check_bans(k.as_bytes(), k.as_bytes(), no_headers());
    }
    c.ban(&args("req.url == /last"), NOW, false).unwrap();
    c.lurk(NOW + 120.0, 60.0);
    let left = c.ban_list();
    assert_eq!(left.len(), 2);
    assert_eq!(left[0].spec, "req.url == /last");
    assert_eq!(left[1].refs, c.objects() as u64);
}

#[test]
fn soft_purged_objects_leave_when_their_grace_ends() {
    let c = Cache::new(1 << 20, None);
    let mut o = tagged("red", b"x");
    o.life.ttl = 3600.0;
    insert(&c, b"a", o);
    insert(&c, b"b", obj(3600.0, 30.0, b"y", Kind::Normal));
    // Fresh for an hour; soft-purged now, it has its 30 s of grace left.
    assert_eq!(c.xkey_purge(b"red", true, NOW + 10.0), 1);
    assert_eq!(c.soft_purge(b"b", NOW + 10.0, 0.0, Some(5.0), None), 1);
    assert_eq!(c.expire(NOW + 20.0), 1, "b's 5 s of grace ended");
    assert!(matches!(c.lookup(b"a", no_headers(), NOW + 20.0), Lookup::Grace(..)));
    assert_eq!(c.expire(NOW + 45.0), 1, "a's 30 s of grace ended, long before its hour");
    assert_eq!((c.objects(), c.inner.stvs.get(0).store().expiring()), (0, 0));
}

fn tagged(keys: &str, body: &[u8]) -> Object {
    let mut o = obj(60.0, 30.0, body, Kind::Normal);
    o.headers = ObjHeaders::from_pairs(b"OK", [(&b"xkey"[..], keys.as_bytes())].into_iter());
    o
}

#[test]
fn the_xkey_index_follows_objects_in_and_out() {
    // Room for about three of these objects.
    let c = Cache::new(3 * 4096 + 1024, None);
    insert(&c, b"a", tagged("k1 k2", &[0; 4000]));
    insert(&c, b"b", tagged("k2,k3", &[0; 4000]));
    assert_eq!(c.xkeys(), 3);
    // Replaced: the old object's keys go, the new one's come.
    let Lookup::Hit(_) = c.lookup(b"a", no_headers(), NOW) else { panic!("a hit") };
    let Lookup::Miss { guard, .. } = c.lookup_banned(b"a", b"/", no_headers(), Bounds::default(), NOW + 100.0) else {
        panic!("stale: a miss")
    };
    c.insert(guard, tagged("k4", &[0; 4000]));
    assert_eq!(c.xkeys(), 3, "k2 k3 (b) and k4 (a); k1 gone");
    assert_eq!(c.xkey_purge(b"k1", false, NOW), 0);
    // Evicted by LRU: its keys go too.
    insert(&c, b"c", tagged("k5", &[0; 4000]));
    insert(&c, b"d", tagged("k6", &[0; 4000]));
    let left = c.xkeys();
    assert!(left < 5, "an eviction took keys out: {left}");
    // Soft purge: stale, within grace, still indexed; hard purge: gone.
    assert_eq!(c.xkey_purge(b"k6", true, NOW + 1.0), 1);
    assert!(matches!(c.lookup(b"d", no_headers(), NOW + 2.0), Lookup::Grace(..)));
    assert_eq!(c.xkey_purge(b"k6", false, NOW + 2.0), 1);
    assert!(matches!(c.lookup(b"d", no_headers(), NOW + 2.0), Lookup::Miss { .. }));
    // What is left goes by its keys, and the index is empty with it; the
    // count is vmod_xkey's, key by key (b, if still here, under k2 and k3).
    let pairs: usize = c.inner.xkeys.objects(&[b"k2", b"k3", b"k4", b"k5"]).iter().map(Vec::len).sum();
    assert!(pairs >= c.objects());
    assert_eq!(c.xkey_purge(b"k2 k3 k4 k5", false, NOW + 2.0), pairs);
    assert_eq!((c.xkeys(), c.objects()), (0, 0));
}

#[test]
fn a_request_that_refuses_grace_waits_for_the_background_fetch() {
    let c = Cache::new(1 << 20, None);
    insert(&c, b"g", obj(1.0, 60.0, b"old", Kind::Normal));
    let t = NOW + 2.0;
    let no_grace = Bounds { ttl: None, grace: Some(0.0) };
    // Nothing fetching: a miss, with the stale object to revalidate.
    assert!(matches!(c.lookup_banned(b"g", b"/", no_headers(), no_grace, t), Lookup::Miss { stale: Some(_), .. }));
    // Grace accepted: the stale object, and this request refreshes it.
    let Lookup::Grace(_, Some(bg)) = c.lookup(b"g", no_headers(), t) else { panic!("grace with a background fetch") };
    // Refused: wait for that fetch; accepted: the stale object meanwhile.
    let Lookup::Busy(mut rx) = c.lookup_banned(b"g", b"/", no_headers(), no_grace, t) else { panic!("must wait") };
    assert!(matches!(c.lookup(b"g", no_headers(), t), Lookup::Grace(_, None)));
    let mut fresh = obj(60.0, 60.0, b"new", Kind::Normal);
    fresh.life.t_origin = t;
    c.insert(bg, fresh);
    assert_eq!(*rx.borrow_and_update(), BusyState::Ready);
    let Lookup::Hit(oc) = c.lookup_banned(b"g", b"/", no_headers(), no_grace, t) else { panic!("the refreshed object") };
    assert_eq!(oc.body().progress().len, 3);
    // req.ttl: a fresh object older than it is no hit, and not stale.
    let young = Bounds { ttl: Some(1.0), grace: None };
    assert!(matches!(c.lookup_banned(b"g", b"/", no_headers(), young, t + 5.0), Lookup::Miss { stale: None, .. }));
}

#[test]
fn a_fetch_for_one_variant_holds_up_only_requests_for_it() {
    let c = Cache::new(1 << 20, None);
    let lang = |v: &'static [u8]| -> [(&'static [u8], &'static [u8]); 1] { [(b"Accept-Language", v)] };
    let (en, fr, de) = (lang(b"en"), lang(b"fr"), lang(b"de"));
    // The first fetch under a key: nobody knows what it varies on yet.
    let Lookup::Miss { guard, .. } = c.lookup(b"v", en.iter().copied(), NOW) else { panic!() };
    assert!(matches!(c.lookup(b"v", de.iter().copied(), NOW), Lookup::Busy(_)));
    let mut o = obj(60.0, 0.0, b"english", Kind::Normal);
    o.vary = Some(Box::new(vec![("accept-language".into(), vary_value(en.iter().copied(), "accept-language"))]));
    c.insert(guard, o);
    // Now it does: a French fetch keeps neither German nor header-less
    // requests waiting, only French ones.
    let Lookup::Miss { guard: fr_fetch, .. } = c.lookup(b"v", fr.iter().copied(), NOW) else { panic!() };
    let Lookup::Miss { guard: de_fetch, .. } = c.lookup(b"v", de.iter().copied(), NOW) else { panic!("another variant") };
    assert!(matches!(c.lookup(b"v", no_headers(), NOW), Lookup::Miss { .. }));
    let Lookup::Busy(fr_wait) = c.lookup(b"v", fr.iter().copied(), NOW) else { panic!("the same variant waits") };
    let Lookup::Busy(de_wait) = c.lookup(b"v", de.iter().copied(), NOW) else { panic!("the same variant waits") };
    drop(fr_fetch);
    assert_eq!(*fr_wait.borrow(), BusyState::Failed);
    assert_eq!(*de_wait.borrow(), BusyState::Fetching);
    assert!(matches!(c.lookup(b"v", de.iter().copied(), NOW), Lookup::Busy(_)));
    drop(de_fetch);
    assert_eq!(*de_wait.borrow(), BusyState::Failed);
    assert!(matches!(c.lookup(b"v", en.iter().copied(), NOW), Lookup::Hit(_)));
}

#[test]
fn nuke_limit_bounds_the_evictions_of_one_allocation() {
    // Room for three of these; the fourth, three times their size, needs
    // all of them evicted.
    let c = Cache::new(3 * 4096 + 1024, None);
    for k in [&b"a"[..], b"b", b"c"] {
        insert(&c, k, obj(60.0, 0.0, &[0; 4000], Kind::Normal));
    }
    c.set_nuke_limit(1);
    let Lookup::Miss { guard, .. } = c.lookup(b"big", no_headers(), NOW) else { panic!("a miss") };
    let (oc, _) = c.insert(guard, obj(60.0, 0.0, b"", Kind::Normal));
    let before = c.objects();
    assert!(!c.grow(&oc, 12_000, 12_000), "one eviction is not enough");
    assert!(c.objects() >= before - 2, "at most the one eviction allowed (and the object itself) went");
    c.set_nuke_limit(50);
    let Lookup::Miss { guard, .. } = c.lookup(b"big2", no_headers(), NOW) else { panic!("a miss") };
    let (oc, _) = c.insert(guard, obj(60.0, 0.0, b"", Kind::Normal));
    assert!(c.grow(&oc, 12_000, 12_000), "as many evictions as it takes");
}
