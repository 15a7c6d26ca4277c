//! Every client answered (issue 33): a request that waits on another
//! request's fetch, or on a body still streaming in, gets its answer
//! within the client's read timeout (10 s) whatever the origin holds
//! back, and whether the fetch it waits for ends or fails. The origin is
//! scripted here so that it can hold an answer (or part of a body) until
//! the test lets it go.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::util::*;

/// What a held answer does once the test decides.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Send,
    /// Close the connection without the rest of the answer.
    Close,
}

/// An answer held until [`Gate::open`] (or [`Gate::fail`]).
#[derive(Default)]
struct Gate {
    then: Mutex<Option<Then>>,
    cv: Condvar,
}

impl Gate {
    fn set(&self, t: Then) {
        *self.then.lock().unwrap() = Some(t);
        self.cv.notify_all();
    }
    fn open(&self) {
        self.set(Then::Send);
    }
    fn fail(&self) {
        self.set(Then::Close);
    }
    /// Wait for the test's word (at most 30 s: a test that forgets its
    /// gate fails on its client's timeout, not here).
    fn wait(&self) -> Then {
        let g = self.then.lock().unwrap();
        let (g, _) = self.cv.wait_timeout_while(g, Duration::from_secs(30), |t| t.is_none()).unwrap();
        g.unwrap_or(Then::Close)
    }
}

/// The request heads a scripted origin was sent, in order (lower case).
type Seen = Arc<Mutex<Vec<String>>>;

/// An origin on a free port whose answers `answer` writes: it gets each
/// request's head (lower case) and the connection, so it may hold a body
/// back or close. One thread per connection, keep-alive.
fn scripted(answer: impl Fn(&str, &mut TcpStream) + Send + Sync + 'static) -> (u16, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (seen, answer): (Seen, _) = (Arc::default(), Arc::new(answer));
    let log = seen.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().map_while(Result::ok) {
            let (answer, log) = (answer.clone(), log.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line.to_ascii_lowercase());
                    }
                    log.lock().unwrap().push(head.clone());
                    answer(&head, &mut s);
                }
            });
        }
    });
    (port, seen)
}

/// An answer with `body` and these extra header lines.
fn answer(s: &mut TcpStream, headers: &str, body: &str) {
    let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{headers}\r\n{body}", body.len());
}

fn count(seen: &Seen, pred: impl Fn(&str) -> bool) -> usize {
    seen.lock().unwrap().iter().filter(|h| pred(h)).count()
}

fn busy_sleeps(d: &Daemon) -> u64 {
    counter(&stat(&d.dir), "MAIN.busy_sleep").unwrap_or(0)
}

const GRACE_VCL: &str = r#"vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_recv {
	if (req.http.x-fresh-only) {
		set req.grace = 0s;
	}
}
sub vcl_backend_response {
	set beresp.ttl = 1s;
	set beresp.grace = 60s;
}
"#;

/// req.grace = 0s during a background fetch: the request waits for that
/// fetch and gets its object (before: it fetched on a connection of its
/// own, and with an origin that answers one at a time never got an
/// answer). When the background fetch fails instead, the wait ends too.
#[test]
fn a_request_refusing_grace_is_answered_from_the_background_fetch() {
    let gates: Arc<[Gate; 2]> = Arc::default();
    let (g, fetches) = (gates.clone(), AtomicUsize::new(0));
    // The first fetch answered at once; the next two (background
    // fetches) held until their gate says, then answered or closed; any
    // later one answered at once.
    let (port, seen) = scripted(move |_, s| match fetches.fetch_add(1, Ordering::SeqCst) {
        n @ (1 | 2) if g[n - 1].wait() == Then::Close => {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        n => answer(s, "", &format!("fetch {n}")),
    });
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "grace.vcl", GRACE_VCL, port);
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    let dport = d.port;
    let refusing = move || std::thread::spawn(move || Client::connect(dport).get("/", "x-fresh-only: 1\r\n"));
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/", "").body, b"fetch 0");
    // Stale, in grace: served the stale object, its background fetch held.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(c.get("/", "").body, b"fetch 0");
    wait_for(10, "the background fetch", || (seen.lock().unwrap().len() == 2).then_some(()));
    let waiting = refusing();
    wait_for(10, "the request that refuses grace to wait", || (busy_sleeps(&d) == 1).then_some(()));
    // Grace accepted: still the stale object, at once.
    assert_eq!(Client::connect(d.port).get("/", "").body, b"fetch 0");
    gates[0].open();
    let r = waiting.join().unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b"fetch 1"[..]), "the background fetch's object");
    assert_eq!(seen.lock().unwrap().len(), 2, "no fetch of its own");

    // The next background fetch fails: the waiting request is answered
    // all the same (cache-d: 503, as to every waiter of a failed fetch;
    // Varnish looks up again and fetches: 200 here). Either ends the wait.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(c.get("/", "").body, b"fetch 1");
    wait_for(10, "the second background fetch", || (seen.lock().unwrap().len() == 3).then_some(()));
    let waiting = refusing();
    wait_for(10, "the request that refuses grace to wait", || (busy_sleeps(&d) == 2).then_some(()));
    gates[1].fail();
    let r = waiting.join().unwrap();
    assert!(matches!(r.status, 200 | 503), "answered: {r:?}");
}

/// A fetch for one Vary variant keeps only requests for that variant
/// waiting (Varnish's predictive Vary): before, a German request waited
/// for the French fetch, held here until the test let it go.
#[test]
fn a_fetch_for_one_variant_does_not_hold_up_another() {
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    let (port, seen) = scripted(move |head, s| {
        let lang = head.lines().find_map(|l| l.strip_prefix("accept-language: ")).unwrap_or("").to_string();
        if lang == "fr" && g.wait() == Then::Close {
            return;
        }
        answer(s, "Vary: Accept-Language\r\nCache-Control: max-age=60\r\n", &format!("in {lang}"));
    });
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("n"), &format!("127.0.0.1:{port}"), &[]);
    let dport = d.port;
    let french = move || std::thread::spawn(move || Client::connect(dport).get("/", "Accept-Language: fr\r\n"));
    assert_eq!(Client::connect(d.port).get("/", "Accept-Language: en\r\n").body, b"in en");
    let first = french();
    wait_for(10, "the French fetch", || (count(&seen, |h| h.contains("accept-language: fr")) == 1).then_some(()));
    // Another variant: answered while the French fetch is held.
    assert_eq!(Client::connect(d.port).get("/", "Accept-Language: de\r\n").body, b"in de");
    // The same variant: waits for it, and is answered when it ends.
    let second = french();
    wait_for(10, "the second French request to wait", || (busy_sleeps(&d) == 1).then_some(()));
    gate.open();
    for h in [first, second] {
        assert_eq!(h.join().unwrap().body, b"in fr");
    }
    assert_eq!(count(&seen, |h| h.contains("accept-language: fr")), 1, "one French fetch");
}

/// Ranges of an object whose body is still streaming in: each is answered
/// 206 once its bytes are in (before: not until the origin had sent the
/// last byte, which it held here until the test let it go), and one whose
/// bytes are not in yet when it is asked once they come.
#[test]
fn ranges_of_a_body_still_streaming_are_answered() {
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    let (port, _) = scripted(move |_, s| {
        let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nCache-Control: max-age=60\r\n\r\n0123456789");
        if g.wait() == Then::Send {
            let _ = s.write_all(b"X");
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("n"), &format!("127.0.0.1:{port}"), &[]);
    let mut c = Client::connect(d.port);
    let r = c.get("/", "Range: bytes=0-4\r\n");
    assert_eq!((r.status, r.header("content-range"), &r.body[..]), (206, Some("bytes 0-4/11"), &b"01234"[..]));
    let r = c.get("/", "Range: bytes=5-9\r\n");
    assert_eq!((r.status, r.header("content-range"), &r.body[..]), (206, Some("bytes 5-9/11"), &b"56789"[..]));
    let dport = d.port;
    let tail = std::thread::spawn(move || Client::connect(dport).get("/", "Range: bytes=8-\r\n"));
    gate.open();
    let r = tail.join().unwrap();
    assert_eq!((r.status, r.header("content-range"), &r.body[..]), (206, Some("bytes 8-10/11"), &b"89X"[..]));
}
