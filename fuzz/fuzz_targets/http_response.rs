//! Response heads and chunked bodies from arbitrary bytes: parsing, framing
//! and the chunked decoder (the streaming one and the completeness scan)
//! never panic, and agree on where a chunked body ends.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use cache_d::error::Side;
use cache_d::http1::body::{chunked_end, transfer, Transfer};
use cache_d::http1::conn::BufConn;
use cache_d::http1::head::{parse_response, response_framing, Framing, Parsed};
use libfuzzer_sys::fuzz_target;

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        let mut buf = BytesMut::from(rest);
        while let Ok(Parsed::Complete(head)) = parse_response(&mut buf, 64, 32 * 1024) {
            let _ = response_framing(&head, b"GET");
            let _ = response_framing(&head, b"HEAD");
            let _ = head.reason();
            let _ = cache_d::http1::head::connection_tokens(head.iter());
        }
        return;
    }
    // A chunked body: decode it as the proxy would, re-framed.
    let end = chunked_end(rest);
    let got = rt().block_on(async {
        let (mut a, b) = tokio::io::duplex(rest.len() + 1);
        tokio::io::AsyncWriteExt::write_all(&mut a, rest).await.unwrap();
        drop(a);
        let mut src = BufConn::new(b);
        let t = Transfer {
            framing: Framing::Chunked,
            chunk_out: true,
            src_side: Side::Backend,
            dst_side: Side::Client,
            read_timeout: Duration::from_secs(1),
            pace: None,
        };
        let mut out = Vec::new();
        transfer(&mut src, &mut out, &t, &mut Vec::new()).await.map(|m| (m, out))
    });
    if let (Ok(Some(n)), Ok((m, out))) = (end, &got) {
        assert_eq!(m.rx as usize, n, "the scan and the decoder disagree on the end");
        assert!(out.ends_with(b"0\r\n\r\n"));
    }
});
