//! The VCL parser on arbitrary input: errors, never panics (and an error
//! always renders).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    if let Err(e) = cache_d::vcl::parse_source("fuzz.vcl", &src) {
        let _ = e.to_string();
    }
});
