//! PROXY protocol headers from arbitrary bytes: the scanner never panics,
//! a complete header never claims more bytes than arrived, and every
//! shorter prefix of a complete header asks for more.
#![no_main]

use cache_d::listen::proxy::{scan, Scan, V2_SIG};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    // Half the inputs start with a signature, so the parsers behind it run.
    let buf: Vec<u8> = match which % 3 {
        0 => [b"PROXY ".as_slice(), rest].concat(),
        1 => [V2_SIG.as_slice(), rest].concat(),
        _ => rest.to_vec(),
    };
    if let Scan::Complete { len, .. } = scan(&buf) {
        assert!(len <= buf.len());
        for cut in [0, 1, len / 2, len.saturating_sub(1)] {
            if cut < len {
                assert!(!matches!(scan(&buf[..cut]), Scan::Complete { .. }), "a prefix of {len} bytes completed at {cut}");
            }
        }
    }
});
