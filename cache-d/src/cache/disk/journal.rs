//! The bans journal of a persistent store (`<store>.bans`): every ban
//! made while the store is open, with its time, so the bans issued
//! before a stop still apply to the objects read back after it. One
//! record per ban: `len u32 | crc u32 | time f64 | args joined by NUL`;
//! a torn last record (a crash mid-append) is ignored. Opened as the
//! store is (`super::file::open_file`: no symlink followed, 0600, refused when
//! others own or can write it): a ban names URLs and headers.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub struct Journal {
    path: PathBuf,
    file: Mutex<File>,
}

/// A ban as the journal keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub time: f64,
    pub args: Vec<String>,
}

pub fn path_of(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".bans");
    PathBuf::from(p)
}

fn encode(e: &Entry) -> Vec<u8> {
    let text = e.args.join("\0");
    let mut body = e.time.to_le_bytes().to_vec();
    body.extend_from_slice(text.as_bytes());
    let mut b = (body.len() as u32).to_le_bytes().to_vec();
    b.extend_from_slice(&super::record::checksum(&body).to_le_bytes());
    b.extend_from_slice(&body);
    b
}

/// The entries in `b`, up to the first damaged or torn one.
pub fn decode(mut b: &[u8]) -> Vec<Entry> {
    let mut out = Vec::new();
    while b.len() >= 16 {
        let len = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
        let crc = u32::from_le_bytes(b[4..8].try_into().expect("4"));
        let Some(body) = b.get(8..8 + len).filter(|body| len >= 8 && super::record::checksum(body) == crc) else { break };
        let time = f64::from_le_bytes(body[..8].try_into().expect("8"));
        let Ok(text) = std::str::from_utf8(&body[8..]) else { break };
        out.push(Entry { time, args: text.split('\0').map(str::to_string).collect() });
        b = &b[8 + len..];
    }
    out
}

impl Journal {
    pub fn open(path: &Path) -> Result<Journal, String> {
        let file = super::file::open_file(path, OpenOptions::new().read(true).append(true).create(true))?;
        Ok(Journal { path: path.to_path_buf(), file: Mutex::new(file) })
    }

    /// Every ban in the journal, oldest first (read through the file it
    /// holds, not its name).
    pub fn read(&self) -> Vec<Entry> {
        let f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let mut b = vec![0u8; len as usize];
        let n = read_upto(&f, &mut b);
        b.truncate(n);
        decode(&b)
    }

    /// Add a ban (written before the ban command answers).
    pub fn append(&self, e: &Entry) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = f.write_all(&encode(e));
    }

    /// Keep only `keep` (a new file put in place in one rename).
    pub fn rewrite(&self, keep: &[Entry]) -> std::io::Result<()> {
        // A fresh file (never one planted in its place), 0600 as the
        // journal, renamed over it.
        let tmp = self.path.with_extension("bans.new");
        let _ = std::fs::remove_file(&tmp);
        let mut out = OpenOptions::new().read(true).append(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        for e in keep {
            out.write_all(&encode(e))?;
        }
        out.sync_all()?;
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        std::fs::rename(&tmp, &self.path)?;
        *f = out;
        Ok(())
    }
}

/// Read from the start of `f` into `b` until it is full or the file ends.
fn read_upto(f: &File, b: &mut [u8]) -> usize {
    let mut n = 0;
    while n < b.len() {
        match f.read_at(&mut b[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bans_come_back_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("s.bans")).unwrap();
        let a = Entry { time: 10.5, args: vec!["req.url".into(), "~".into(), "^/a".into()] };
        let b = Entry { time: 11.0, args: vec!["obj.http.x".into(), "==".into(), "y z".into()] };
        j.append(&a);
        j.append(&b);
        assert_eq!(j.read(), vec![a.clone(), b.clone()]);
        // A torn append: the ones before stay.
        let mut raw = std::fs::read(dir.path().join("s.bans")).unwrap();
        raw.extend_from_slice(&encode(&a)[..10]);
        std::fs::write(dir.path().join("s.bans"), &raw).unwrap();
        assert_eq!(j.read(), vec![a.clone(), b.clone()]);
        j.rewrite(std::slice::from_ref(&b)).unwrap();
        j.append(&a);
        assert_eq!(j.read(), vec![b, a]);
    }
}
