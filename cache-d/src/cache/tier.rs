//! The disk tier: objects of file and persistent stores written once
//! their bodies are complete, their bodies read back on a hit (on the
//! blocking pool, never on a request thread) and kept in the memory
//! tier while they are used, their records killed or given a new life as
//! the objects are removed or soft-purged, and a persistent store's
//! objects and bans read back at start.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use common::counters::{Stv as F, C};

use crate::cache::body::{Done, ObjBody};
use crate::cache::disk::journal::Entry;
use crate::cache::disk::record::{self, Rec};
use crate::cache::disk::{Job, Recovered};
use crate::cache::object::{DiskObj, Kind, ObjCore, ObjHeaders, ObjRef, Object, Start};
use crate::cache::{Cache, CacheInner};

/// What a record says of an object (its body's place filled in later).
fn rec_of(oc: &ObjRef, d: &DiskObj, body_len: u64, body_crc: u32) -> Rec {
    let coding = oc.obj.coding();
    Rec {
        key: oc.key,
        life: oc.obj.life(),
        t_insert: d.t_insert,
        vxid: oc.obj.vxid,
        status: oc.obj.status,
        kind: oc.obj.kind,
        gzip: coding.is_some_and(|k| k.gzip),
        gzip_info: coding.and_then(|k| k.info.get()).map(|i| (i.bits.start, i.bits.last, i.bits.stop, i.plain_len)),
        body_off: 0,
        body_len,
        body_crc,
        vary: oc.obj.vary().cloned(),
        head: oc.headers().into_bytes(),
    }
}

/// The gzip state a record brings back.
fn coding_of(rec: &Rec) -> Option<Box<crate::gzip::Coding>> {
    if !rec.gzip {
        return None;
    }
    let k = crate::gzip::Coding { gzip: true, ..Default::default() };
    if let Some((start, last, stop, plain_len)) = rec.gzip_info {
        let _ = k.info.set(crate::gzip::GzipInfo { bits: crate::gzip::bits::Bits { start, last, stop }, plain_len });
    }
    Some(Box::new(k))
}

/// The checksum a record keeps of a body: of the body itself, or for a
/// large one, of the table of its blocks' checksums, which is added to
/// the chunks to write after it.
fn checksums(chunks: &mut Vec<Bytes>, len: u64) -> u32 {
    if len <= record::BLOCK {
        let mut h = crc32fast::Hasher::new();
        chunks.iter().for_each(|b| h.update(b));
        return h.finalize();
    }
    let mut table = Vec::with_capacity(record::table_len(len) as usize);
    let (mut h, mut left) = (crc32fast::Hasher::new(), record::BLOCK as usize);
    for c in chunks.iter() {
        let mut c = &c[..];
        while !c.is_empty() {
            let n = left.min(c.len());
            h.update(&c[..n]);
            (c, left) = (&c[n..], left - n);
            if left == 0 {
                table.extend_from_slice(&std::mem::take(&mut h).finalize().to_le_bytes());
                left = record::BLOCK as usize;
            }
        }
    }
    if left < record::BLOCK as usize {
        table.extend_from_slice(&h.finalize().to_le_bytes());
    }
    let crc = record::checksum(&table);
    chunks.push(Bytes::from(table));
    crc
}

/// A large disk object's body as a hit sends it: block by block, each
/// checked as it is read; a damaged block ends the delivery (the client
/// gets a cut response, never a wrong one) and the object.
struct DiskBlocks {
    cache: Cache,
    oc: ObjRef,
    loc: crate::cache::disk::Loc,
    table: Vec<u32>,
}

impl crate::cache::body::Blocks for DiskBlocks {
    fn body_len(&self) -> u64 {
        self.loc.body_len
    }
    fn count(&self) -> usize {
        self.table.len()
    }
    fn read(&self, i: usize) -> Option<Bytes> {
        let s = self.cache.inner.stvs.get(self.oc.stv);
        match (s.disk.as_ref()?.read_block(&self.loc, i, *self.table.get(i)?), self.oc.is_dead()) {
            (Ok(b), _) => {
                s.count(F::CDiskReadBytes, b.len() as i64);
                Some(b)
            }
            // Its segment taken back meanwhile: not damage.
            (Err(_), true) => None,
            (Err(_), false) => {
                self.cache.inner.damaged(&self.oc);
                None
            }
        }
    }
}

impl Cache {
    /// Write a disk store's object once its body is complete: insert
    /// calls it, and the fetch again at its end for a body that streamed
    /// in. Nothing for other objects, or one already written.
    pub fn persist(&self, oc: &ObjRef) {
        let c = &self.inner;
        let Some(d) = oc.disk() else { return };
        if d.loc.get().is_some() || oc.is_dead() {
            return;
        }
        let chunks = match d.ram() {
            Some(ObjBody::Whole(b)) => vec![b],
            Some(ObjBody::Live(l)) if l.progress().done == Done::Complete => l.chunks_now(),
            _ => return,
        };
        let len: u64 = chunks.iter().map(|b| b.len() as u64).sum();
        let mut chunks = chunks;
        let crc = checksums(&mut chunks, len);
        let stv = c.stvs.get(oc.stv);
        let Some(disk) = &stv.disk else { return };
        let mut rec = rec_of(oc, d, len, crc);
        stv.count(F::CReq, 1);
        let Some((mut loc, gone)) = disk.reserve(rec.encode(0).len() as u64, len) else {
            // Larger than a segment: delivered, not kept.
            stv.count(F::CFail, 1);
            stv.count(F::CDiskWriteFail, 1);
            c.remove(oc);
            return;
        };
        // The segment taken back: its objects go (their records are
        // being written over, so they are not killed).
        for g in &gone {
            if c.remove_as(g, false) {
                c.count(C::NLruNuked, 1);
            }
        }
        (loc.body_crc, rec.body_off) = (crc, loc.body_off);
        let bytes = rec.encode(loc.seq);
        {
            // Under the store's lock, as free_disk reads it.
            let mut st = stv.store();
            if oc.is_dead() {
                return;
            }
            let _ = d.loc.set(loc);
            st.used += loc.bytes;
        }
        stv.allocated(loc.bytes);
        stv.count(F::GAlloc, 1);
        disk.track(&loc, oc.clone());
        let (weak, o) = (Arc::downgrade(&self.inner), oc.clone());
        let done = Box::new(move |ok| {
            if let Some(c) = weak.upgrade() {
                c.written(&o, ok);
            }
        });
        disk.send(Job::Write { body_off: loc.body_off, body: chunks, rec_off: loc.rec_off, rec: bytes, done });
    }

    /// A soft purge changed `oc`'s life: so does its record (a
    /// persistent store's).
    pub(super) fn record_life(&self, oc: &ObjRef) {
        let Some(loc) = oc.disk().and_then(|d| d.loc.get()) else { return };
        if let Some(disk) = self.inner.stvs.get(oc.stv).disk.as_ref().filter(|d| d.persistent) {
            disk.update(loc, Job::Life { rec_off: loc.rec_off, block: record::life_block(&oc.obj.life()) });
        }
    }

    /// Make a hit's body readable: Ok(None) when it is in memory already
    /// (or not a disk object), Ok(body) read from disk (and kept in the
    /// memory tier when there is one), Err when it cannot be read or
    /// fails its checksum (the object is then gone: look up again).
    pub async fn load(&self, oc: &ObjRef) -> Result<Option<ObjBody>, ()> {
        let Some(d) = oc.disk() else { return Ok(None) };
        if d.ram().is_some() {
            return Ok(None);
        }
        let Some(loc) = d.loc.get().copied() else { return Err(()) };
        // Its write queued a moment ago: wait for it (a second at most).
        for _ in 0..1000 {
            if d.written.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let s = self.inner.stvs.get(oc.stv);
        if loc.body_len > record::BLOCK {
            return self.load_blocks(oc, loc).await;
        }
        let read = match s.disk.as_ref().and_then(|disk| disk.read_cached(&loc)) {
            Some(r) => Ok(Some(r)),
            None => self.on_disk(oc.stv, move |disk| disk.read(&loc)).await,
        };
        match read {
            Ok(Some(Ok(b))) => {
                s.count(F::CDiskReads, 1);
                s.count(F::CDiskReadBytes, b.len() as i64);
                let body = ObjBody::Whole(b);
                self.keep(oc, d, &body);
                Ok(Some(body))
            }
            _ => {
                self.inner.damaged(oc);
                Err(())
            }
        }
    }

    /// The body of `oc` to deliver or to copy, held by the caller: the
    /// memory tier letting a disk object's copy go while it is sent (or
    /// while a 304 is awaited) cannot take it away. A disk object's body
    /// not in memory is read back; Err when it cannot be (the object is
    /// gone then).
    pub async fn held_body(&self, oc: &ObjRef) -> Result<ObjBody, ()> {
        let Some(d) = oc.disk() else { return Ok(oc.body()) };
        // A load that finds the copy back in memory (another request
        // read it meanwhile) answers None: take that copy, or read again
        // if it went in between.
        for _ in 0..3 {
            if let Some(b) = d.ram() {
                return Ok(b);
            }
            if let Some(b) = self.load(oc).await? {
                return Ok(b);
            }
        }
        Err(())
    }

    /// Run `f` on store `stv`'s disk on the blocking pool.
    async fn on_disk<T: Send + 'static>(
        &self,
        stv: u8,
        f: impl FnOnce(&crate::cache::disk::Disk) -> T + Send + 'static,
    ) -> Result<Option<T>, tokio::task::JoinError> {
        let c = self.inner.clone();
        tokio::task::spawn_blocking(move || c.stvs.get(stv).disk.as_ref().map(f)).await
    }

    /// A large body: its block table read and checked now, its blocks as
    /// they are sent (not kept in memory: the page cache keeps hot ones).
    async fn load_blocks(&self, oc: &ObjRef, loc: crate::cache::disk::Loc) -> Result<Option<ObjBody>, ()> {
        match self.on_disk(oc.stv, move |disk| disk.read_table(&loc)).await {
            Ok(Some(Ok(table))) => {
                self.inner.stvs.get(oc.stv).count(F::CDiskReads, 1);
                let blocks = DiskBlocks { cache: self.clone(), oc: oc.clone(), loc, table };
                Ok(Some(ObjBody::Blocks(Arc::new(blocks))))
            }
            _ => {
                self.inner.damaged(oc);
                Err(())
            }
        }
    }

    /// Keep a body read back in the memory tier (LRU with the rest).
    fn keep(&self, oc: &ObjRef, d: &DiskObj, body: &ObjBody) {
        let Some(t) = self.inner.stvs.tier else { return };
        {
            let mut ram = d.ram.lock().unwrap_or_else(|e| e.into_inner());
            if ram.is_some() || oc.is_dead() {
                return;
            }
            *ram = Some(body.clone());
        }
        self.inner.stvs.get(t).store().add_resident(oc);
        if !self.inner.charge(oc, body.progress().len) || oc.is_dead() {
            self.inner.release(oc);
        }
    }

    /// Put what a persistent store held back in the index, with the bans
    /// made after each object came in (oldest first, so a newer object
    /// replaces an older one under its key).
    pub(super) fn recover(&self, found: Vec<(u8, Recovered)>) {
        let c = &self.inner;
        let now = crate::util::now();
        let bans = self.restore_bans(&found);
        for (stv, Recovered { rec, loc }) in found {
            // (A head that passed its checksum and still does not read
            // is left out rather than trusted.)
            if rec.kind != Kind::Normal || rec.life.expires_at() <= now || !crate::cache::headers::valid(&rec.head) {
                continue;
            }
            let ban_id = bans.iter().rev().find(|(t, _)| *t <= rec.t_insert).map_or(1, |(_, id)| *id);
            let coding = coding_of(&rec);
            let rec = *rec;
            let obj = Object {
                vxid: rec.vxid,
                status: rec.status,
                headers: ObjHeaders::from_bytes(rec.head),
                body: ObjBody::Whole(Bytes::new()),
                life: rec.life,
                kind: rec.kind,
                vary: rec.vary,
                coding,
            };
            let (oc, _) = ObjRef::new(obj, Start { key: rec.key, ban_id, stored: true, stv, disk: Some(rec.t_insert) });
            let Some(d) = oc.disk() else { continue };
            d.set_ram(None);
            let _ = d.loc.set(loc);
            d.written.store(true, Ordering::Release);
            let s = c.stvs.get(stv);
            {
                let mut st = s.store();
                st.add(&oc, rec.life.expires_at());
                st.used += loc.bytes;
            }
            s.allocated(loc.bytes);
            s.count(F::GAlloc, 1);
            s.count(F::CRecovered, 1);
            if let Some(disk) = &s.disk {
                disk.track(&loc, oc.clone());
            }
            self.index(&oc);
        }
    }

    /// The bans of the persistent stores' journals, made again with their
    /// times (those older than every object found are dropped, and the
    /// journals rewritten without them): (time, ban id), oldest first.
    fn restore_bans(&self, found: &[(u8, Recovered)]) -> Vec<(f64, u64)> {
        let journals: Vec<_> = self.inner.stvs.all.iter().filter_map(|s| s.disk.as_ref()?.journal.as_ref()).collect();
        let mut entries: Vec<Entry> = Vec::new();
        for e in journals.iter().flat_map(|j| j.read()) {
            if !entries.contains(&e) {
                entries.push(e);
            }
        }
        entries.sort_by(|a, b| a.time.total_cmp(&b.time));
        let oldest = found.iter().map(|(_, r)| r.rec.t_insert).fold(f64::INFINITY, f64::min);
        entries.retain(|e| e.time >= oldest);
        for j in &journals {
            if let Err(e) = j.rewrite(&entries) {
                eprintln!("cache-d: cannot rewrite a bans journal: {e}");
            }
        }
        entries.iter().filter_map(|e| self.add_ban(&e.args, e.time, false, false).ok().map(|id| (e.time, id))).collect()
    }

    /// Write a ban to every persistent store's journal.
    pub(super) fn journal_ban(&self, args: &[String], time: f64) {
        for s in &self.inner.stvs.all {
            if let Some(j) = s.disk.as_ref().and_then(|d| d.journal.as_ref()) {
                j.append(&Entry { time, args: args.to_vec() });
            }
        }
    }

    /// Wait (a few seconds at most) until every disk store has written
    /// what is queued: before a clean stop.
    pub fn flush(&self) {
        for s in &self.inner.stvs.all {
            if let Some(d) = &s.disk {
                d.flush(std::time::Duration::from_secs(5));
            }
        }
    }
}

impl CacheInner {
    /// `oc` could not be read back whole: it leaves the cache, counted as
    /// damage unless it was gone already or its write never finished.
    fn damaged(&self, oc: &ObjRef) {
        if self.remove(oc) && oc.disk().is_some_and(|d| d.written.load(Ordering::Acquire)) {
            self.stvs.get(oc.stv).count(F::CCorrupt, 1);
        }
    }

    /// The writer is done with `oc`: readable from disk now, and without
    /// a memory tier (or room in it), its memory copy goes.
    fn written(&self, oc: &ObjRef, ok: bool) {
        let Some(d) = oc.disk() else { return };
        let stv = self.stvs.get(oc.stv);
        if !ok {
            stv.count(F::CDiskWriteFail, 1);
            self.remove(oc);
            return;
        }
        d.written.store(true, Ordering::Release);
        if self.stvs.tier.is_none() || oc.charged.load(Ordering::Acquire) == 0 {
            self.release(oc);
        }
        // Counted once the memory copy that goes has gone: a reader that
        // sees the count finds the object on disk only.
        stv.count(F::CDiskWrites, 1);
    }

    /// A disk object leaves its store: its place in the expiry heap, its
    /// bytes on disk, and (when `kill`) its record.
    pub(super) fn free_disk(&self, oc: &ObjCore, kill: bool) {
        let stv = self.stvs.get(oc.stv);
        let (gone, loc) = {
            let mut st = stv.store();
            let loc = oc.disk().and_then(|d| d.loc.get().copied());
            st.used = st.used.saturating_sub(loc.map_or(0, |l| l.bytes));
            (st.forget(oc), loc)
        };
        drop(gone);
        let (Some(loc), Some(disk)) = (loc, stv.disk.as_ref()) else { return };
        stv.freed(loc.bytes);
        stv.count(F::GAlloc, -1);
        if kill && disk.persistent {
            disk.update(&loc, Job::Kill { rec_off: loc.rec_off });
        }
        disk.tidy(loc.seg);
    }
}
