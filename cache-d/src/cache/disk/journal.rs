//! The bans journal of a persistent store (`<store>.bans`): every ban
//! made while the store is open, with its time, so the bans issued
//! before a stop still apply to the objects read back after it. One
//! record per ban: `len u32 | crc u32 | time f64 | args joined by NUL`;
//! a torn last record (a crash mid-append) is ignored.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
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
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| format!("storage {}: cannot open the bans journal: {e}", path.display()))?;
        Ok(Journal { path: path.to_path_buf(), file: Mutex::new(file) })
    }

    /// Every ban in the journal, oldest first.
    pub fn read(&self) -> Vec<Entry> {
        let mut b = Vec::new();
        let _ = File::open(&self.path).and_then(|mut f| f.read_to_end(&mut b));
        decode(&b)
    }

    /// Add a ban (written before the ban command answers).
    pub fn append(&self, e: &Entry) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = f.write_all(&encode(e));
    }

    /// Keep only `keep` (a new file put in place in one rename).
    pub fn rewrite(&self, keep: &[Entry]) -> std::io::Result<()> {
        let tmp = self.path.with_extension("bans.new");
        let mut out = File::create(&tmp)?;
        for e in keep {
            out.write_all(&encode(e))?;
        }
        out.sync_all()?;
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        std::fs::rename(&tmp, &self.path)?;
        *f = OpenOptions::new().append(true).open(&self.path)?;
        Ok(())
    }
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
