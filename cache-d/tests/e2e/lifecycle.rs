//! Start, stop, restart and damage: what the daemon leaves behind and how
//! readers cope.

use crate::util::*;

#[test]
fn sigterm_stops_cleanly_and_cleans_the_instance_dir() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let pid = tmp.path().join("cache-d.pid");
    let mut d = Daemon::start(&dir, &format!("127.0.0.1:{}", origin.port), &["-P", pid.to_str().unwrap()]);
    let text = std::fs::read_to_string(&pid).unwrap();
    assert_eq!(text.trim().parse::<u32>().unwrap(), d.child.as_ref().unwrap().id());
    // A second daemon on the same instance refuses to start.
    let o = run("cache-d", &["-F", "-a", "127.0.0.1:0", "-b", "127.0.0.1:1", "-n", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("another cache-d") && stderr(&o).contains(dir.to_str().unwrap()), "{}", stderr(&o));
    // An idle keep-alive client does not hold up the shutdown.
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/size/1", "").status, 200);
    assert_eq!(d.stop(), Some(0));
    assert!(!pid.exists());
    assert!(!dir.join("_.listen").exists());
    // The segment stays, marked stopped: readers say so, naming the dir.
    let o = run("cache-stat", &["-1", "-t", "0", "-n", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(dir.to_str().unwrap()) && stderr(&o).contains("has stopped"), "{}", stderr(&o));
    // A dump still reads the log the stopped daemon left (post-mortem).
    let o = run("cache-log", &["-d", "-g", "raw", "-i", "ReqURL", "-n", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("/size/1"), "{}", stdout(&o));
    assert!(stderr(&o).contains("not running"), "{}", stderr(&o));
}

#[test]
fn daemonizes_without_f_and_reports_start_errors() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let pidf = tmp.path().join("pid");
    let o = run(
        "cache-d",
        &["-a", "127.0.0.1:0", "-b", &format!("127.0.0.1:{}", origin.port), "-n", dir.to_str().unwrap(), "-P", pidf.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let pid: i32 = std::fs::read_to_string(&pidf).unwrap().trim().parse().unwrap();
    let port: u16 = std::fs::read_to_string(dir.join("_.listen")).unwrap().split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(Client::connect(port).get("/size/2", "").body, b"01");
    // SAFETY: signalling the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_for(10, "the daemon to remove its pid file", || (!pidf.exists()).then_some(()));
    // A port already taken: the parent reports the child's error, exit 2.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = taken.local_addr().unwrap().to_string();
    let o = run("cache-d", &["-a", &a, "-b", "127.0.0.1:1", "-n", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("could not listen on"), "{}", stderr(&o));
}

#[test]
fn a_reader_started_before_the_daemon_attaches_when_it_comes() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let ds = dir.to_str().unwrap().to_string();
    let mut log = Follower::start("cache-log", &["-g", "raw", "-n", &ds]);
    let mut ncsa = Follower::start("cache-ncsa", &["-n", &ds]);
    log.wait_line(10, false, "cache-log to say it waits", |l| l.contains("waiting") && l.contains(&ds));
    let d = Daemon::start(&dir, &format!("127.0.0.1:{}", origin.port), &[]);
    log.wait_line(10, false, "cache-log to attach", |l| l.contains("attached to cache-d"));
    Client::connect(d.port).get("/size/7?first", "");
    log.wait_line(10, true, "the request in cache-log", |l| l.contains("ReqURL") && l.contains("/size/7?first"));
    ncsa.wait_line(10, true, "the request in cache-ncsa", |l| l.contains("/size/7?first"));
    // cache-stat waits too when asked to (-t).
    let o = run("cache-stat", &["-1", "-t", "5", "-n", &ds]);
    assert!(o.status.success());
}

#[test]
fn a_reader_left_running_across_a_restart_follows_the_new_daemon() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let ds = dir.to_str().unwrap().to_string();
    let backend = format!("127.0.0.1:{}", origin.port);
    let mut d = Daemon::start(&dir, &backend, &[]);
    let mut ncsa = Follower::start("cache-ncsa", &["-n", &ds]);
    let mut log = Follower::start("cache-log", &["-g", "request", "-n", &ds]);
    // Followers start at the tail: keep making requests until both have
    // shown one, which proves they are attached.
    let mut client = Client::connect(d.port);
    wait_for(10, "followers to see a request", || {
        client.get("/size/1?before", "");
        std::thread::sleep(std::time::Duration::from_millis(50));
        (ncsa.has_line(true, |l| l.contains("?before")) && log.has_line(true, |l| l.contains("/size/1?before"))).then_some(())
    });
    drop(client);
    assert_eq!(d.stop(), Some(0));
    ncsa.wait_line(10, false, "ncsa to notice the stop", |l| l.contains("stopped") && l.contains(&ds));
    let d2 = Daemon::start(&dir, &backend, &[]);
    ncsa.wait_line(10, false, "ncsa to re-attach", |l| l.contains("attached to cache-d"));
    Client::connect(d2.port).get("/size/2?after", "");
    ncsa.wait_line(10, true, "ncsa after the restart", |l| l.contains("?after"));
    log.wait_line(10, true, "log after the restart", |l| l.contains("/size/2?after"));
    assert!(log.err.iter().any(|l| l.contains("stopped")), "{:?}", log.err);
}

#[test]
fn garbage_segments_make_readers_exit_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    std::fs::create_dir_all(&dir).unwrap();
    let ds = dir.to_str().unwrap();
    let mut random = vec![0u8; 100_000];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in random.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut wrong_version = b"CKITSEG\0".to_vec();
    wrong_version.extend_from_slice(&99u32.to_ne_bytes());
    wrong_version.resize(8192, 0);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", b"CKITSEG\0\x01".to_vec(), "truncated"),
        ("wrong magic", b"VSL\0 not ours at all, but long enough to hold a header......................................................................................".to_vec(), "wrong magic"),
        ("random bytes", random, "not a cachekit segment"),
        ("future layout", wrong_version, "layout version 99"),
    ];
    for (what, bytes, want) in cases {
        std::fs::write(dir.join("_.segment"), &bytes).unwrap();
        for (tool, args) in [
            ("cache-stat", vec!["-1", "-n", ds]),
            ("cache-stat", vec!["-j", "-n", ds]),
            ("cache-log", vec!["-d", "-n", ds]),
            ("cache-log", vec!["-n", ds, "-t", "1"]),
            ("cache-ncsa", vec!["-d", "-n", ds]),
        ] {
            let o = run(tool, &args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{tool} on {what}: {err}");
            assert!(err.contains(ds) && err.contains(want), "{tool} on {what}: {err}");
            assert!(!err.contains("panicked"), "{tool} on {what}: {err}");
            assert!(o.stdout.is_empty());
        }
    }
}

/// systemd's Type=notify: READY=1 once the child serves (a request then
/// gets an answer), STOPPING=1 on SIGTERM, both with the manager's pid.
#[test]
fn tells_systemd_when_it_is_ready_and_when_it_stops() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let sock_path = tmp.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let dir = tmp.path().join("i");
    let mut child = std::process::Command::new(bin("cache-d"))
        .args(["-F", "-a", "127.0.0.1:0", "-b", &format!("127.0.0.1:{}", origin.port), "-n", dir.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1 within 10 s");
    let said = String::from_utf8_lossy(&buf[..n]).to_string();
    assert_eq!(said, format!("READY=1\nMAINPID={}\n", child.id()));
    let port = std::fs::read_to_string(dir.join("_.listen")).unwrap().split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(Client::connect(port).get("/size/3", "").status, 200, "ready means serving");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("STOPPING=1\n"));
    assert!(child.wait().unwrap().success());
}
