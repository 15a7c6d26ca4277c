//! The acceptance run: origin + cache-d + 100 requests, then cache-stat,
//! cache-ncsa and cache-log agree on what happened.

use crate::util::*;

#[test]
fn hundred_requests_show_in_stat_ncsa_and_log() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("inst");
    let d = Daemon::start(&dir, &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = dir.to_str().unwrap();
    // 4 keep-alive connections, 25 requests each, sizes 0..=99 * 37 bytes.
    let mut sizes = Vec::new();
    for c in 0..4 {
        let mut client = Client::connect(d.port);
        for i in 0..25 {
            let n = (c * 25 + i) * 37;
            let r = client.get(&format!("/size/{n}"), "");
            assert_eq!(r.status, 200);
            assert_eq!(r.body.len(), n);
            assert!(r.header("x-varnish").is_some() && r.header("via").is_some_and(|v| v.contains("cachekit")));
            sizes.push(n);
        }
    }

    // A connection's records (and its requests' byte counts) are
    // committed once its client has gone.
    wait_logged(&dir, "SessClose", 4);
    let once = stat(&dir);
    assert_eq!(counter(&once, "MAIN.client_req"), Some(100), "{once}");
    assert_eq!(counter(&once, "MAIN.backend_req"), Some(100));
    assert_eq!(counter(&once, "MAIN.sess_conn"), Some(4));
    assert_eq!(counter(&once, "MAIN.s_resp_bodybytes"), Some(sizes.iter().sum::<usize>() as u64));
    assert!(counter(&once, "MAIN.s_req_hdrbytes").unwrap() > 100 * 40);

    // JSON, list and filters.
    let j = run("cache-stat", &["-j", "-n", ds]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).expect("cache-stat -j is JSON");
    assert_eq!(v["counters"]["MAIN.client_req"]["value"], 100);
    assert_eq!(v["counters"]["MAIN.client_req"]["flag"], "c");
    assert_eq!(v["counters"]["MAIN.n_object"]["flag"], "g");
    let f = stdout(&run("cache-stat", &["-1", "-f", "^MAIN.s_*", "-f", "MAIN.*req*", "-n", ds]));
    let names: Vec<_> = f.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert!(names.contains(&"MAIN.client_req") && names.contains(&"MAIN.backend_req"), "{f}");
    assert!(!names.iter().any(|n| n.starts_with("MAIN.s_") || n.starts_with("MGT.")), "{f}");
    let l = stdout(&run("cache-stat", &["-l", "-n", ds]));
    assert!(l.lines().any(|x| x.starts_with("MAIN.client_req ") && x.contains("Good client requests received")));

    // cache-ncsa: exactly 100 lines in the default format.
    let o = run("cache-ncsa", &["-d", "-n", ds]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 100, "{text}");
    for (line, n) in lines.iter().zip(&sizes) {
        // 127.0.0.1 - - [29/Nov/2026:22:39:50 +0000] "GET http://127.0.0.1/size/N HTTP/1.1" 200 N "-" "cachekit-test"
        let (head, rest) = line.split_once(" [").expect(line);
        assert_eq!(head, "127.0.0.1 - -");
        let (time, rest) = rest.split_once("] ").expect(line);
        assert_eq!(time.len(), 26, "{time}");
        assert_eq!(rest, format!("\"GET http://127.0.0.1/size/{n} HTTP/1.1\" 200 {n} \"-\" \"cachekit-test\""));
    }

    // cache-log -g request: each request followed by its backend request.
    // A fetch's records are written when it ends, which can be a moment
    // after its client had the whole body (a body streams to the client
    // as it arrives): wait until all 100 are there.
    let log = wait_for(10, "every backend request in the log", || {
        let o = run("cache-log", &["-d", "-g", "request", "-n", ds]);
        assert!(o.status.success(), "{}", stderr(&o));
        let log = stdout(&o);
        (log.matches("**  << BeReq    >> ").count() == 100).then_some(log)
    });
    let groups: Vec<&str> = log.split("\n\n").filter(|g| !g.trim().is_empty()).collect();
    assert_eq!(groups.len(), 100, "{log}");
    for (g, n) in groups.iter().zip(&sizes) {
        let lines: Vec<&str> = g.lines().collect();
        assert!(lines[0].starts_with("*   << Request  >> "), "{g}");
        let req_vxid = lines[0].split_whitespace().nth(4).unwrap();
        assert!(lines.contains(&format!("-   ReqURL         /size/{n}").as_str()), "{g}");
        let be = lines.iter().position(|l| l.starts_with("**  << BeReq    >> ")).expect("backend request in group");
        let be_vxid = lines[be].split_whitespace().nth(4).unwrap();
        assert!(lines.contains(&format!("-   Link           bereq {be_vxid} fetch").as_str()), "{g}");
        assert!(lines.contains(&format!("--  Begin          bereq {req_vxid} fetch").as_str()), "{g}");
        assert!(lines.iter().any(|l| l.starts_with("--  BerespStatus   200")));
        assert!(lines.iter().any(|l| l.starts_with("-   ReqAcct        ")));
        assert!(lines.iter().any(|l| l.starts_with("-   Timestamp      Resp: ")));
    }
    // vxid grouping shows the sessions too, raw shows single records.
    let vx = stdout(&run("cache-log", &["-d", "-n", ds]));
    assert_eq!(vx.matches("<< Session  >>").count(), 4, "{vx}");
    assert_eq!(vx.matches("<< BeReq    >>").count(), 100);
    let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "ReqURL", "-n", ds]));
    assert_eq!(raw.lines().count(), 100);
    assert!(raw.lines().all(|l| l.contains(" ReqURL         c /size/")), "{raw}");
}

#[test]
fn queries_select_what_cache_log_and_cache_ncsa_show() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap();
    let mut c = Client::connect(d.port);
    for (url, status) in [("/size/1", 200), ("/size/2?status=404", 404), ("/api/x?status=503", 503), ("/size/3", 200)] {
        assert_eq!(c.get(url, "").status, status);
    }
    wait_logged(&d.dir, "ReqAcct", 4);
    let urls =
        |text: &str| -> Vec<String> { text.lines().filter_map(|l| l.strip_prefix("-   ReqURL")).map(|u| u.trim().to_string()).collect() };
    let log = |q: &str| stdout(&run("cache-log", &["-d", "-g", "request", "-q", q, "-n", ds]));
    assert_eq!(urls(&log("RespStatus >= 400")), ["/size/2?status=404", "/api/x?status=503"]);
    assert_eq!(urls(&log("ReqURL ~ \"^/api/\" or RespStatus == 404")), ["/size/2?status=404", "/api/x?status=503"]);
    assert_eq!(urls(&log("not RespStatus >= 400 and ReqHeader:Host eq 127.0.0.1")), ["/size/1", "/size/3"]);
    // The backend side is at level 2 in request grouping.
    assert_eq!(urls(&log("{2}BerespStatus == 503")), ["/api/x?status=503"]);
    let ncsa = stdout(&run("cache-ncsa", &["-d", "-F", "%U %s", "-q", "RespStatus != 200", "-n", ds]));
    assert_eq!(ncsa, "/size/2 404\n/api/x 503\n");
    // A bad query: the message with the position, exit 2.
    let o = run("cache-log", &["-d", "-q", "RespStatus ==", "-n", ds]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Expected an operand (at position 14)"), "{}", stderr(&o));
}
