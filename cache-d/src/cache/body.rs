//! Object bodies that stream: the fetch appends chunks while any number of
//! deliveries read them, each at its own pace, waiting only when caught up.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;

use bytes::Bytes;
use tokio::sync::Notify;

/// Where a body stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    Streaming,
    Complete,
    /// The fetch failed: readers must not end their response cleanly.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub len: u64,
    pub done: Done,
}

pub struct Body {
    /// The chunks while the body streams in, and its readers.
    live: Mutex<Live>,
    /// The chunks once the body is complete, moved out of `live` (and
    /// sized to fit): hits read them without taking the lock. Never set
    /// for a body in transit that let chunks go.
    whole: OnceLock<Box<[Bytes]>>,
    len: AtomicU64,
    /// 0 streaming, 1 complete, 2 failed.
    done: AtomicU8,
    /// Wakes readers waiting for more (a small Notify, not a watch
    /// channel: every cached object has one).
    more: Notify,
    /// The length announced by the backend (Content-Length), if any.
    pub expected: Option<u64>,
}

/// A streaming body's chunks and where its readers are.
#[derive(Default)]
struct Live {
    /// The chunks from index `base` on.
    v: Vec<Bytes>,
    /// Chunks let go from the front (a body in transit).
    base: usize,
    /// Bytes in `v`.
    kept: u64,
    /// Each reader's next chunk index; `usize::MAX` a free slot.
    readers: Vec<usize>,
    /// In transit: chunks every reader has passed go, and the fetch is
    /// held (`room`) while more than this many bytes are kept.
    window: Option<u64>,
    /// A reader came, and all have gone since: nobody will read more.
    abandoned: bool,
    /// The fetch waiting for room.
    room: Option<Waker>,
}

impl Live {
    /// Let go of the chunks every reader has passed (in transit), and
    /// wake the fetch if there is room now.
    fn trim(&mut self) {
        let Some(window) = self.window else { return };
        let lowest = self.readers.iter().copied().filter(|&i| i != usize::MAX).min();
        if let Some(lowest) = lowest {
            let n = lowest.saturating_sub(self.base).min(self.v.len());
            if n > 0 {
                self.kept -= self.v.drain(..n).map(|b| b.len() as u64).sum::<u64>();
                self.base += n;
            }
        }
        if self.kept <= window || self.abandoned {
            if let Some(w) = self.room.take() {
                w.wake();
            }
        }
    }
}

/// What a fetch into a body in transit may do now.
pub enum Room {
    /// Push more.
    Yes,
    /// Wait: the waker is woken when a reader moves on or leaves.
    Wait,
    /// Every reader left: stop.
    Abandoned,
}

impl Body {
    pub fn new(expected: Option<u64>) -> Body {
        Body {
            live: Mutex::new(Live::default()),
            whole: OnceLock::new(),
            len: AtomicU64::new(0),
            done: AtomicU8::new(0),
            more: Notify::new(),
            expected,
        }
    }

    /// A body that is already whole.
    pub fn whole(data: Bytes) -> Body {
        let b = Body::new(Some(data.len() as u64));
        if !data.is_empty() {
            b.push(data);
        }
        b.finish();
        b
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, data: Bytes) {
        let n = data.len() as u64;
        {
            let mut l = self.live();
            l.kept += n;
            l.v.push(data);
        }
        self.len.fetch_add(n, Ordering::Release);
        self.more.notify_waiters();
    }

    /// Put the body in transit (Varnish's transit buffer): it is not
    /// kept (an uncacheable object, or one its store cannot hold), so
    /// the chunks its readers have passed go, and a fetch that asks
    /// [`room`](Self::room) is held while more than `window` bytes are
    /// kept (the slowest reader sets the pace). A reader that starts
    /// after chunks went fails (its response is cut, never wrong).
    pub fn set_transit(&self, window: u64) {
        let mut l = self.live();
        l.window = Some(window);
        l.trim();
    }

    /// In transit: may the fetch push more? Always yes otherwise.
    pub fn room(&self, waker: &Waker) -> Room {
        let mut l = self.live();
        match l.window {
            None => Room::Yes,
            Some(_) if l.abandoned => Room::Abandoned,
            Some(w) if l.kept <= w => Room::Yes,
            Some(_) => {
                l.room = Some(waker.clone());
                Room::Wait
            }
        }
    }

    pub fn finish(&self) {
        {
            // Under the lock, so a reader sees either the chunks in the
            // lock or the complete state with `whole` set.
            let mut l = self.live();
            if self.done.load(Ordering::Acquire) == 0 {
                if l.base == 0 && l.window.is_none() {
                    let _ = self.whole.set(std::mem::take(&mut l.v).into_boxed_slice());
                    l.kept = 0;
                }
                self.done.store(1, Ordering::Release);
            }
        }
        self.more.notify_waiters();
    }

    pub fn fail(&self) {
        {
            let _l = self.live();
            let _ = self.done.compare_exchange(0, 2, Ordering::AcqRel, Ordering::Acquire);
        }
        self.more.notify_waiters();
    }

    fn state(&self) -> Done {
        match self.done.load(Ordering::Acquire) {
            0 => Done::Streaming,
            1 => Done::Complete,
            _ => Done::Failed,
        }
    }

    pub fn progress(&self) -> Progress {
        let done = self.state();
        Progress { len: self.len.load(Ordering::Acquire), done }
    }

    /// The chunks pushed so far (copies of the handles); of a body in
    /// transit, those still kept.
    pub fn chunks_now(&self) -> Vec<Bytes> {
        match self.whole.get() {
            Some(w) => w.to_vec(),
            None => self.live().v.clone(),
        }
    }

    /// The length once known: complete, or announced by the backend.
    pub fn known_len(&self) -> Option<u64> {
        let p = self.progress();
        match p.done {
            Done::Complete => Some(p.len),
            _ => self.expected,
        }
    }

    pub fn reader(&self) -> BodyReader<'_> {
        BodyReader { src: Src::Live(self), idx: 0, slot: None }
    }
}

/// A cached object's body: whole from the start (a body that was in
/// with the head, packed with it in one allocation; a synthetic page),
/// one that streams in while it is delivered, or a large one read from
/// a disk store block by block as it is sent.
#[derive(Clone)]
pub enum ObjBody {
    Whole(Bytes),
    Live(Arc<Body>),
    Blocks(Arc<dyn Blocks>),
}

/// A body read in blocks (each checked on its own) as a delivery asks
/// for them: a large disk object is never all in memory for one hit.
pub trait Blocks: Send + Sync {
    /// The body's length.
    fn body_len(&self) -> u64;
    fn count(&self) -> usize;
    /// Block `i` (blocking: called on the blocking pool); None when it
    /// cannot be read or fails its checksum.
    fn read(&self, i: usize) -> Option<Bytes>;
}

impl ObjBody {
    /// Every piece once the body is whole (waiting for one still
    /// streaming in); None if it fails.
    pub async fn pieces(&self) -> Option<Vec<Bytes>> {
        let mut reader = self.reader();
        let mut pieces = Vec::new();
        loop {
            match reader.next().await {
                Ok(Some(c)) => pieces.push(c),
                Ok(None) => return Some(pieces),
                Err(()) => return None,
            }
        }
    }

    pub fn progress(&self) -> Progress {
        match self {
            ObjBody::Whole(b) => Progress { len: b.len() as u64, done: Done::Complete },
            ObjBody::Live(b) => b.progress(),
            ObjBody::Blocks(b) => Progress { len: b.body_len(), done: Done::Complete },
        }
    }

    pub fn known_len(&self) -> Option<u64> {
        match self {
            ObjBody::Whole(b) => Some(b.len() as u64),
            ObjBody::Live(b) => b.known_len(),
            ObjBody::Blocks(b) => Some(b.body_len()),
        }
    }

    pub fn reader(&self) -> BodyReader<'_> {
        match self {
            ObjBody::Whole(b) => BodyReader { src: Src::Whole(b), idx: 0, slot: None },
            ObjBody::Live(b) => b.reader(),
            ObjBody::Blocks(b) => BodyReader { src: Src::Blocks(b), idx: 0, slot: None },
        }
    }
}

/// One delivery's position in a body.
pub struct BodyReader<'a> {
    src: Src<'a>,
    idx: usize,
    /// Its place among a streaming body's readers, taken at its first
    /// read of a body not yet whole (a body in transit keeps what the
    /// slowest of them has not read).
    slot: Option<usize>,
}

impl Drop for BodyReader<'_> {
    fn drop(&mut self) {
        let (Src::Live(body), Some(slot)) = (&self.src, self.slot) else { return };
        let mut l = body.live();
        if let Some(i) = l.readers.get_mut(slot) {
            *i = usize::MAX;
        }
        if l.window.is_some() {
            l.abandoned = l.readers.iter().all(|&i| i == usize::MAX);
            l.trim();
        }
    }
}

enum Src<'a> {
    Whole(&'a Bytes),
    Live(&'a Body),
    Blocks(&'a Arc<dyn Blocks>),
}

impl BodyReader<'_> {
    /// The next chunk if one is there now: Some(Ok(Some(chunk))), the end
    /// (Some(Ok(None))), a failure (Some(Err)), or None when it would wait.
    pub fn try_next(&mut self) -> Option<Result<Option<Bytes>, ()>> {
        let body = match self.src {
            Src::Whole(b) => {
                self.idx += 1;
                return Some(Ok((self.idx == 1 && !b.is_empty()).then(|| b.clone())));
            }
            // Nothing is there without a read: next() reads.
            Src::Blocks(b) if self.idx < b.count() => return None,
            Src::Blocks(_) => return Some(Ok(None)),
            Src::Live(body) => body,
        };
        // A complete body is read without the lock.
        if let Some(whole) = body.whole.get() {
            self.idx += 1;
            return Some(Ok(whole.get(self.idx - 1).cloned()));
        }
        let mut l = body.live();
        // Looked at under the lock: `finish` moves the chunks out under
        // it, so Complete here with `whole` set means they are there.
        let done = body.state();
        if done == Done::Complete && body.whole.get().is_some() {
            drop(l);
            return self.try_next();
        }
        let slot = match self.slot {
            Some(s) => s,
            None => {
                let s = match l.readers.iter().position(|&i| i == usize::MAX) {
                    Some(s) => s,
                    None => {
                        l.readers.push(usize::MAX);
                        l.readers.len() - 1
                    }
                };
                self.slot = Some(s);
                s
            }
        };
        if self.idx < l.base {
            // In transit, and what this reader needs went before it came.
            return Some(Err(()));
        }
        let at = self.idx - l.base;
        let next = l.v.get(at).cloned();
        if next.is_some() {
            self.idx += 1;
        }
        l.readers[slot] = self.idx;
        if next.is_some() {
            l.trim();
            return Some(Ok(next));
        }
        match done {
            Done::Failed => Some(Err(())),
            Done::Complete => Some(Ok(None)),
            Done::Streaming => None,
        }
    }

    /// The next chunk; Ok(None) at the end; Err if the fetch failed.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ()> {
        let body = match self.src {
            Src::Whole(_) => return self.try_next().unwrap_or(Ok(None)),
            Src::Blocks(b) if self.idx < b.count() => {
                let (src, i) = (b.clone(), self.idx);
                self.idx += 1;
                return match tokio::task::spawn_blocking(move || src.read(i)).await {
                    Ok(Some(block)) => Ok(Some(block)),
                    _ => Err(()),
                };
            }
            Src::Blocks(_) => return Ok(None),
            Src::Live(body) => body,
        };
        loop {
            // Register for a wake-up before looking, so a push between the
            // look and the wait is not missed.
            let notified = body.more.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.try_next() {
                return r;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readers_follow_a_streaming_body() {
        let b = Arc::new(Body::new(None));
        let b2 = b.clone();
        let reader = tokio::spawn(async move {
            let mut r = b2.reader();
            let mut got = Vec::new();
            while let Ok(Some(c)) = r.next().await {
                got.extend_from_slice(&c);
            }
            got
        });
        for i in 0..50u8 {
            b.push(Bytes::from(vec![i; 10]));
            tokio::task::yield_now().await;
        }
        b.finish();
        let got = reader.await.unwrap();
        assert_eq!(got.len(), 500);
        assert_eq!(b.known_len(), Some(500));
        // A late reader gets everything at once.
        let mut r = b.reader();
        let mut n = 0;
        while let Ok(Some(c)) = r.next().await {
            n += c.len();
        }
        assert_eq!(n, 500);
    }

    #[tokio::test]
    async fn a_body_in_transit_keeps_only_what_its_slowest_reader_has_not_read() {
        let b = Body::new(None);
        b.set_transit(20);
        let waker = futures_util::task::noop_waker();
        let mut r = b.reader();
        for i in 0..3u8 {
            b.push(Bytes::from(vec![i; 10]));
        }
        // 30 bytes kept, none read: the fetch waits.
        assert!(matches!(b.room(&waker), Room::Wait));
        assert_eq!(r.next().await, Ok(Some(Bytes::from(vec![0u8; 10]))));
        assert_eq!(r.next().await, Ok(Some(Bytes::from(vec![1u8; 10]))));
        // What the reader passed is gone: room again.
        assert!(matches!(b.room(&waker), Room::Yes));
        assert_eq!(b.chunks_now().len(), 1);
        // A reader that comes now cannot have the start: it fails.
        assert_eq!(b.reader().next().await, Err(()));
        b.finish();
        assert_eq!(r.next().await, Ok(Some(Bytes::from(vec![2u8; 10]))));
        assert_eq!(r.next().await, Ok(None));
        // Its last reader gone, a fetch still going would stop.
        drop(r);
        assert!(matches!(b.room(&waker), Room::Abandoned));
    }

    #[tokio::test]
    async fn failure_reaches_readers() {
        let b = Body::new(Some(100));
        b.push(Bytes::from_static(b"abc"));
        b.fail();
        let mut r = b.reader();
        assert_eq!(r.next().await, Ok(Some(Bytes::from_static(b"abc"))));
        assert_eq!(r.next().await, Err(()));
        assert_eq!(b.known_len(), Some(100));
    }
}
