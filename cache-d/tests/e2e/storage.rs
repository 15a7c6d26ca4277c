//! Stores end to end: several `-s`, VCL choosing one, file stores, and
//! a persistent store across stops, crashes, bans, damage and a full
//! disk; disk reads that never hold up memory hits.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::*;

/// A daemon with these stores (`-s` arguments) and a VCL that puts
/// objects in `store` (None: the default choice).
fn daemon(dir: &Path, origin: &Origin, stores: &[&str], store: Option<&str>) -> Daemon {
    daemon_with(dir, origin, stores, store, &[])
}

/// The same, with more arguments.
fn daemon_with(dir: &Path, origin: &Origin, stores: &[&str], store: Option<&str>, more: &[&str]) -> Daemon {
    let set = store.map(|s| format!("set beresp.storage = storage.{s};")).unwrap_or_default();
    let src =
        format!("vcl 4.1;\nbackend default {{ .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }}\nsub vcl_backend_response {{ {set} }}\n");
    let vcl = vcl_src(dir, "s.vcl", &src, origin.port);
    let mut args = vec!["-f", vcl.to_str().unwrap()];
    for s in stores {
        args.extend(["-s", s]);
    }
    args.extend_from_slice(more);
    Daemon::start_args(&dir.join("i"), &args)
}

fn url(i: usize) -> String {
    format!("/size/{}?max_age=600&v={i}", 2000 + i * 37)
}

/// Ask for `urls` and check every body is the origin's (its length).
fn get_all(port: u16, urls: impl Iterator<Item = usize>) {
    let mut c = Client::connect(port);
    for i in urls {
        let r = c.get(&url(i), "");
        assert_eq!((r.status, r.body.len()), (200, 2000 + i * 37), "{}", url(i));
    }
}

fn persistent(dir: &Path, size: &str) -> String {
    format!("disk=persistent,{},{size}", dir.display())
}

#[test]
fn persistent_objects_survive_a_stop_and_the_bans_made_before_it() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let p = persistent(t.path(), "64M");
    let stores = ["mem=malloc,16M", p.as_str()];
    let mut d = daemon(t.path(), &o, &stores, Some("disk"));
    get_all(d.port, 0..40);
    assert_eq!(o.requests(), 40);
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMP.disk.g_alloc"), Some(40), "{s}");
    assert!(counter(&s, "SMA.mem.g_bytes").unwrap() > 40 * 2000, "copies in memory: {s}");
    // Three objects under a surrogate key.
    let tagged = |i: usize| format!("/size/100?max_age=600&t={i}&header=xkey:tagged");
    let mut c = Client::connect(d.port);
    for i in 0..3 {
        assert_eq!(c.get(&tagged(i), "").status, 200);
    }
    let ban = run("cache-adm", &["-n", d.dir.to_str().unwrap(), "ban", "req.url", "~", "v=1[0-9]$"]);
    assert!(ban.status.success(), "{}", stderr(&ban));
    assert_eq!(d.stop(), Some(0));
    // A full stop and start: hits without the origin, but for the ten
    // objects the ban took.
    let d = daemon(t.path(), &o, &stores, Some("disk"));
    get_all(d.port, 0..40);
    assert_eq!(o.requests(), 53);
    // (Read after the requests: the child serves once it has read the
    // store back, but the manager publishes the address before that.)
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMP.disk.c_recovered"), Some(43), "{s}");
    assert_eq!(counter(&s, "MAIN.cache_hit"), Some(30), "{s}");
    assert_eq!(counter(&s, "SMP.disk.c_disk_reads"), Some(30), "read from disk once: {s}");
    // Then from memory.
    get_all(d.port, 0..40);
    assert_eq!(counter(&stat(&d.dir), "SMP.disk.c_disk_reads"), Some(30));
    let bans = stdout(&run("cache-adm", &["-n", d.dir.to_str().unwrap(), "ban.list"]));
    assert!(bans.contains("req.url ~ v=1[0-9]$"), "the ban came back: {bans}");
    // The surrogate keys came back with their objects.
    let purged = stdout(&run("cache-adm", &["-n", d.dir.to_str().unwrap(), "xkey.purge", "tagged"]));
    assert!(purged.contains("3 object(s) purged"), "{purged}");
    let mut c = Client::connect(d.port);
    for i in 0..3 {
        assert_eq!(c.get(&tagged(i), "").status, 200);
    }
    assert_eq!(o.requests(), 56);
}

/// Issue 35: with a malloc and a persistent store and a policy that does
/// not set beresp.storage, objects went round robin (Varnish's rule) and
/// the half in memory was lost at a restart. Now they all go to the
/// persistent store, the malloc store their memory tier in front;
/// short-lived ones still go to Transient.
#[test]
fn unplaced_objects_go_to_the_persistent_store_and_all_survive_a_stop() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let p = persistent(t.path(), "64M");
    let stores = ["mem=malloc,16M", p.as_str()];
    let short = ["-p", "shortlived=20"];
    let mut d = daemon_with(t.path(), &o, &stores, None, &short);
    get_all(d.port, 0..20);
    assert_eq!(Client::connect(d.port).get("/size/100?max_age=2", "").status, 200);
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMP.disk.g_alloc"), Some(20), "{s}");
    assert_eq!(counter(&s, "SMA.Transient.g_alloc"), Some(1), "short-lived: {s}");
    assert!(counter(&s, "SMA.mem.g_bytes").unwrap() > 20 * 2000, "copies in memory: {s}");
    let log = stdout(&run("cache-log", &["-d", "-g", "request", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("Storage        persistent disk") && !log.contains("Storage        malloc mem"), "{log}");
    assert_eq!(d.stop(), Some(0));
    let d = daemon_with(t.path(), &o, &stores, None, &short);
    get_all(d.port, 0..20);
    assert_eq!(o.requests(), 21, "every object came back from disk");
    let s = stat(&d.dir);
    assert_eq!((counter(&s, "SMP.disk.c_recovered"), counter(&s, "MAIN.cache_hit")), (Some(20), Some(20)), "{s}");
}

/// The child's process id (the manager's child named --child).
pub(crate) fn child_pid(dir: &Path) -> Option<i32> {
    let want = dir.to_str()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        (args.contains(&&b"--child"[..]) && args.contains(&want.as_bytes())).then(|| e.file_name().to_str()?.parse().ok())?
    })
}

#[test]
fn a_child_killed_mid_write_comes_back_with_whole_objects_only() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let p = persistent(t.path(), "64M");
    let d = daemon(t.path(), &o, &[p.as_str()], Some("disk"));
    let port = d.port;
    // Four clients filling the store while the child is killed.
    let fill: Vec<_> = (0..4)
        .map(|k| {
            std::thread::spawn(move || {
                let mut n = 0;
                let mut c = Client::connect(port);
                for i in (k * 1000..).step_by(1).take(400) {
                    let Some(r) = ({
                        c.send_raw(format!("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", url(i)).as_bytes());
                        c.read_response(false)
                    }) else {
                        break;
                    };
                    assert_eq!(r.body.len(), 2000 + i * 37);
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    let pid = child_pid(&d.dir).expect("the child");
    // SAFETY: killing the daemon's own child, as a crash would.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let done: Vec<usize> = fill.into_iter().map(|h| h.join().unwrap()).collect();
    wait_for(20, "the manager to start a new child", || child_pid(&d.dir).filter(|&p| p != pid));
    let before = wait_for(20, "the new child to serve", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        Some(o.requests())
    });
    // Every object asked for before the kill is whole if it came back;
    // some came back from disk.
    for (k, n) in done.iter().enumerate() {
        get_all(port, k * 1000..k * 1000 + n);
    }
    let s = stat(&d.dir);
    let recovered = counter(&s, "SMP.disk.c_recovered").unwrap();
    assert!(recovered > 0, "{s}");
    assert_eq!(o.requests() - before, done.iter().sum::<usize>() as u64 - counter(&s, "MAIN.cache_hit").unwrap());
    assert_eq!(counter(&s, "SMP.disk.c_corrupt"), Some(0), "{s}");
}

#[test]
fn a_damaged_body_is_found_dropped_and_fetched_again() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let p = persistent(t.path(), "8M");
    let mut d = daemon(t.path(), &o, &[p.as_str()], Some("disk"));
    get_all(d.port, 0..3);
    assert_eq!(d.stop(), Some(0));
    // The first object's body ends its segment (bodies fill a segment
    // from its end): flip a byte in it.
    let file = t.path().join("disk.store");
    let raw = std::fs::read(&file).unwrap();
    let seg_size = u64::from_le_bytes(raw[32..40].try_into().unwrap());
    let at = (4096 + seg_size - 100) as usize;
    let mut bad = raw.clone();
    bad[at] ^= 0xff;
    std::fs::write(&file, &bad).unwrap();
    let d = daemon(t.path(), &o, &[p.as_str()], Some("disk"));
    get_all(d.port, 0..3);
    assert_eq!(o.requests(), 4, "the damaged one was fetched again, the others hit");
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMP.disk.c_corrupt"), Some(1), "{s}");
    assert_eq!(counter(&s, "MAIN.cache_hit"), Some(2), "{s}");
}

#[test]
fn a_full_store_takes_back_its_oldest_segments() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    // 31 segments of 64 KiB (1.9 MiB) for 400 objects of 2 to 17 KiB
    // (3.8 MiB): the log goes round, taking back its oldest segments.
    let p = persistent(t.path(), "2M");
    let d = daemon(t.path(), &o, &["mem=malloc,1M", p.as_str()], Some("disk"));
    get_all(d.port, 0..400);
    let s = stat(&d.dir);
    let (alloc, bytes) = (counter(&s, "SMP.disk.g_alloc").unwrap(), counter(&s, "SMP.disk.g_bytes").unwrap());
    assert!(alloc < 400 && alloc > 100, "{s}");
    assert!(bytes <= 2 << 20, "{s}");
    assert_eq!(counter(&s, "SMP.disk.c_freed").unwrap(), counter(&s, "SMP.disk.c_bytes").unwrap() - bytes, "{s}");
    assert!(counter(&s, "MAIN.n_lru_nuked").unwrap() >= 400 - alloc, "{s}");
    assert!(counter(&s, "SMA.mem.g_bytes").unwrap() <= 1 << 20, "{s}");
    // The newest are there, the oldest went.
    let n = o.requests();
    get_all(d.port, 390..400);
    assert_eq!(o.requests(), n);
    get_all(d.port, 0..10);
    assert_eq!(o.requests(), n + 10);
}

#[test]
fn a_file_store_serves_from_disk_and_starts_empty() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let f = format!("f=file,{},16M", t.path().join("bodies").display());
    // No memory store: every hit reads its body from the file.
    let mut d = daemon(t.path(), &o, &[f.as_str()], None);
    get_all(d.port, 0..5);
    // Each memory copy goes once its write is done; a hit that comes
    // sooner is sent from memory, not read back (CI saw 4 reads of 5).
    wait_for(10, "the writes", || (counter(&stat(&d.dir), "SMF.f.c_disk_writes") == Some(5)).then_some(()));
    get_all(d.port, 0..5);
    assert_eq!(o.requests(), 5);
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMF.f.c_disk_reads"), Some(5), "{s}");
    assert_eq!(counter(&s, "SMF.f.g_alloc"), Some(5), "{s}");
    let log = stdout(&run("cache-log", &["-d", "-g", "request", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("Storage        file f"), "{log}");
    assert_eq!(d.stop(), Some(0));
    let d = daemon(t.path(), &o, &[f.as_str()], None);
    get_all(d.port, 0..5);
    assert_eq!(o.requests(), 10, "a file store forgets");
}

#[test]
fn a_store_this_version_cannot_read_is_refused_or_wiped() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("old.store");
    std::fs::write(&file, vec![7u8; 8192]).unwrap();
    let spec = format!("p=persistent,{},8M", file.display());
    let out = run("cache-d", &["-F", "-a", "127.0.0.1:0", "-b", "127.0.0.1:9", "-n", t.path().join("i").to_str().unwrap(), "-s", &spec]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains(file.to_str().unwrap()) && err.contains("not a cachekit store") && err.contains(",wipe"), "{err}");
    let o = Origin::start();
    let wiped = format!("{spec},wipe");
    let d = daemon(t.path(), &o, &[wiped.as_str()], None);
    get_all(d.port, 0..2);
    // One daemon to a store.
    let out = run("cache-d", &["-F", "-a", "127.0.0.1:0", "-b", "127.0.0.1:9", "-n", t.path().join("j").to_str().unwrap(), "-s", &spec]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("in use by another cache-d"), "{}", stderr(&out));
    for bad in ["p=persistent,/nonexistent/dir/x,8M", "p=persistent,/tmp,1k", "p=tape,/dev/st0", "a=malloc,1M", "a=file,/tmp/x"] {
        let out = run("cache-d", &["-F", "-a", "127.0.0.1:0", "-b", "127.0.0.1:9", "-s", "a=malloc,1M", "-s", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
    }
}

#[test]
fn a_slow_disk_slows_disk_hits_and_not_memory_hits() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let p = persistent(t.path(), "16M");
    let stores = ["mem=malloc,16M", p.as_str()];
    let mut d = daemon(t.path(), &o, &stores, Some("disk"));
    get_all(d.port, 0..9);
    assert_eq!(d.stop(), Some(0));
    let src = "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\n";
    let vcl = vcl_src(t.path(), "s.vcl", src, o.port);
    let args = ["-f", vcl.to_str().unwrap(), "-s", stores[0], "-s", stores[1]];
    let d = Daemon::start_env(&t.path().join("i"), &args, &[("CACHEKIT_TEST_DISK_DELAY_MS", "600")]);
    // Object 0 into memory (one slow read).
    get_all(d.port, 0..1);
    // Eight slow disk reads at once, more than the request threads...
    let port = d.port;
    let slow: Vec<_> = (1..9)
        .map(|i| {
            std::thread::spawn(move || {
                let t0 = Instant::now();
                get_all(port, i..i + 1);
                t0.elapsed()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    // ...and meanwhile memory hits answer at once.
    let mut c = Client::connect(port);
    for _ in 0..10 {
        let t0 = Instant::now();
        assert_eq!(c.get(&url(0), "").status, 200);
        assert!(t0.elapsed() < Duration::from_millis(300), "a memory hit took {:?}", t0.elapsed());
    }
    for h in slow {
        assert!(h.join().unwrap() >= Duration::from_millis(550));
    }
    assert_eq!(o.requests(), 9);
}

#[test]
fn stores_are_listed_chosen_by_vcl_and_logged() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let f = format!("big=file,{},16M", t.path().display());
    let d = daemon_with(t.path(), &o, &["malloc,4M", f.as_str(), "small=malloc,1M"], Some("small"), &["-p", "shortlived=20"]);
    let dir = d.dir.to_str().unwrap();
    let list = stdout(&run("cache-adm", &["-n", dir, "storage.list"]));
    assert_eq!(
        list.trim(),
        "Storage devices:\n\tstorage.s0 = malloc\n\tstorage.big = file\n\tstorage.small = malloc\n\tstorage.Transient = malloc"
    );
    let j: serde_json::Value = serde_json::from_str(&stdout(&run("cache-adm", &["-n", dir, "storage.list", "-j"]))).unwrap();
    assert_eq!(j[3][1], serde_json::json!({"name": "big", "storage": "file"}));
    get_all(d.port, 0..3);
    // Short-lived objects (ttl + grace + keep under shortlived) go to
    // Transient whatever VCL says.
    assert_eq!(Client::connect(d.port).get("/size/100?max_age=2", "").status, 200);
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMA.small.g_alloc"), Some(3), "{s}");
    assert_eq!(counter(&s, "SMA.Transient.g_alloc"), Some(1), "{s}");
    assert_eq!(counter(&s, "SMA.s0.g_alloc"), Some(0), "{s}");
    assert_eq!(counter(&s, "SMF.big.g_alloc"), Some(0), "{s}");
    let log = stdout(&run("cache-log", &["-d", "-g", "request", "-n", dir]));
    assert!(log.contains("Storage        malloc small") && log.contains("Storage        malloc Transient"), "{log}");
    // An unknown store is a compile error with its position.
    let bad = vcl_src(
        t.path(),
        "bad.vcl",
        "vcl 4.1;\nbackend b { .host = \"127.0.0.1\"; }\nsub vcl_backend_response {\n  set beresp.storage = storage.nope;\n}\n",
        o.port,
    );
    let out = run("cache-d", &["-C", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("storage.nope") && stderr(&out).contains("Line 4"), "{}", stderr(&out));
}

#[test]
fn objects_too_large_for_memory_go_to_disk_and_too_large_for_a_segment_are_not_kept() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    // Segments of 252 KiB behind a 64 KiB memory tier.
    let p = persistent(t.path(), "8M");
    let d = daemon(t.path(), &o, &["mem=malloc,64k", p.as_str()], Some("disk"));
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/size/150000?max_age=600", "").body.len(), 150000);
    // Its memory copy goes once it is written (not before: a hit that
    // comes sooner is sent from memory).
    wait_for(10, "the write", || (counter(&stat(&d.dir), "SMP.disk.c_disk_writes") == Some(1)).then_some(()));
    for _ in 0..2 {
        assert_eq!(c.get("/size/150000?max_age=600", "").body.len(), 150000);
    }
    assert_eq!(o.requests(), 1);
    for _ in 0..2 {
        assert_eq!(c.get("/size/400000?max_age=600", "").body.len(), 400000);
    }
    assert_eq!(o.requests(), 3);
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "SMP.disk.c_disk_reads"), Some(2), "{s}");
    assert_eq!(counter(&s, "SMP.disk.c_disk_write_fail"), Some(2), "{s}");
    assert!(counter(&s, "SMA.mem.g_bytes").unwrap() <= 64 << 10, "{s}");
}

#[test]
fn large_bodies_are_read_block_by_block_and_a_damaged_block_cuts_the_response() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let p = persistent(t.path(), "128M");
    let path = "/size/3000000?max_age=600";
    let mut d = daemon(t.path(), &o, &[p.as_str()], Some("disk"));
    let first = Client::connect(d.port).get(path, "");
    assert_eq!(first.body.len(), 3_000_000);
    assert_eq!(d.stop(), Some(0));
    let d2 = daemon(t.path(), &o, &[p.as_str()], Some("disk"));
    let mut c = Client::connect(d2.port);
    for _ in 0..2 {
        let r = c.get(path, "");
        assert_eq!(r.body, first.body, "read back whole, block by block");
    }
    assert_eq!(o.requests(), 1);
    let s = stat(&d2.dir);
    assert_eq!(counter(&s, "SMP.disk.c_disk_reads"), Some(2), "{s}");
    assert_eq!(counter(&s, "SMP.disk.c_disk_read_bytes"), Some(6_000_000), "{s}");
    drop(d2);
    // A byte of its second block (of three) flipped: the first block is
    // sent, then the response is cut; the object goes and comes again.
    let file = t.path().join("disk.store");
    let raw = std::fs::read(&file).unwrap();
    let seg_size = u64::from_le_bytes(raw[32..40].try_into().unwrap());
    let body_off = 4096 + seg_size - (3_000_000u64 + 12).next_multiple_of(8);
    let mut bad = raw;
    bad[(body_off + 1_500_000) as usize] ^= 0x01;
    std::fs::write(&file, &bad).unwrap();
    let d3 = daemon(t.path(), &o, &[p.as_str()], Some("disk"));
    let mut c = Client::connect(d3.port);
    c.send_raw(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes());
    assert!(c.read_response(false).is_none(), "a cut response, never a wrong body");
    let r = Client::connect(d3.port).get(path, "");
    assert_eq!(r.body, first.body);
    assert_eq!(o.requests(), 2);
    assert_eq!(counter(&stat(&d3.dir), "SMP.disk.c_corrupt"), Some(1));
}

/// A daemon whose objects go to a persistent store of `size` behind a
/// 1 MiB memory tier, stale at once past their max-age (no grace) and
/// kept a minute for revalidation.
fn revalidating(dir: &Path, origin: &Origin, size: &str) -> Daemon {
    let p = persistent(dir, size);
    let keep = ["-p", "default_grace=0", "-p", "default_keep=60"];
    daemon_with(dir, origin, &["mem=malloc,1M", p.as_str()], Some("disk"), &keep)
}

/// GET `path` on a new connection: the response, or None when it was
/// cut (headers and less body than they announced).
fn get_or_cut(port: u16, path: &str) -> Option<Resp> {
    let mut c = Client::connect(port);
    c.send_raw(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes());
    c.read_response(false)
}

/// Regression (issue 32, an empty body served as a 200): a stale disk
/// object revalidated with a 304 while the memory tier lets its body's
/// copy go (other disk hits take the room during the fetch) must keep
/// its whole body, for the request that revalidated it and the hits
/// after; it was delivered with its headers and no body bytes.
#[test]
fn a_304_on_a_disk_object_whose_memory_copy_went_keeps_its_body() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let d = revalidating(t.path(), &o, "64M");
    let others = |port| {
        let mut c = Client::connect(port);
        for i in 0..10 {
            assert_eq!(c.get(&format!("/size/200000?max_age=600&b={i}"), "").body.len(), 200_000);
        }
    };
    others(d.port);
    let a = "/size/200001?max_age=1";
    assert_eq!(Client::connect(d.port).get(a, "").body.len(), 200_001);
    std::thread::sleep(Duration::from_millis(1500));
    // The revalidation waits at the origin while ten disk hits push the
    // stale object's copy out of the 1 MiB memory tier.
    Client::connect(o.port).get("/__pause?ms=1500", "");
    let port = d.port;
    let revalidate = std::thread::spawn(move || get_or_cut(port, a).map(|r| (r.status, r.body.len())));
    std::thread::sleep(Duration::from_millis(300));
    others(d.port);
    assert_eq!(revalidate.join().unwrap(), Some((200, 200_001)), "the revalidated object's whole body");
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "MAIN.fetch_304"), Some(1), "{s}");
    for _ in 0..2 {
        assert_eq!(get_or_cut(d.port, a).map(|r| (r.status, r.body.len())), Some((200, 200_001)), "a hit after it");
        others(d.port);
    }
}

/// A large disk object (read block by block, never whole in memory) is
/// revalidated too: the 304 copies its blocks into the new object.
#[test]
fn a_304_on_a_large_disk_object_copies_its_blocks() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let d = revalidating(t.path(), &o, "128M");
    let a = "/size/2500000?max_age=1";
    let first = Client::connect(d.port).get(a, "");
    assert_eq!(first.body.len(), 2_500_000);
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..3 {
        let r = get_or_cut(d.port, a).expect("a whole response");
        assert_eq!((r.status, r.body == first.body), (200, true));
    }
    let s = stat(&d.dir);
    assert_eq!(counter(&s, "MAIN.fetch_304"), Some(1), "{s}");
    assert_eq!(o.requests(), 2);
}
