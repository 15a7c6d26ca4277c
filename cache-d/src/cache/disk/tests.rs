//! The log on a real file: records written, read back at open, the ring
//! wrapping, and damage found.

use super::*;
use crate::cache::key::Key;
use crate::cache::object::Kind;
use crate::cache::ttl::Life;

const SIZE: u64 = HEADER + 16 * (64 << 10);

fn rec(i: u64, body: &[u8]) -> Rec {
    Rec {
        key: Key(i, i * 3),
        life: Life { t_origin: 100.0, ttl: 1e9, grace: 0.0, keep: 0.0 },
        t_insert: 100.0,
        vxid: i as u32,
        status: 200,
        kind: Kind::Normal,
        gzip: false,
        gzip_info: None,
        body_off: 0,
        body_len: body.len() as u64,
        body_crc: record::checksum(body),
        vary: None,
        head: Bytes::from(format!("head {i}")),
    }
}

/// Write object `i` with `body`; the objects its segment pushed out
/// (here only counted: no index).
fn put(d: &Disk, i: u64, body: &[u8]) -> Option<Loc> {
    let mut r = rec(i, body);
    let len = r.encode(0).len() as u64;
    let (mut loc, _) = d.reserve(len, body.len() as u64)?;
    r.body_off = loc.body_off;
    loc.body_crc = r.body_crc;
    let bytes = r.encode(loc.seq);
    d.send(Job::Write {
        body_off: loc.body_off,
        body: vec![Bytes::copy_from_slice(body)],
        rec_off: loc.rec_off,
        rec: bytes,
        done: Box::new(|_| {}),
    });
    Some(loc)
}

#[test]
fn objects_written_come_back_at_open_with_their_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let (d, found) = Disk::open("p", dir.path(), SIZE, true, false).unwrap();
    assert!(found.is_empty());
    assert_eq!(d.path, dir.path().join("p.store"));
    let mut locs = Vec::new();
    for i in 0..40 {
        locs.push(put(&d, i, &vec![i as u8; 3000 + i as usize]).unwrap());
    }
    // Too large for a segment: refused.
    assert!(put(&d, 99, &vec![0; 70 << 10]).is_none());
    d.flush(std::time::Duration::from_secs(5));
    drop(d);
    let (d, found) = Disk::open("p", dir.path(), SIZE, true, false).unwrap();
    assert_eq!(found.len(), 40);
    for (i, r) in found.iter().enumerate() {
        assert_eq!(r.rec.key, Key(i as u64, i as u64 * 3));
        assert_eq!(r.loc, locs[i]);
        assert_eq!(d.read(&r.loc).unwrap(), vec![i as u8; 3000 + i]);
        // From the page cache without waiting, where the kernel can.
        if let Some(got) = d.read_cached(&r.loc) {
            assert_eq!(got.unwrap(), vec![i as u8; 3000 + i]);
        }
    }
    // New writes go after the old ones.
    let next = put(&d, 40, b"x").unwrap();
    assert!(next.seq >= locs[39].seq);
    assert!(!locs.iter().any(|l| l.rec_off == next.rec_off || l.body_off == next.body_off));
}

#[test]
fn the_ring_wraps_and_only_the_newest_generations_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w");
    let (d, _) = Disk::open("w", &path, SIZE, true, false).unwrap();
    // 16 segments of 64 KiB: 20 KiB objects, three a segment; 200 of them
    // go round the ring four times.
    for i in 0..200 {
        put(&d, i, &vec![7; 20 << 10]).unwrap();
    }
    d.flush(std::time::Duration::from_secs(5));
    drop(d);
    let (_, found) = Disk::open("w", &path, SIZE, true, false).unwrap();
    let keys: Vec<u64> = found.iter().map(|r| r.rec.key.0).collect();
    assert!(keys.len() >= 40 && keys.len() <= 48, "{}", keys.len());
    assert_eq!(*keys.last().unwrap(), 199);
    assert!(keys.windows(2).all(|w| w[0] + 1 == w[1]), "oldest first, none missing: {keys:?}");
}

#[test]
fn damage_drops_what_it_touches_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let (d, _) = Disk::open("c", &path, SIZE, true, false).unwrap();
    let a = put(&d, 1, &[1; 5000]).unwrap();
    let b = put(&d, 2, &[2; 5000]).unwrap();
    d.flush(std::time::Duration::from_secs(5));
    drop(d);
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    // A body byte flipped: its read fails the checksum.
    f.write_all_at(&[0xff], a.body_off + 100).unwrap();
    let (d, found) = Disk::open("c", &path, SIZE, true, false).unwrap();
    assert_eq!(found.len(), 2);
    assert!(matches!(d.read(&found[0].loc), Err(None)));
    assert!(matches!(d.read_cached(&found[0].loc), None | Some(Err(None))));
    assert_eq!(d.read(&found[1].loc).unwrap()[0], 2);
    drop(d);
    // The second record damaged: it is gone, the first stays.
    f.write_all_at(&[0xff], b.rec_off + 60).unwrap();
    let (_, found) = Disk::open("c", &path, SIZE, true, false).unwrap();
    assert_eq!(found.len(), 1);
}

#[test]
fn other_versions_and_sizes_are_refused_or_wiped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v");
    let (d, _) = Disk::open("v", &path, SIZE, true, false).unwrap();
    put(&d, 1, b"body").unwrap();
    d.flush(std::time::Duration::from_secs(5));
    drop(d);
    let e = Disk::open("v", &path, SIZE * 2, true, false).err().unwrap();
    assert!(e.contains("made with size") && e.contains(",wipe"), "{e}");
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&9u32.to_le_bytes(), 16).unwrap();
    let e = Disk::open("v", &path, SIZE, true, false).err().unwrap();
    assert!(e.contains("checksum") || e.contains("version"), "{e}");
    let (_, found) = Disk::open("v", &path, SIZE, true, true).unwrap();
    assert!(found.is_empty());
    // A file store never reads back.
    std::fs::write(dir.path().join("junk"), b"not a store").unwrap();
    assert!(Disk::open("j", &dir.path().join("junk"), SIZE, true, false).err().unwrap().contains("not a cachekit store"));
    let (_, found) = Disk::open("j", &dir.path().join("junk"), SIZE, false, false).unwrap();
    assert!(found.is_empty());
}
