//! Log records from arbitrary bytes: decoding and grouping never panic.
#![no_main]

use common::log::group::{Grouper, Grouping};
use common::log::vsl::Records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let now = std::time::Instant::now();
    for mode in [Grouping::Raw, Grouping::Vxid, Grouping::Request] {
        let mut g = Grouper::new(mode);
        let mut out = Vec::new();
        for r in Records::new(data) {
            g.feed(&r, now, &mut out);
        }
        g.flush(&mut out);
    }
});
