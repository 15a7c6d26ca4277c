//! HTTP/2 with real clients: curl (prior knowledge, h2c upgrade, ALPN on
//! an https listener), nghttp, and the `h2` crate's client for what the
//! command-line clients cannot show (a hundred streams on one connection,
//! a request body larger than the flow-control window); the records
//! streams leave, read by cache-log and by the real varnishlog.

use std::path::Path;
use std::process::Command;

use bytes::Bytes;

use crate::listeners::{listen_port, tls_daemon};
use crate::util::*;

/// curl with these arguments: exit status, stdout, stderr.
fn curl(args: &[&str]) -> (i32, String, String) {
    let o = Command::new("curl").args(["-s", "--max-time", "10"]).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The HTTP version and status curl got, as "2 200".
fn version_status(args: &[&str]) -> String {
    let mut a = vec!["-o", "/dev/null", "-w", "%{http_version} %{http_code}"];
    a.extend_from_slice(args);
    curl(&a).1
}

fn pem(dir: &Path) -> std::path::PathBuf {
    self_signed(dir, &["h2.test"], "h2").bundle
}

#[test]
fn curl_speaks_h2_by_prior_knowledge_upgrade_and_alpn() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let (d, tls) = tls_daemon(tmp.path(), &["-b", &backend, "-p", "feature=+http2"], &pem(tmp.path()));
    let plain = format!("http://127.0.0.1:{}/size/100?max_age=60", d.port);
    assert_eq!(version_status(&["--http2-prior-knowledge", &plain]), "2 200");
    // Upgrade: 101, then the answer on stream 1.
    let (rc, body, err) = curl(&["-v", "--http2", &plain]);
    assert_eq!((rc, body.len()), (0, 100), "{err}");
    assert!(err.contains("< HTTP/1.1 101 Switching Protocols") && err.contains("< HTTP/2 200"), "{err}");
    // A second request on the upgraded connection is a stream too.
    let (rc, _, err) = curl(&["-v", "--http2", &plain, &plain]);
    assert!(rc == 0 && err.contains("Re-using existing connection") && err.matches("< HTTP/2 200").count() == 2, "{err}");
    // ALPN picks h2 on the https listener, http/1.1 when the client asks.
    let ca = tmp.path().join("h2-ca.pem");
    let resolve = format!("h2.test:{tls}:127.0.0.1");
    let secure = format!("https://h2.test:{tls}/size/100?max_age=60");
    let ca = ca.to_str().unwrap();
    for (flag, want) in [("--http2", "2 200"), ("--http1.1", "1.1 200")] {
        assert_eq!(version_status(&[flag, "--cacert", ca, "--resolve", &resolve, &secure]), want, "{flag}");
    }
    // A request body over HTTP/2 reaches the origin whole.
    let big = tmp.path().join("big");
    std::fs::write(&big, vec![b'x'; 300_000]).unwrap();
    let (rc, head, _) =
        curl(&["--http2-prior-knowledge", "-D", "-", "-o", "/dev/null", "--data-binary", &format!("@{}", big.display()), &plain]);
    assert_eq!(rc, 0);
    assert!(head.to_ascii_lowercase().contains("x-request-body-bytes: 300000"), "{head}");
    // nghttp, where installed: the page and its status.
    if have("nghttp") {
        let o = Command::new("nghttp").args(["-nv", &plain]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && text.contains(":status: 200"), "{text}");
    }
    drop(d);
}

#[test]
fn http2_is_off_until_the_feature_is_set() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let (d, tls) = tls_daemon(tmp.path(), &["-b", &backend], &pem(tmp.path()));
    let plain = format!("http://127.0.0.1:{}/size/10", d.port);
    // The preface is not a request: no HTTP/2 answer.
    let (rc, _, _) = curl(&["--http2-prior-knowledge", &plain]);
    assert_ne!(rc, 0);
    // An upgrade request is served on HTTP/1.1; ALPN offers http/1.1 only.
    assert_eq!(version_status(&["--http2", &plain]), "1.1 200");
    let ca = tmp.path().join("h2-ca.pem");
    let secure = format!("https://h2.test:{tls}/size/10");
    let resolve = format!("h2.test:{tls}:127.0.0.1");
    assert_eq!(version_status(&["--http2", "--cacert", ca.to_str().unwrap(), "--resolve", &resolve, &secure]), "1.1 200");
    // Turned on at run time, new connections get it.
    let dir = d.dir.to_str().unwrap();
    let o = run("cache-adm", &["-n", dir, "param.set", "feature", "+http2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(version_status(&["--http2-prior-knowledge", &plain]), "2 200");
    assert_eq!(version_status(&["--http2", "--cacert", ca.to_str().unwrap(), "--resolve", &resolve, &secure]), "2 200");
}

/// GET `path` on an HTTP/2 connection: status and body length.
async fn get(send: &mut h2::client::SendRequest<Bytes>, path: &str) -> (u16, usize) {
    get_paced(send, path, None).await
}

/// The same, waiting `pace` before taking each DATA frame's bytes off
/// the window (a slow reader: the server's sends wait on flow control).
pub(crate) async fn get_paced(send: &h2::client::SendRequest<Bytes>, path: &str, pace: Option<std::time::Duration>) -> (u16, usize) {
    let req = http::Request::get(format!("http://127.0.0.1{path}")).body(()).unwrap();
    let (resp, _) = send.clone().ready().await.unwrap().send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
        let _ = body.flow_control().release_capacity(chunk.len());
        n += chunk.len();
    }
    (status, n)
}

/// POST `len` bytes, sent as flow control allows: the body length the
/// origin saw.
async fn post(send: &mut h2::client::SendRequest<Bytes>, len: usize) -> String {
    let req = http::Request::post("http://127.0.0.1/echo").body(()).unwrap();
    let (resp, mut body) = send.clone().ready().await.unwrap().send_request(req, false).unwrap();
    let mut left = len;
    while left > 0 {
        body.reserve_capacity(left);
        let got = std::future::poll_fn(|cx| body.poll_capacity(cx)).await.unwrap().unwrap();
        let n = got.min(left);
        left -= n;
        body.send_data(Bytes::from(vec![b'p'; n]), left == 0).unwrap();
    }
    let resp = resp.await.unwrap();
    resp.headers().get("x-request-body-bytes").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default()
}

#[test]
fn a_hundred_streams_share_one_connection() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &["-p", "feature=+http2"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", d.port)).await.unwrap();
        let (mut send, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(conn);
        let mut streams = Vec::new();
        for i in 0..100 {
            let mut s = send.clone();
            streams.push(tokio::spawn(async move { get(&mut s, &format!("/size/{}?max_age=60", i * 97)).await }));
        }
        for (i, s) in streams.into_iter().enumerate() {
            assert_eq!(s.await.unwrap(), (200, i * 97), "stream {i}");
        }
        // A body larger than the stream's window (65,535) and one of 2 MiB
        // sent back: flow control both ways.
        assert_eq!(post(&mut send, 1_000_000).await, "1000000");
        assert_eq!(get(&mut send, "/size/2097152").await, (200, 2_097_152));
        drop(send);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), driver).await;
    });
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.sess_conn"), Some(1), "{once}");
    assert_eq!(counter(&once, "MAIN.client_req"), Some(102), "{once}");
    assert_eq!(counter(&once, "MGT.child_start"), Some(1));
}

#[test]
fn streams_are_logged_under_their_session() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &["-p", "feature=+http2", "-a", "h2c=127.0.0.1:0"]);
    let port = listen_port(&d.dir, "h2c");
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    // Upgraded: stream 1 answers the upgrade request, stream 3 the next.
    // (curl 7.88 does not reuse a prior-knowledge connection for a second
    // URL, against varnishd either.)
    let (rc, _, _) = curl(&["--http2", &url("/size/5"), &url("/size/6")]);
    assert_eq!(rc, 0);
    let dir = d.dir.to_str().unwrap();
    let text = wait_for(10, "the session's records", || {
        let t = stdout(&run("cache-log", &["-d", "-g", "session", "-n", dir]));
        t.contains("SessClose").then_some(t)
    });
    assert_eq!(text.matches("ReqProtocol    HTTP/2.0").count(), 2, "{text}");
    assert_eq!(text.matches("RespProtocol   HTTP/2.0").count(), 2, "{text}");
    assert_eq!(text.matches("Link           req ").count(), 2, "{text}");
    // The session's records come in order: Begin first, End last.
    let sess: Vec<&str> = text.lines().filter(|l| l.starts_with("-   ")).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(sess.first(), Some(&"Begin"), "{text}");
    assert_eq!(sess.last(), Some(&"End"), "{text}");
    // The real varnishlog groups a dump of them as cache-log does.
    if have("varnishlog") {
        let f = d.dir.join("dump.vsl");
        let fs = f.to_str().unwrap();
        run("cache-log", &["-d", "-w", fs, "-n", dir]);
        let args = ["-r", fs, "-g", "session"];
        let theirs = Command::new("varnishlog").args(args).output().unwrap();
        assert_eq!(stdout(&run("cache-log", &args)), String::from_utf8_lossy(&theirs.stdout));
    }
}

#[test]
fn cache_bench_loads_h2_streams_and_new_connections() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let (d, tls) = tls_daemon(tmp.path(), &["-b", &backend, "-p", "feature=+http2"], &pem(tmp.path()));
    let ca = tmp.path().join("h2-ca.pem");
    let bench = |extra: &[&str], url: &str| {
        let mut args = vec!["run", "-q", "--json", "-t", "1"];
        args.extend_from_slice(extra);
        args.push(url);
        let o = run("cache-bench", &args);
        serde_json::from_str::<serde_json::Value>(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)))
    };
    let count = |v: &serde_json::Value| (v["requests"].as_u64(), v["errors"]["total"].as_u64());
    let before = stat(&d.dir);
    // h2c by prior knowledge: 2 connections, 10 streams each.
    let plain = format!("http://127.0.0.1:{}/size/100?max_age=60", d.port);
    let v = bench(&["--h2", "--streams", "10", "-c", "2", "-n", "1000"], &plain);
    assert_eq!(count(&v), (Some(1000), Some(0)), "{v}");
    let after = stat(&d.dir);
    let delta = |name: &str| counter(&after, name).unwrap_or(0) - counter(&before, name).unwrap_or(0);
    assert_eq!((delta("MAIN.sess_conn"), delta("MAIN.client_req")), (2, 1000), "{after}");
    // h2 by ALPN, and a handshake per request.
    let secure = format!("https://h2.test:{tls}/size/100?max_age=60");
    let trust = ["--cacert", ca.to_str().unwrap(), "--resolve", "h2.test:127.0.0.1"];
    let v = bench(&[&trust[..], &["--h2", "--streams", "4", "-c", "1", "-n", "300"]].concat(), &secure);
    assert_eq!(count(&v), (Some(300), Some(0)), "{v}");
    let before = stat(&d.dir);
    let v = bench(&[&trust[..], &["--new-conn", "-c", "2", "-n", "100"]].concat(), &secure);
    assert_eq!(count(&v), (Some(100), Some(0)), "{v}");
    let after = stat(&d.dir);
    let delta = |name: &str| counter(&after, name).unwrap_or(0) - counter(&before, name).unwrap_or(0);
    assert_eq!((delta("MAIN.sess_conn"), delta("MAIN.tls_handshakes")), (100, 100), "{after}");
    // --streams needs --h2.
    let o = run("cache-bench", &["run", "--streams", "4", &plain]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
