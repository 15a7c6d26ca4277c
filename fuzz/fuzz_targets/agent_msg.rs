//! What a cache-bench agent reads from the network before and after
//! authentication, from arbitrary bytes: bounded lines, signatures and
//! plans are checked, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cache_bench::dist::fuzz_messages(data);
});
