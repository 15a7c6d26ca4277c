//! Request heads from arbitrary bytes: parsing and framing never panic.
#![no_main]

use bytes::BytesMut;
use cache_d::http1::head::{parse_request, request_framing, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Parsed::Complete(head)) = parse_request(&mut buf, 64, 32 * 1024) {
        let _ = request_framing(&head);
        let _ = head.iter().count();
        let _ = head.has_token("connection", "close");
    }
});
