//! Surrogate keys (issue 20): objects tagged by their `xkey` or
//! `Surrogate-Key` header, `xkey.purge` removing exactly the tagged ones,
//! `xkey.softpurge` serving stale while one refresh runs, and vmod purge's
//! `purge.soft()` / `purge.hard()` on the current object.

use crate::util::*;

const VCL: &str = r#"vcl 4.1;
import xkey;
import purge;
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_recv {
    if (req.method == "PURGE") {
        if (req.http.soft) {
            set req.http.n = xkey.softpurge(req.http.keys);
        } else {
            set req.http.n = xkey.purge(req.http.keys);
        }
        return (synth(200, "Purged"));
    }
}
sub vcl_hit {
    if (req.http.purge-here == "soft") {
        set req.http.n = purge.soft(0s, 30s);
    } elsif (req.http.purge-here == "hard") {
        set req.http.n = purge.hard();
        return (synth(200, "Hard"));
    }
}
sub vcl_synth { set resp.http.n = req.http.n; }
sub vcl_deliver { set resp.http.n = req.http.n; }
"#;

/// PURGE with these keys: the count VCL got back.
fn purge(port: u16, keys: &str, soft: bool) -> String {
    let mut c = Client::connect(port);
    let soft = if soft { "soft: 1\r\n" } else { "" };
    c.send_raw(format!("PURGE / HTTP/1.1\r\nHost: x\r\nkeys: {keys}\r\n{soft}\r\n").as_bytes());
    let r = c.read_response(false).expect("an answer");
    assert_eq!(r.status, 200);
    r.header("n").unwrap_or_default().to_string()
}

#[test]
fn xkey_purges_exactly_the_tagged_objects_and_softpurge_serves_stale() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "xkey.vcl", VCL, origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let mut c = Client::connect(d.port);
    let urls = [
        "/size/1?max_age=600&header=xkey:red%20blue",
        "/size/2?max_age=600&header=xkey:blue,green",
        "/size/3?max_age=600&header=Surrogate-Key:green%20yellow",
        "/size/4?max_age=600",
        "/size/5?max_age=600&header=xkey:red",
    ];
    let fetch_all = |c: &mut Client| urls.iter().map(|u| c.get(u, "").status).collect::<Vec<_>>();
    assert_eq!(fetch_all(&mut c), [200; 5]);
    let before = origin.requests();
    assert_eq!(fetch_all(&mut c), [200; 5]);
    assert_eq!(origin.requests(), before, "all hits");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.xkey_keys"), Some(4), "red blue green yellow:\n{once}");
    // blue: objects 1 and 2; then only they are fetched again.
    assert_eq!(purge(d.port, "blue", false), "2");
    assert_eq!(fetch_all(&mut c), [200; 5]);
    assert_eq!(origin.requests(), before + 2);
    // Several keys: each counts its own objects (vmod_xkey counts key by
    // key; c1082 has an object under two keys named).
    assert_eq!(purge(d.port, "red yellow", false), "3");
    assert_eq!(purge(d.port, "nothing", false), "0");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.xkey_obj_purged"), Some(5), "{once}");
    assert_eq!(counter(&once, "MAIN.xkey_purges"), Some(3), "{once}");
    // green (object 2; 3 went with yellow): only blue and green remain.
    assert_eq!(counter(&once, "MAIN.xkey_keys"), Some(2), "{once}");

    // Soft purge: served stale at once, one refresh, then fresh.
    let graced = "/size/6?cache_control=max-age%3D600,%20stale-while-revalidate%3D60&header=xkey:soft";
    assert_eq!(c.get(graced, "").status, 200);
    let before = origin.requests();
    assert_eq!(purge(d.port, "soft", true), "1");
    let r = c.get(graced, "");
    assert_eq!(r.status, 200, "stale, from the cache");
    wait_for(10, "the background refresh", || (origin.requests() == before + 1).then_some(()));
    for _ in 0..3 {
        assert_eq!(c.get(graced, "").status, 200);
    }
    assert_eq!(origin.requests(), before + 1, "one refresh, then hits");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.xkey_obj_softpurged"), Some(1), "{once}");
    assert!(counter(&once, "MAIN.cache_hit_grace") >= Some(1), "{once}");
    // The purge leaves a VCL_Log record saying how many.
    let log = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "VCL_Log", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("xkey.purge: 3 object(s) for \"red yellow\"") && log.contains("xkey.softpurge: 1 object(s)"), "{log}");
}

#[test]
fn vmod_purge_acts_on_the_current_object() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "xkey.vcl", VCL, origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let mut c = Client::connect(d.port);
    let url = "/size/7?max_age=600";
    assert_eq!(c.get(url, "").status, 200);
    let before = origin.requests();
    // purge.hard(): gone; the next request fetches.
    assert_eq!(c.get(url, "purge-here: hard\r\n").header("n"), Some("1"));
    assert_eq!(c.get(url, "").status, 200);
    assert_eq!(origin.requests(), before + 1);
    // purge.soft(0s, 30s): this hit is served, the object is stale (in its
    // new 30 s grace), the next request gets it stale and refreshes once.
    assert_eq!(c.get(url, "purge-here: soft\r\n").header("n"), Some("1"));
    assert_eq!(c.get(url, "").status, 200);
    wait_for(10, "the refresh", || (origin.requests() == before + 2).then_some(()));
    // purge.* outside vcl_hit and vcl_miss: loads (as in Varnish), and
    // fails the task when it runs (c0823 checks the answers).
    let bad = tmp.path().join("bad.vcl");
    std::fs::write(
        &bad,
        "vcl 4.1;\nimport purge;\nbackend b { .host = \"127.0.0.1\"; }\nsub vcl_recv { set req.http.n = purge.hard(); }\n",
    )
    .unwrap();
    let o = run("cache-d", &["-C", "-f", bad.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}
