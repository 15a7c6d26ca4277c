//! Tests of HTTP/1 heads and bodies.

use std::time::Duration;

use bytes::BytesMut;

use crate::error::Side;
use tokio::io::AsyncWriteExt;

use crate::http1::body::*;
use crate::http1::conn::*;
use crate::http1::head::*;

fn req(s: &str) -> Result<Parsed, HeadError> {
    let mut b = BytesMut::from(s);
    parse_request(&mut b, 64, 32768)
}

#[test]
fn a_method_that_is_no_token_is_taken_as_varnish_takes_it() {
    let mut b = BytesMut::from("\r\n:x :x HTTP/1.0\r\nHost: x\r\n\r\nnext");
    let Ok(Parsed::Complete(h)) = parse_request(&mut b, 64, 32768) else { panic!() };
    assert_eq!((h.method(), h.url(), h.minor), (&b":x"[..], &b":x"[..], 0));
    assert_eq!(h.get("host"), Some(&b"x"[..]));
    assert_eq!(&b[..], b"next");
    assert!(matches!(req(":x / HTTP/1.1\r\nHost"), Ok(Parsed::Partial)));
    for bad in [
        ":x  / HTTP/1.1\r\n\r\n",
        ":\x01 / HTTP/1.1\r\n\r\n",
        ":x / HTTP/2.0\r\n\r\n",
        ":x /\r\n\r\n",
        ":x / HTTP/1.1\r\nBad Header: x\r\n\r\n",
    ] {
        assert!(matches!(req(bad), Err(HeadError::Syntax(_))), "{bad:?}");
    }
}

#[test]
fn parses_requests_and_keeps_the_rest() {
    let mut b = BytesMut::from("GET /a?b HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\nGET /next");
    let Ok(Parsed::Complete(h)) = parse_request(&mut b, 64, 32768) else { panic!() };
    assert_eq!(h.method(), b"GET");
    assert_eq!(h.url(), b"/a?b");
    assert_eq!(h.get("host"), Some(&b"x"[..]));
    assert_eq!(h.wire_len(), 38);
    assert_eq!(&b[..], b"GET /next");
    assert!(matches!(req("GET / HTTP/1.1\r\nHost"), Ok(Parsed::Partial)));
    assert!(matches!(req("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"), Err(HeadError::Syntax(_))));
    assert!(req("\x01\x02garbage\r\n\r\n").is_err());
}

#[test]
fn heads_over_the_size_limit_are_refused_complete_or_not() {
    let head = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n", "a".repeat(300));
    assert_eq!(parse_response(&mut BytesMut::from(head.as_str()), 64, 256).err(), Some(HeadError::TooLarge));
    assert!(matches!(parse_response(&mut BytesMut::from(head.as_str()), 64, 1024), Ok(Parsed::Complete(_))));
    let req = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(300));
    assert_eq!(parse_request(&mut BytesMut::from(req.as_str()), 64, 256).err(), Some(HeadError::TooLarge));
}

#[test]
fn framing_rules() {
    let head = |s: &str| match req(s) {
        Ok(Parsed::Complete(h)) => h,
        _ => panic!("{s}"),
    };
    assert_eq!(request_framing(&head("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")), Ok(Framing::Length(5)));
    assert_eq!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")), Ok(Framing::Chunked));
    assert!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")).is_err());
    assert!(request_framing(&head("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")).is_err());
    assert!(request_framing(&head("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n")).is_err());
    assert_eq!(request_framing(&head("GET / HTTP/1.1\r\n\r\n")), Ok(Framing::None));
    for te in ["chunked, identity", "gzip, chunked", "identity", "chunked;q=1", "xchunked"] {
        let h = head(&format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n"));
        assert!(request_framing(&h).is_err(), "{te}");
    }
    assert!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")).is_err());
    assert_eq!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n")), Ok(Framing::Chunked));
    assert!(request_framing(&head("HEAD / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")).is_err());
    assert!(request_framing(&head("HEAD / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")).is_err());
    assert_eq!(request_framing(&head("HEAD / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")), Ok(Framing::None));
    assert!(request_checks(&head("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n")).is_err());
    assert!(request_checks(&head("GET / HTTP/1.1\r\nHost: a\r\nConnection: close, Host\r\n\r\n")).is_err());
    assert!(request_checks(&head("GET / HTTP/1.1\r\nHost: a\r\nConnection: X-A\r\n\r\n")).is_ok());
    assert_eq!(absolute_form(b"http://Example.com:8080/a?b", false), Some((&b"Example.com:8080"[..], &b"/a?b"[..])));
    assert_eq!(absolute_form(b"HTTP://h/", false), Some((&b"h"[..], &b"/"[..])));
    assert_eq!(absolute_form(b"http://h", true), None);
    assert_eq!(absolute_form(b"/http://h/", true), None);
    assert_eq!(absolute_form(b"https://h/", false), None);
    assert_eq!(absolute_form(b"HTTPS://h/x", true), Some((&b"h"[..], &b"/x"[..])));
}

#[test]
fn chunked_ends_are_found_exactly() {
    assert_eq!(chunked_end(b"5\r\nhello\r\n0\r\n\r\n"), Ok(Some(15)));
    assert_eq!(chunked_end(b"5;x=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET"), Ok(Some(27)));
    assert_eq!(chunked_end(b"5\r\nhello\r\n0\r\nX-T: 1\r\n"), Ok(None));
    assert_eq!(chunked_end(b"5\r\nhel"), Ok(None));
    assert_eq!(chunked_end(b"5\r\nhello\r\n"), Ok(None));
    assert_eq!(chunked_end(b"zz\r\n"), Err(()));
    assert_eq!(chunked_end(b"ffffffffffffffff\r\n"), Err(()));
    assert_eq!(chunked_end(b"fffffffffffffff\r\n"), Ok(None));
}

#[tokio::test(start_paused = true)]
async fn a_dribbling_body_is_cut_by_its_pace() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        for _ in 0..100 {
            if a.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut src = BufConn::new(b);
    let t0 = tokio::time::Instant::now();
    let pace = Pace::new(Duration::from_secs(5), 500);
    let e = prefill(&mut src, Framing::Length(1000), 65536, Duration::from_secs(60), Some(pace)).await.unwrap_err();
    assert_eq!(e.side, Side::Client);
    assert!((5..=6).contains(&t0.elapsed().as_secs()), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn chunked_bodies_are_reframed() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    a.write_all(b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT").await.unwrap();
    let mut src = BufConn::new(b);
    let mut out = Vec::new();
    let t = Transfer {
        framing: Framing::Chunked,
        chunk_out: true,
        src_side: Side::Backend,
        dst_side: Side::Client,
        read_timeout: Duration::from_secs(1),
        pace: None,
    };
    let m = transfer(&mut src, &mut out, &t, &mut Vec::new()).await.unwrap();
    assert_eq!(out, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    assert_eq!(m.payload, 11);
    assert_eq!(m.tx, out.len() as u64);
    assert_eq!(m.rx, 40); // every byte of the chunked input but "NEXT"
    assert_eq!(&src.buf[..], b"NEXT");
}

#[tokio::test]
async fn short_bodies_blame_the_sender() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    a.write_all(b"abc").await.unwrap();
    drop(a);
    let mut src = BufConn::new(b);
    let t = Transfer {
        framing: Framing::Length(10),
        chunk_out: false,
        src_side: Side::Backend,
        dst_side: Side::Client,
        read_timeout: Duration::from_secs(1),
        pace: None,
    };
    let e = transfer(&mut src, &mut Vec::new(), &t, &mut Vec::new()).await.unwrap_err();
    assert_eq!(e.side, Side::Backend);
}

#[test]
fn folded_headers_are_unfolded_as_varnish_does() {
    let mut b = BytesMut::from("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  b\r\n\tc\r\nX-B: 2\r\n\r\n");
    let Ok(Parsed::Complete(h)) = parse_request(&mut b, 64, 32768) else { panic!("not unfolded") };
    assert_eq!(h.get("x-a"), Some(&b"a    b   c"[..]));
    assert_eq!(h.get("x-b"), Some(&b"2"[..]));
    // Whitespace before the first header is not a continuation.
    let mut b = BytesMut::from("GET / HTTP/1.1\r\n  Host: x\r\n\r\n");
    assert!(parse_request(&mut b, 64, 32768).is_err());
    // Responses too.
    let mut b = BytesMut::from("HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n");
    let Ok(Parsed::Complete(h)) = parse_response(&mut b, 64, 32768) else { panic!("not unfolded") };
    assert_eq!(h.get("x-a"), Some(&b"a   b"[..]));
}

#[test]
fn refused_header_lines_say_why_as_varnish() {
    let why = |s: &str| bogo_header(s.as_bytes());
    assert_eq!(why("GET / HTTP/1.1\r\n Host: foo\r\n\r\n").unwrap(), "1st header has white space:  Host: foo");
    assert_eq!(why("GET / HTTP/1.1\r\nA: b\x01c\r\n\r\n").unwrap(), "Header has ctrl char 0x01");
    assert_eq!(why("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n").unwrap(), "Header has ctrl char 0x0d");
    assert_eq!(why("GET / HTTP/1.1\r\nH: x\r\n: v\r\n\r\n").unwrap(), "Missing header name: : v");
    assert_eq!(why("GET / HTTP/1.1\r\nA-B : v\r\n\r\n").unwrap(), "Illegal char 0x20 in header name");
    assert_eq!(why("GET / HTTP/1.1\r\nA/B: v\r\n\r\n").unwrap(), "Illegal char 0x2f in header name");
    assert_eq!(why("GET / HTTP/1.1\r\nNoColon\r\n\r\n").unwrap(), "Header without ':' NoColon");
    assert_eq!(why("GET / HTTP/1.1\r\nA: b\r\n c\r\nD: e\r\n\r\n"), None);
}
