//! Log files (`cache-log -w` / `-r`): the bytes `VSL\0`, then records in the
//! same encoding as the ring ([`crate::log::vsl`]) — Varnish's own file format,
//! so `varnishlog -r` reads our files and we read its.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use crate::log::group::Group;
use crate::log::vsl::{Batch, Record, Records, RECLEN_MAX};

/// The four bytes a log file starts with.
pub const FILE_ID: [u8; 4] = *b"VSL\0";

/// Open `path` for writing records: a new file gets the file id; with
/// `append`, an existing non-empty file is appended to (after checking that
/// it is a log file).
pub fn create(path: &Path, append: bool) -> Result<BufWriter<File>, String> {
    let what = |e: std::io::Error| format!("{}: {e}", path.display());
    let existing = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if append && existing > 0 {
        let mut head = [0u8; 4];
        File::open(path).and_then(|mut f| f.read_exact(&mut head)).map_err(what)?;
        if head != FILE_ID {
            return Err(format!("{}: not a log file (written by cache-log -w or varnishlog -w); not appending", path.display()));
        }
        return OpenOptions::new().append(true).open(path).map(|f| BufWriter::with_capacity(1 << 16, f)).map_err(what);
    }
    let mut w = File::create(path).map(|f| BufWriter::with_capacity(1 << 16, f)).map_err(what)?;
    w.write_all(&FILE_ID).map_err(what)?;
    Ok(w)
}

/// Append a group's records, in order, to `out`.
pub fn write_group(out: &mut (impl Write + ?Sized), g: &Group) -> std::io::Result<()> {
    let mut b = Batch::with_reclen(RECLEN_MAX);
    for (_, tx) in &g.txs {
        for r in &tx.records {
            b.rec(r.tag, r.side, r.vxid, &r.payload);
        }
    }
    out.write_all(b.as_bytes())
}

/// Read a log file, calling `each` for every record in order. A file that is
/// cut short ends at its last whole record; anything else malformed is an
/// error naming the file and the offset.
pub fn read(path: &Path, mut each: impl FnMut(&Record<'_>) -> bool) -> Result<(), String> {
    let what = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f: Box<dyn Read> = if path == Path::new("-") { Box::new(std::io::stdin()) } else { Box::new(File::open(path).map_err(what)?) };
    let mut head = [0u8; 4];
    if f.read_exact(&mut head).is_err() || head != FILE_ID {
        return Err(format!(
            "{}: not a log file (it should start with \"VSL\\0\", as cache-log -w and varnishlog -w write)",
            path.display()
        ));
    }
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 1 << 20];
    let mut offset = 4u64;
    loop {
        let n = f.read(&mut chunk).map_err(what)?;
        buf.extend_from_slice(&chunk[..n]);
        let mut recs = Records::new(&buf);
        for r in recs.by_ref() {
            if !each(&r) {
                return Ok(());
            }
        }
        let used = recs.position();
        match recs.error() {
            // An incomplete record: wait for more bytes (or the end).
            None | Some(crate::log::vsl::DecodeError::Short(_)) | Some(crate::log::vsl::DecodeError::Overlong { .. }) => {}
            Some(e) => return Err(format!("{}: bad record at byte {}: {e}", path.display(), offset + used as u64)),
        }
        offset += used as u64;
        buf.drain(..used);
        if n == 0 {
            return Ok(());
        }
    }
}

/// Read a log file as groups (what `follow_groups` does for the live
/// log); transactions the file leaves incomplete come out at its end.
pub fn read_groups<W: Write + ?Sized>(
    path: &Path,
    mut grouper: crate::log::group::Grouper,
    out: &mut W,
    mut emit: impl FnMut(&mut W, &Group) -> std::io::Result<()>,
) -> Result<(), String> {
    let mut groups = Vec::new();
    let mut io_err: Option<std::io::Error> = None;
    let now = std::time::Instant::now();
    let mut send = |groups: &mut Vec<Group>, out: &mut W| {
        for g in groups.drain(..) {
            emit(out, &g)?;
        }
        Ok(())
    };
    read(path, |r| {
        if crate::log::follow::STOP_REQUESTED.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        grouper.feed(r, now, &mut groups);
        match send(&mut groups, out) {
            Ok(()) => true,
            Err(e) => {
                io_err = Some(e);
                false
            }
        }
    })?;
    if io_err.is_none() {
        grouper.flush(&mut groups);
        if let Err(e) = send(&mut groups, out) {
            io_err = Some(e);
        }
    }
    match io_err {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("writing output: {e}")),
        _ => out
            .flush()
            .or_else(|e| if e.kind() == std::io::ErrorKind::BrokenPipe { Ok(()) } else { Err(e) })
            .map_err(|e| format!("writing output: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::group::{OwnedRecord, Tx, TxKind};
    use crate::log::vsl::{Side, Tag};

    #[test]
    fn round_trip_append_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.vsl");
        let mut tx = Tx::detached(7, TxKind::Request);
        tx.records = vec![
            OwnedRecord { tag: Tag::Begin, side: Side::Client, vxid: 7, payload: b"req 1 rxreq".to_vec() },
            OwnedRecord { tag: Tag::ReqUrl, side: Side::Client, vxid: 7, payload: vec![b'x'; 3000] },
            OwnedRecord { tag: Tag::End, side: Side::Client, vxid: 7, payload: Vec::new() },
        ];
        let g = Group { txs: vec![(1, tx)] };
        let mut w = create(&p, false).unwrap();
        write_group(&mut w, &g).unwrap();
        drop(w);
        let mut w = create(&p, true).unwrap();
        write_group(&mut w, &g).unwrap();
        drop(w);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..4], b"VSL\0");
        let mut seen = Vec::new();
        read(&p, |r| {
            seen.push((r.tag, r.vxid, r.payload.len()));
            true
        })
        .unwrap();
        assert_eq!(seen.len(), 6);
        assert_eq!(seen[1], (Tag::ReqUrl, 7, 3000), "long payloads survive (no 255-byte cut)");
        // Cut mid-record: the whole records before it are read.
        std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
        let mut n = 0;
        read(&p, |_| {
            n += 1;
            true
        })
        .unwrap();
        assert_eq!(n, 5);
        std::fs::write(&p, b"not a log").unwrap();
        assert!(read(&p, |_| true).unwrap_err().contains("not a log file"));
        assert!(create(&p, true).unwrap_err().contains("not appending"));
    }
}
