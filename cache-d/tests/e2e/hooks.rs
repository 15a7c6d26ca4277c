//! The policy hooks: a cache-d server run in-process with a policy of the
//! test's own (what compiled VCL will plug in), for the outcomes the
//! built-in policy never chooses: return(purge) and hit-for-pass.

use std::sync::Arc;

use cache_d::acceptor;
use cache_d::backend::pool::{self as backend, Backend};
use cache_d::child::loops::Loops;
use cache_d::listen::{Listener, Proto, Socket};
use cache_d::params::Params;
use cache_d::shared::Shared;
use cache_d::vcl::builtin::builtin;
use cache_d::vcl::model::{Action, Sub, Task};
use cache_d::vcl::policy::Policy;
use common::segment::SegmentWriter;

use crate::util::*;

/// PURGE purges; responses whose Cache-Control says "x-hfp" become
/// hit-for-pass for 60 s; everything else is built-in.
struct TestPolicy;

impl Policy for TestPolicy {
    fn call(&self, sub: Sub, t: &mut Task<'_>) -> Action {
        match sub {
            Sub::Recv if t.req.as_deref().is_some_and(|r| &r.method[..] == b"PURGE") => Action::Purge,
            Sub::BackendResponse if t.beresp.as_deref().is_some_and(|b| b.headers.contains_ci("cache-control", "x-hfp")) => {
                Action::PassFor(60.0)
            }
            _ => builtin(sub, t),
        }
    }
}

struct InProcess {
    rt: tokio::runtime::Runtime,
    stop: tokio::sync::watch::Sender<bool>,
    port: u16,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    loops: Option<Arc<Loops>>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let rt = std::mem::replace(&mut self.rt, tokio::runtime::Builder::new_current_thread().build().unwrap());
        rt.shutdown_timeout(std::time::Duration::from_secs(1));
        if let Some(loops) = self.loops.take() {
            loops.shutdown(std::time::Duration::from_secs(1));
        }
    }
}

fn start(origin: &Origin) -> InProcess {
    start_on(origin, Proto::Http)
}

/// In process, one listener of `proto` (Https: a certificate for a.test).
fn start_on(origin: &Origin, proto: Proto) -> InProcess {
    start_with(origin, proto, Params::default())
}

fn start_with(origin: &Origin, proto: Proto, params: Params) -> InProcess {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i");
    let seg = Arc::new(SegmentWriter::create(&path, 1 << 20).unwrap());
    let be = Backend::new("default", backend::resolve(&format!("127.0.0.1:{}", origin.port)).unwrap());
    let sh = Shared::new(seg, params, be);
    sh.set_policy("test", Arc::new(TestPolicy));
    if proto == Proto::Https {
        sh.tls.load("a", pem_bundle(&["a.test"]).0.as_bytes()).unwrap();
        sh.tls.commit();
    }
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let listeners = vec![Listener { name: "a0".into(), proto, socket: Socket::Tcp(socket) }];
    let loops = Arc::new(Loops::start(2).unwrap());
    rt.spawn(acceptor::serve(Arc::new(sh), listeners, loops.clone(), rx, std::time::Duration::from_secs(1)));
    InProcess { rt, loops: Some(loops), stop, port, _dir: dir, path }
}

#[test]
fn return_purge_invalidates_the_object() {
    let origin = Origin::start();
    let s = start(&origin);
    let mut c = Client::connect(s.port);
    let url = "/size/10?max_age=60";
    c.get(url, "");
    assert_eq!(c.get(url, "").header("x-varnish").unwrap().split(' ').count(), 2);
    c.send_raw(format!("PURGE {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes());
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("Purged"));
    assert_eq!(c.get(url, "").header("x-varnish").unwrap().split(' ').count(), 1, "a miss after the purge");
    let once = stat(&s.path);
    assert_eq!(counter(&once, "MAIN.n_purges"), Some(1), "{once}");
    assert_eq!(counter(&once, "MAIN.n_obj_purged"), Some(1));
    assert_eq!(counter(&once, "MAIN.cache_miss"), Some(2));
}

#[test]
fn hit_for_pass_objects_pass_for_their_ttl() {
    let origin = Origin::start();
    let s = start(&origin);
    let mut c = Client::connect(s.port);
    for _ in 0..3 {
        assert_eq!(c.get("/size/10?cache_control=x-hfp", "").status, 200);
    }
    let once = stat(&s.path);
    assert_eq!(counter(&once, "MAIN.cache_miss"), Some(1), "{once}");
    assert_eq!(counter(&once, "MAIN.cache_hitpass"), Some(2));
    assert_eq!(counter(&once, "MAIN.s_pass"), Some(2));
    wait_logged(&s.path, "ReqAcct", 3);
    let log = stdout(&run("cache-log", &["-d", "-n", s.path.to_str().unwrap()]));
    assert_eq!(log.matches("-   HitPass        ").count(), 2, "{log}");
    assert!(log.contains("TTL            HFP 60 "), "{log}");
}

#[test]
fn a_connection_moved_to_another_event_loop_goes_on_with_its_session() {
    let origin = Origin::start();
    let s = start(&origin);
    let loops = s.loops.clone().unwrap();
    let mut c = Client::connect(s.port);
    assert_eq!(c.get("/size/10?max_age=60", "").status, 200);
    assert_eq!(loops.open(), vec![1, 0], "an idle child packs connections on its first loop");
    // Moved between two requests, and again with two pipelined requests
    // already read: each answered in order on the other loop.
    loops.shed(0, 1);
    let r = c.get("/size/20?max_age=60", "");
    assert_eq!((r.status, r.body.len()), (200, 20));
    settle(&loops, vec![0, 1]);
    loops.shed(1, 1);
    c.send_raw(b"GET /size/30?max_age=60 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /size/10?max_age=60 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let (a, b) = (c.read_response(false).unwrap(), c.read_response(false).unwrap());
    assert_eq!((a.status, a.body.len(), b.status, b.body.len()), (200, 30, 200, 10));
    assert_eq!(b.header("x-varnish").unwrap().split(' ').count(), 2, "the first object, a hit");
    settle(&loops, vec![1, 0]);
    drop(c);
    settle(&loops, vec![0, 0]);
    // One session, its four requests linked, closed once.
    let log = stdout(&run("cache-log", &["-d", "-g", "raw", "-n", s.path.to_str().unwrap()]));
    assert_eq!(log.matches(" Begin          c sess 0 HTTP/1").count(), 1, "{log}");
    assert_eq!(log.matches(" Link           c req ").count(), 4, "{log}");
    assert_eq!(log.matches(" SessClose      c REM_CLOSE").count(), 1, "{log}");
}

#[test]
fn a_tls_connection_moves_between_event_loops_with_its_session() {
    let origin = Origin::start();
    let s = start_on(&origin, Proto::Https);
    let loops = s.loops.clone().unwrap();
    let mut c = crate::tls::Conn::open(s.port, "a.test");
    assert!(c.get().starts_with("HTTP/1.1 200"));
    assert_eq!(loops.open(), vec![1, 0]);
    // Asked to move: it does after its next response, and its TLS
    // session goes on on the other loop (the socket registered there).
    loops.shed(0, 1);
    assert!(c.get().starts_with("HTTP/1.1 200"));
    settle(&loops, vec![0, 1]);
    for _ in 0..3 {
        assert!(c.get().starts_with("HTTP/1.1 200"));
    }
    assert_eq!(loops.open(), vec![0, 1]);
}

/// An HTTP/2 connection moves between two polls, its streams in progress
/// going on on the other loop: one waiting for a slow origin, the others
/// sent while it waits; then again in the middle of ten answers of
/// 100 KiB each held back by flow control.
#[test]
fn an_http2_connection_moves_between_event_loops_with_its_streams() {
    let origin = Origin::start();
    let mut p = Params::default();
    p.set("feature", "+http2").unwrap();
    let s = start_with(&origin, Proto::Http, p);
    let loops = s.loops.clone().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(conn);
        // Read slowly: the connection's window stays short.
        let get = |path: &'static str| {
            let send = send.clone();
            tokio::spawn(async move { crate::h2::get_paced(&send, path, Some(std::time::Duration::from_millis(1))).await })
        };
        assert_eq!(get("/size/10?max_age=60").await.unwrap(), (200, 10));
        assert_eq!(loops.open(), vec![1, 0], "an idle child packs connections on its first loop");
        let slow = get("/size/1000?delay_ms=400");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        loops.shed(0, 1);
        assert_eq!(get("/size/20?max_age=60").await.unwrap(), (200, 20));
        settle_async(&loops, vec![0, 1]).await;
        assert_eq!(slow.await.unwrap(), (200, 1000), "the stream that waited for the origin");
        let big: Vec<_> = (0..10).map(|_| get("/size/102400?max_age=60")).collect();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        loops.shed(1, 1);
        for b in big {
            assert_eq!(b.await.unwrap(), (200, 102_400));
        }
        settle_async(&loops, vec![1, 0]).await;
        assert_eq!(get("/size/10?max_age=60").await.unwrap(), (200, 10));
        drop(send);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), driver).await;
    });
    settle(&loops, vec![0, 0]);
    let once = stat(&s.path);
    assert_eq!(counter(&once, "MAIN.sess_conn"), Some(1), "{once}");
    assert_eq!(counter(&once, "MAIN.client_req"), Some(14), "{once}");
    let log = stdout(&run("cache-log", &["-d", "-g", "raw", "-n", s.path.to_str().unwrap()]));
    assert_eq!(log.matches(" Begin          c sess 0 HTTP/1").count(), 1, "{log}");
    assert_eq!(log.matches(" SessClose      c ").count(), 1, "{log}");
}

/// `settle` without blocking the runtime that drives the client.
async fn settle_async(loops: &Loops, want: Vec<usize>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while loops.open() != want {
        assert!(std::time::Instant::now() < deadline, "open connections {:?}, not {want:?}", loops.open());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Wait (5 s at most) for the loops' open connections to be `want`: a
/// connection asked to move does so once its response is out.
fn settle(loops: &Loops, want: Vec<usize>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while loops.open() != want {
        assert!(std::time::Instant::now() < deadline, "open connections {:?}, not {want:?}", loops.open());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
