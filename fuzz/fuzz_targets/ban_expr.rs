//! Ban expressions from arbitrary arguments (as `ban` on the admin socket
//! or from VCL takes them): a ban or an error naming the argument, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // As the admin socket splits them: quoted words.
    if let Ok(args) = common::adm::tokenize(&text) {
        match cache_d::cache::ban::expr::parse(&args) {
            Ok((conds, spec)) => {
                let _ = cache_d::cache::ban::expr::has_req(&conds);
                let _ = spec.len();
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let args: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    let _ = cache_d::cache::ban::expr::parse(&args);
    let _ = cache_d::cache::ban::expr::parse_duration(&text);
});
