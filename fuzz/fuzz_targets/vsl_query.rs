//! The log query parser on arbitrary input: errors (that render with a
//! caret), never panics; what parses can be evaluated.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match common::log::query::Query::parse(&text) {
        Ok(q) => {
            let _ = q.matches(&common::log::group::Group { txs: Vec::new() });
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
