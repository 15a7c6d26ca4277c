//! The segment's unit tests.

use super::*;
use crate::counters::{self, Kind, C};
use crate::instance;
use crate::log::ring;
use std::fs;

#[cfg(target_endian = "little")]
#[test]
fn golden_header() {
    let layout = Layout::new(3, ring::MIN_RING);
    assert_eq!(layout.names, 128);
    assert_eq!(layout.values, 128 + 3 * 256);
    assert_eq!(layout.stride, 64);
    assert_eq!(layout.log, 4096);
    let h = encode_header(&layout, 0x1234, 7, 0x0102_0304_0506);
    #[rustfmt::skip]
    let want: [u8; 104] = [
        b'C', b'K', b'I', b'T', b'S', b'E', b'G', 0,
        2, 0, 0, 0,  128, 0, 0, 0,          // version, header size
        0x34, 0x12, 0, 0,  0, 0, 0, 0,      // pid, state starting
        7, 0, 0, 0, 0, 0, 0, 0,             // generation
        6, 5, 4, 3, 2, 1, 0, 0,             // created ms
        6, 5, 4, 3, 2, 1, 0, 0,             // heartbeat ms
        128, 0, 0, 0, 0, 0, 0, 0,           // names offset
        3, 0, 0, 0,  16, 0, 0, 0,           // counters, shards
        0x80, 0x03, 0, 0, 0, 0, 0, 0,       // values offset 896
        64, 0, 0, 0, 0, 0, 0, 0,            // stride
        0, 0x10, 0, 0, 0, 0, 0, 0,          // log offset 4096
        0, 0x01, 0x01, 0, 0, 0, 0, 0,       // log length 256 + 65536
        0, 0x11, 0x01, 0, 0, 0, 0, 0,       // file length
    ];
    assert_eq!(&h[..104], &want[..]);
    assert!(h[104..].iter().all(|&b| b == 0));
}

#[test]
fn golden_name_entry() {
    let e = encode_name(C::ClientReq.def());
    assert_eq!(&e[..16], b"MAIN.client_req\0");
    assert_eq!(&e[128..132], &[b'c', 0, b'i', 0]);
    assert_eq!(&e[132..161], b"Good client requests received");
    assert_eq!(e[161], 0);
}

#[test]
fn writer_and_reader_agree() {
    let dir = tempfile::tempdir().unwrap();
    let w = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
    w.add(C::ClientReq, 5);
    std::thread::scope(|s| {
        s.spawn(|| w.add(C::ClientReq, 7));
    });
    w.set(C::MainUptime, 42);
    let r = Segment::open(dir.path()).unwrap();
    assert_eq!(r.value_of("MAIN.client_req"), Some(12));
    assert_eq!(r.value_of("MAIN.uptime"), Some(42));
    assert_eq!(r.counters().len(), counters::TABLE.len());
    assert_eq!(r.health(), Health::Running);
    assert_eq!(r.generation(), 1);
    // A child process attaches, writes; a new generation zeroes what
    // the child owns and keeps the rest.
    let child = SegmentWriter::attach(dir.path()).unwrap();
    child.add(C::ClientReq, 1);
    child.log(&{
        let mut b = crate::log::vsl::Batch::new();
        b.rec(crate::log::vsl::Tag::Cli, crate::log::vsl::Side::None, 0, b"Rd ping");
        b
    });
    assert_eq!(r.value_of("MAIN.client_req"), Some(13));
    assert_eq!(w.new_generation(|n| n.starts_with("MGT.")), 2);
    assert_eq!(r.generation(), 2);
    assert_eq!(r.value_of("MAIN.client_req"), Some(0));
    assert_eq!(r.ring().tail(), child.log_tail());
    assert!(w.is_current());
    w.close();
    assert_eq!(r.health(), Health::Stopped);
    assert!(matches!(Segment::open(dir.path()), Err(SegmentError::Stopped { .. })));
    // The next daemon takes the next generation.
    let w2 = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
    assert_eq!(w2.generation(), 3);
    assert!(!w.is_current());
    assert_eq!(r.health(), Health::Stopped);
}

#[test]
fn dynamic_counters_come_and_go() {
    let dir = tempfile::tempdir().unwrap();
    let w = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
    let mut r = Segment::open(dir.path()).unwrap();
    let n0 = r.counters().len();
    let def = counters::Vbe::Req.def();
    let a = w.register("VBE.boot.default.req", def).unwrap();
    w.add_slot(a, 3);
    assert!(r.refresh().unwrap());
    assert!(!r.refresh().unwrap(), "nothing changed since");
    assert_eq!(r.value_of("VBE.boot.default.req"), Some(3));
    let info = r.counters().last().unwrap();
    assert_eq!((info.kind, info.description.as_str()), (Kind::Counter, "Backend requests sent"));
    w.unregister(a);
    assert!(r.refresh().unwrap());
    assert_eq!((r.value_of("VBE.boot.default.req"), r.counters().len()), (None, n0));
    // A reused slot starts from 0.
    assert_eq!(w.register("VBE.v2.b.req", def), Some(a));
    r.refresh().unwrap();
    assert_eq!(r.value_of("VBE.v2.b.req"), Some(0));
    // Full: None, not a clobbered slot.
    let mut n = 1;
    while w.register(&format!("VBE.v.b{n}.req"), def).is_some() {
        n += 1;
    }
    assert_eq!(n, DYN_SLOTS);
    // A new child frees them all.
    w.new_generation(|_| false);
    r.refresh().unwrap();
    assert_eq!(r.counters().len(), n0);
    // A reader refreshing while names change never sees a torn one.
    std::thread::scope(|s| {
        let w = &w;
        s.spawn(move || {
            for i in 0..3000 {
                let slot = w.register(&format!("VBE.t.b{i}.req"), def).unwrap();
                if i % 3 != 0 {
                    w.unregister(slot);
                }
            }
        });
        for _ in 0..3000 {
            r.refresh().unwrap();
            for c in &r.counters()[n0..] {
                let ok = c.name.strip_prefix("VBE.t.b").and_then(|x| x.strip_suffix(".req")).is_some_and(|x| x.parse::<u32>().is_ok());
                assert!(ok && c.description == def.description, "torn: {c:?}");
            }
        }
    });
}

#[test]
fn garbage_files_are_refused_with_the_dir_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = instance::segment_path(dir.path());
    let name = dir.path().display().to_string();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "truncated"),
        (b"CKITSEG\0short".to_vec(), "truncated"),
        (vec![0x5a; 8192], "wrong magic"),
        (
            {
                let mut v = encode_header(&Layout::new(3, ring::MIN_RING), 1, 1, 1).to_vec();
                v.resize(4096, 0);
                v
            },
            "truncated",
        ),
    ];
    for (bytes, want) in cases {
        fs::write(&path, &bytes).unwrap();
        let err = Segment::open(dir.path()).err().expect("garbage must be refused").to_string();
        assert!(err.contains(want) && err.contains(&name), "{err}");
    }
    // Random bytes of a plausible size: refused, whatever they hold.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..200 {
        let len = (x % 20000) as usize;
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(x as u8);
        }
        if len > 8 {
            bytes[..8].copy_from_slice(&MAGIC);
        }
        fs::write(&path, &bytes).unwrap();
        assert!(Segment::open(dir.path()).is_err());
    }
}

/// Regression (issue 32): a segment cut under the running daemon killed it
/// with SIGBUS at its next counter update. The writer goes on in private
/// memory, and says the file was cut.
#[test]
fn a_writer_survives_its_segment_cut_under_it() {
    for keep in [4096, 0] {
        let dir = tempfile::tempdir().unwrap();
        let w = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
        let child = SegmentWriter::attach(dir.path()).unwrap();
        w.add(C::ClientReq, 2);
        assert_eq!(w.cut(), None);
        fs::OpenOptions::new().write(true).open(instance::segment_path(dir.path())).unwrap().set_len(keep).unwrap();
        // Every part of the mapping is touched again: the counters, the
        // log, the names, the header.
        for seg in [&w, &child] {
            seg.add(C::ClientReq, 1);
            seg.log(&{
                let mut b = crate::log::vsl::Batch::new();
                b.rec(crate::log::vsl::Tag::Cli, crate::log::vsl::Side::None, 0, b"Rd ping");
                b
            });
            let slot = seg.register("VBE.boot.default.req", counters::Vbe::Req.def()).unwrap();
            seg.add_slot(slot, 1);
            seg.heartbeat();
            assert_eq!(seg.cut(), Some(keep));
        }
        assert!(w.get(C::ClientReq) >= 1);
        w.new_generation(|_| false);
        w.close();
    }
}
