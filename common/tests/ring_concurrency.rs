//! The log ring under concurrent writers and readers, through a real
//! memory-mapped segment: nothing torn, per-writer order kept, totals match,
//! and a slow reader reports overruns and resumes on whole records.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use common::log::ring::{Poll, Reader, MIN_RING};
use common::log::vsl::{Batch, Records, Side, Tag};
use common::segment::{Segment, SegmentWriter};

const WRITERS: u32 = 3;
const PER_WRITER: u32 = 20_000;

/// A transaction from writer `w`, sequence `seq`: each record carries both,
/// and a checksum record closes it, so a torn record cannot pass unnoticed.
fn tx(b: &mut Batch, w: u32, seq: u32) {
    b.clear();
    let vxid = w << 24 | seq;
    b.recf(Tag::Begin, Side::Client, vxid, format_args!("req {w} rxreq"));
    for i in 0..(seq % 7) {
        b.recf(Tag::ReqHeader, Side::Client, vxid, format_args!("X-W{w}: {seq}-{i}-{}", "x".repeat((seq % 50) as usize)));
    }
    b.recf(Tag::ReqAcct, Side::Client, vxid, format_args!("{w} {seq} {}", w ^ seq));
    b.rec(Tag::End, Side::Client, vxid, b"");
}

/// Check one record against the encoding above; returns (writer, seq) at End.
fn check(rec: &common::log::vsl::Record<'_>) -> Option<(u32, u32)> {
    let (w, seq) = (rec.vxid >> 24, rec.vxid & 0xff_ffff);
    assert!(w < WRITERS, "bad writer in vxid {}", rec.vxid);
    let text = rec.text();
    match rec.tag {
        Tag::Begin => assert_eq!(text, format!("req {w} rxreq")),
        Tag::ReqHeader => assert!(text.starts_with(&format!("X-W{w}: {seq}-")), "{text}"),
        Tag::ReqAcct => assert_eq!(text, format!("{w} {seq} {}", w ^ seq)),
        Tag::End => return Some((w, seq)),
        t => panic!("unexpected tag {t:?}"),
    }
    None
}

/// Run `n` writer threads, each appending PER_WRITER transactions.
fn run_writers(seg: &SegmentWriter, n: u32) {
    thread::scope(|s| {
        for w in 0..n {
            s.spawn(move || {
                let mut b = Batch::new();
                for seq in 0..PER_WRITER {
                    tx(&mut b, w, seq);
                    seg.log(&b);
                }
            });
        }
    });
}

#[test]
fn concurrent_writers_and_a_reader_that_keeps_up() {
    let dir = tempfile::tempdir().unwrap();
    // Large enough that a reader polling in a loop is never lapped.
    let seg = SegmentWriter::create(dir.path(), 64 << 20).unwrap();
    let reader_seg = Segment::open(dir.path()).unwrap();
    let done = &AtomicBool::new(false);
    // Positioned before any writer starts, so it sees every record.
    let mut r = Reader::at_tail(reader_seg.ring());
    thread::scope(|s| {
        let reader = s.spawn(move || {
            let mut next = [0u32; WRITERS as usize];
            let mut total = 0u64;
            loop {
                let finished = done.load(Ordering::Acquire);
                match r.poll() {
                    Poll::Records(buf) => {
                        let mut it = Records::new(buf);
                        for rec in it.by_ref() {
                            if let Some((w, seq)) = check(&rec) {
                                assert_eq!(seq, next[w as usize], "writer {w} out of order");
                                next[w as usize] += 1;
                                total += 1;
                            }
                        }
                        assert!(it.error().is_none(), "{:?}", it.error());
                    }
                    Poll::Overrun { lost } => panic!("reader overrun ({lost} bytes) with a 64 MiB ring"),
                    Poll::Idle if finished => break,
                    Poll::Idle => thread::yield_now(),
                }
            }
            (total, next)
        });
        run_writers(&seg, WRITERS);
        done.store(true, Ordering::Release);
        let (total, next) = reader.join().unwrap();
        assert_eq!(total, (WRITERS * PER_WRITER) as u64);
        assert_eq!(next, [PER_WRITER; WRITERS as usize]);
    });
    assert_eq!(seg.get(common::counters::C::ShmWrites), (WRITERS * PER_WRITER) as u64);
}

#[test]
fn a_slow_reader_reports_overruns_and_resumes_on_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    let seg = SegmentWriter::create(dir.path(), MIN_RING).unwrap();
    let reader_seg = Segment::open(dir.path()).unwrap();
    let done = &AtomicBool::new(false);
    let mut r = Reader::at_tail(reader_seg.ring());
    thread::scope(|s| {
        let reader = s.spawn(move || {
            let (mut overruns, mut records, mut last) = (0u32, 0u64, [None::<u32>; WRITERS as usize]);
            loop {
                let finished = done.load(Ordering::Acquire);
                match r.poll() {
                    Poll::Records(buf) => {
                        let mut it = Records::new(buf);
                        for rec in it.by_ref() {
                            records += 1;
                            if let Some((w, seq)) = check(&rec) {
                                // Order holds even across overruns.
                                if let Some(prev) = last[w as usize] {
                                    assert!(seq > prev, "writer {w}: {seq} after {prev}");
                                }
                                last[w as usize] = Some(seq);
                            }
                        }
                        assert!(it.error().is_none(), "{:?}", it.error());
                        // Deliberately slow.
                        thread::sleep(Duration::from_millis(2));
                    }
                    Poll::Overrun { lost } => {
                        assert!(lost > 0);
                        overruns += 1;
                    }
                    Poll::Idle if finished => break,
                    // Nothing new only for a moment (a writer preempted with
                    // the ring's lock held): a millisecond's nap here let
                    // the writers of a release build lap the ring every
                    // time, and the reader never resumed on records.
                    Poll::Idle => thread::sleep(Duration::from_micros(20)),
                }
            }
            (overruns, records)
        });
        run_writers(&seg, 2);
        done.store(true, Ordering::Release);
        let (overruns, records) = reader.join().unwrap();
        assert!(overruns > 0, "a 2 ms-per-poll reader on a 64 KiB ring must be lapped");
        assert!(records > 0, "it resumes and reads records after overruns");
    });
}
