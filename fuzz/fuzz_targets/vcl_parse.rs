//! The VCL parser, checker and compiler on arbitrary input: errors, never
//! panics (and an error always renders). Programs that name hosts by name
//! are only parsed: compiling resolves them, and a fuzzer must not send
//! DNS queries.
#![no_main]

use cache_d::vcl::ast::{Expr, FieldValue, Item};
use libfuzzer_sys::fuzz_target;

fn literal_addresses_only(items: &[Item]) -> bool {
    items.iter().all(|i| match i {
        Item::Acl { entries, .. } => entries.iter().all(|e| e.addr.parse::<std::net::IpAddr>().is_ok()),
        Item::Backend { fields, .. } => fields.iter().all(|f| {
            f.name != "host" || matches!(&f.value, FieldValue::Expr(Expr::Str(s, _)) if s.parse::<std::net::IpAddr>().is_ok())
        }),
        _ => true,
    })
}

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    match cache_d::vcl::parse_source("fuzz.vcl", &src) {
        Err(e) => {
            let _ = e.to_string();
        }
        Ok(p) if literal_addresses_only(&p.items) => {
            if let Err(e) = cache_d::vcl::compile::compile(&p) {
                let _ = e.render(&p.files);
            }
        }
        Ok(_) => {}
    }
});
