//! The cache path end to end: hits and misses, coalescing, grace, keep and
//! revalidation, client conditionals, ranges, Vary, storage limits,
//! streaming and failures, HEAD.

use std::time::{Duration, Instant};

use crate::util::*;

fn setup(extra: &[&str]) -> (Origin, tempfile::TempDir, Daemon) {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), extra);
    (origin, tmp, d)
}

fn xvarnish(r: &Resp) -> Vec<u32> {
    r.header("x-varnish").unwrap().split(' ').map(|v| v.parse().unwrap()).collect()
}

#[test]
fn miss_then_hit_with_x_varnish_ids_and_age() {
    let (o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    let a = c.get("/size/1000?max_age=60", "");
    assert_eq!((a.status, a.body.len()), (200, 1000));
    assert_eq!(xvarnish(&a).len(), 1, "a miss carries one id");
    let b = c.get("/size/1000?max_age=60", "");
    assert_eq!(b.body, a.body);
    let ids = xvarnish(&b);
    assert_eq!(ids.len(), 2, "a hit carries its own id and the fetch's");
    assert!(ids[1] > xvarnish(&a)[0], "the fetch's vxid follows the request that caused it");
    assert!(b.header("age").is_some() && b.header("via").is_some());
    assert_eq!(b.header("accept-ranges"), Some("bytes"));
    assert_eq!(o.requests(), 1);
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.cache_miss"), Some(1));
    assert_eq!(counter(&once, "MAIN.cache_hit"), Some(1));
    assert_eq!(counter(&once, "MAIN.n_object"), Some(1));
    assert_eq!(counter(&once, "MAIN.s_fetch"), Some(1));
    assert!(counter(&once, "SMA.s0.g_bytes").unwrap() >= 1000);
    wait_logged(&d.dir, "ReqAcct", 2);
    let log = stdout(&run("cache-log", &["-d", "-g", "request", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("-   Hit            "), "{log}");
    assert!(log.contains("-   VCL_call       HIT"));
    assert!(log.contains("--  TTL            RFC 60 "), "{log}");
    assert!(log.contains("--  Storage        malloc s0"));
    // Methods other than GET/HEAD, and requests with cookies, pass.
    assert_eq!(c.get("/size/1000?max_age=60", "Cookie: a=b\r\n").status, 200);
    assert_eq!(o.requests(), 2);
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.s_pass"), Some(1));
}

#[test]
fn a_hundred_concurrent_misses_make_one_origin_request() {
    let (o, _t, d) = setup(&[]);
    let port = d.port;
    let handles: Vec<_> =
        (0..100).map(|_| std::thread::spawn(move || Client::connect(port).get("/size/5000?delay_ms=500&max_age=60", ""))).collect();
    let resps: Vec<Resp> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &resps {
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 5000);
        assert!(r.body.starts_with(b"0123456789"));
    }
    assert_eq!(o.requests(), 1, "the waiting list coalesced the misses");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.cache_miss"), Some(1), "{once}");
    assert!(counter(&once, "MAIN.busy_sleep").unwrap() >= 90, "{once}");
    assert_eq!(counter(&once, "MAIN.busy_sleep"), counter(&once, "MAIN.busy_wakeup"));
}

#[test]
fn uncacheable_responses_become_hit_for_miss() {
    let (o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    for _ in 0..3 {
        assert_eq!(c.get("/size/10?cache_control=private", "").status, 200);
    }
    assert_eq!(o.requests(), 3);
    let once = stat(&d.dir);
    // A hit-for-miss is a miss too, as Varnish counts it.
    assert_eq!(counter(&once, "MAIN.cache_miss"), Some(3));
    assert_eq!(counter(&once, "MAIN.cache_hitmiss"), Some(2));
    assert_eq!(counter(&once, "MAIN.beresp_uncacheable"), Some(3));
    wait_logged(&d.dir, "ReqAcct", 3);
    let log = stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()]));
    assert_eq!(log.matches("-   HitMiss        ").count(), 2, "{log}");
    // Concurrent requests for a hit-for-miss object do not wait for each other.
    let port = d.port;
    let start = Instant::now();
    let hs: Vec<_> =
        (0..5).map(|_| std::thread::spawn(move || Client::connect(port).get("/size/10?cache_control=private&delay_ms=300", ""))).collect();
    // The first of these is a miss that installs the marker; let it finish.
    for h in hs {
        assert_eq!(h.join().unwrap().status, 200);
    }
    let hs: Vec<_> =
        (0..5).map(|_| std::thread::spawn(move || Client::connect(port).get("/size/10?cache_control=private&delay_ms=300", ""))).collect();
    let t2 = Instant::now();
    for h in hs {
        assert_eq!(h.join().unwrap().status, 200);
    }
    assert!(t2.elapsed() < Duration::from_millis(1200), "hit-for-miss fetches run in parallel: {:?}", t2.elapsed());
    let _ = start;
}

#[test]
fn grace_serves_stale_and_refreshes_in_the_background() {
    let (o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    let url = "/size/100?cache_control=max-age%3D1%2C%20stale-while-revalidate%3D30";
    let url = url.replace("%3D", "=");
    let first = c.get(&url, "");
    let first_fetch = xvarnish(&first)[0];
    std::thread::sleep(Duration::from_millis(1200)); // let the object go stale
    let stale = c.get(&url, "");
    assert_eq!(stale.status, 200);
    assert_eq!(xvarnish(&stale)[1], first_fetch + 1, "served from the first fetch's object");
    wait_for(10, "the background fetch", || (o.requests() == 2).then_some(()));
    // Counted now: the refreshed object lives one second too, and a slow
    // machine could see it go stale (and refresh) again below.
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.cache_hit_grace"), Some(1), "{once}");
    assert_eq!(counter(&once, "MAIN.s_bgfetch"), Some(1));
    let fresh = wait_for(10, "the refreshed object", || {
        let r = c.get(&url, "");
        (xvarnish(&r).get(1) != Some(&(first_fetch + 1))).then_some(r)
    });
    assert_eq!(fresh.body.len(), 100);
}

#[test]
fn keep_revalidates_with_304() {
    let (o, _t, d) = setup(&["-p", "default_keep=60", "-p", "default_grace=0"]);
    let mut c = Client::connect(d.port);
    let url = "/size/3000?max_age=1";
    let a = c.get(url, "");
    std::thread::sleep(Duration::from_millis(1200));
    let b = c.get(url, "");
    assert_eq!(b.body, a.body, "the stored body is served after a 304");
    // The refreshed object is a hit (asked at once: it lives one second).
    let r = c.get(url, "");
    assert_eq!(xvarnish(&r).len(), 2);
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.fetch_304"), Some(1), "{once}");
    assert_eq!(o.requests(), 2);
    let log = stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("BereqHeader    If-None-Match: "), "{log}");
    assert!(log.contains("BereqHeader    If-Modified-Since: "));
    assert!(log.contains("BerespStatus   304"));
}

#[test]
fn client_conditionals_and_ranges_on_cached_objects() {
    let (_o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    let url = "/size/1000?max_age=60";
    let full = c.get(url, "");
    let etag = full.header("etag").unwrap().to_string();
    let lm = full.header("last-modified").unwrap().to_string();
    let r = c.get(url, &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty() && r.header("etag").is_some());
    assert_eq!(c.get(url, "If-None-Match: \"other\"\r\n").status, 200);
    assert_eq!(c.get(url, &format!("If-Modified-Since: {lm}\r\n")).status, 304);
    assert_eq!(c.get(url, "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n").status, 200);
    let r = c.get(url, "Range: bytes=10-19\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(r.body, &full.body[10..20]);
    let r = c.get(url, "Range: bytes=-5\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &full.body[995..]));
    let r = c.get(url, "Range: bytes=5000-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */1000"));
    // The connection is still in step after all of these.
    assert_eq!(c.get(url, "").body, full.body);
}

#[test]
fn vary_keeps_variants_per_request_header() {
    let (o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    let url = "/size/10?max_age=60&vary=Accept-Language";
    c.get(url, "Accept-Language: en\r\n");
    c.get(url, "Accept-Language: fr\r\n");
    assert_eq!(o.requests(), 2);
    assert_eq!(xvarnish(&c.get(url, "Accept-Language: en\r\n")).len(), 2);
    assert_eq!(xvarnish(&c.get(url, "Accept-Language:   fr  \r\n")).len(), 2, "values are normalized");
    assert_eq!(o.requests(), 2);
    c.get(url, "");
    assert_eq!(o.requests(), 3);
    assert_eq!(counter(&stat(&d.dir), "MAIN.n_object"), Some(3));
}

#[test]
fn lru_eviction_keeps_storage_within_budget() {
    let (_o, _t, d) = setup(&["-s", "malloc,1M"]);
    let mut c = Client::connect(d.port);
    for i in 0..30 {
        let r = c.get(&format!("/size/100000?max_age=60&n={i}"), "");
        assert_eq!(r.body.len(), 100000);
    }
    let once = stat(&d.dir);
    let nuked = counter(&once, "MAIN.n_lru_nuked").unwrap();
    assert!(nuked >= 20, "{once}");
    assert!(counter(&once, "SMA.s0.g_bytes").unwrap() <= 1 << 20, "{once}");
    assert_eq!(counter(&once, "MAIN.n_object").unwrap() + nuked, 30);
    // The newest object is still there.
    assert_eq!(xvarnish(&c.get("/size/100000?max_age=60&n=29", "")).len(), 2);
}

#[test]
fn an_object_larger_than_storage_is_delivered_not_kept() {
    let (o, _t, d) = setup(&["-s", "malloc,1M"]);
    let mut c = Client::connect(d.port);
    for _ in 0..2 {
        let r = c.get("/size/3000000?max_age=60", "");
        assert_eq!(r.body.len(), 3_000_000);
    }
    assert_eq!(o.requests(), 2);
    let once = stat(&d.dir);
    assert!(counter(&once, "SMA.s0.c_fail").unwrap() >= 1, "{once}");
    assert_eq!(counter(&once, "MAIN.n_object"), Some(0));
    // The cache still works for objects that fit.
    c.get("/size/10?max_age=60", "");
    assert_eq!(xvarnish(&c.get("/size/10?max_age=60", "")).len(), 2);
}

#[test]
fn bodies_stream_to_the_client_before_the_origin_finishes() {
    let (_o, _t, d) = setup(&[]);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET /size/100000?max_age=60&stall_ms=1500 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let start = Instant::now();
    let mut buf = vec![0u8; 65536];
    let mut got = 0;
    // Head plus the first 16 KiB of body arrive while the origin stalls.
    while got < 16384 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    assert!(start.elapsed() < Duration::from_millis(1000), "first bytes took {:?}", start.elapsed());
    // A second client joining mid-stream gets the whole body too.
    let mut c2 = Client::connect(d.port);
    let r = c2.get("/size/100000?max_age=60&stall_ms=1500", "");
    assert_eq!(r.body.len(), 100000);
    assert!(start.elapsed() >= Duration::from_millis(1400));
}

#[test]
fn an_origin_failing_mid_body_closes_clients_and_caches_nothing() {
    let (o, _t, d) = setup(&[]);
    let url = "/size/100000?max_age=60&abort_after=30000";
    let mut c = Client::connect(d.port);
    c.send_raw(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    assert!(c.read_response(false).is_none(), "a truncated body must not look complete");
    let mut c = Client::connect(d.port);
    c.send_raw(format!("GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    assert!(c.read_response(false).is_none());
    assert_eq!(o.requests(), 2, "the failed object was not cached");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.fetch_failed"), Some(2));
    assert_eq!(counter(&once, "MAIN.n_object"), Some(0));
}

#[test]
fn head_fetches_get_and_later_gets_hit() {
    let (o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    c.send_raw(b"HEAD /size/777?max_age=60 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_response(true).unwrap();
    assert_eq!(r.header("content-length"), Some("777"));
    let log = stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("BereqMethod    GET"), "{log}");
    c.send_raw(b"GET /size/777?max_age=60 HTTP/1.1\r\nHost: x\r\n\r\n");
    let g = c.read_response(false).unwrap();
    assert_eq!(g.body.len(), 777);
    assert_eq!(xvarnish(&g).len(), 2, "{g:?}\n{}", stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()])));
    assert_eq!(o.requests(), 1);
}

#[test]
fn unknown_methods_are_piped() {
    let (o, _t, d) = setup(&[]);
    let mut c = Client::connect(d.port);
    c.send_raw(b"BREW /size/5 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"01234");
    assert!(c.closed(), "a pipe ends with the connection");
    assert_eq!(o.requests(), 1);
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.s_pipe"), Some(1));
    let log = wait_for(10, "the pipe's log records", || {
        let log = stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()]));
        log.contains("SessClose      TX_PIPE").then_some(log)
    });
    assert!(log.contains("PipeAcct       "), "{log}");
}

#[test]
fn expired_objects_are_removed_in_the_background() {
    let (_o, _t, d) = setup(&["-p", "default_grace=0"]);
    let mut c = Client::connect(d.port);
    c.get("/size/10?max_age=1", "");
    assert_eq!(counter(&stat(&d.dir), "MAIN.n_object"), Some(1));
    let once = wait_for(10, "the expiry thread", || {
        let once = stat(&d.dir);
        (counter(&once, "MAIN.n_expired") == Some(1)).then_some(once)
    });
    assert_eq!(counter(&once, "MAIN.n_object"), Some(0), "{once}");
    assert_eq!(counter(&once, "SMA.s0.g_bytes"), Some(0));
}
