//! A disk store's bytes from arbitrary input: records, store and segment
//! headers, the bans journal, and packed heads as recovery checks them;
//! never a panic, and a head that passes the check reads whole.
#![no_main]

use bytes::Bytes;
use cache_d::cache::disk::{journal, record};
use cache_d::cache::headers::{valid, ObjHeaders};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for seq in [0, 1, u64::from_le_bytes(data.get(8..16).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]))] {
        if let record::Found::Obj(rec, len) = record::decode(data, seq) {
            assert!(len <= data.len() && len % 8 == 0);
            if valid(&rec.head) {
                let h = ObjHeaders::from_bytes(rec.head.clone());
                let _ = (h.reason(), h.to_headers(), h.get("etag"), h.head_len());
            }
        }
    }
    let _ = record::FileHeader::decode(data);
    let _ = record::seg_seq(data);
    let _ = journal::decode(data);
    if valid(data) {
        let h = ObjHeaders::from_bytes(Bytes::copy_from_slice(data));
        let _ = (h.reason(), h.to_headers(), h.get("content-type"), h.head_len(), h.packed_body());
    }
});
