//! Object bodies that stream: the fetch appends chunks while any number of
//! deliveries read them, each at its own pace, waiting only when caught up.

use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::watch;

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
    chunks: Mutex<Vec<Bytes>>,
    progress: watch::Sender<Progress>,
    /// The length announced by the backend (Content-Length), if any.
    pub expected: Option<u64>,
}

impl Body {
    pub fn new(expected: Option<u64>) -> Body {
        let (tx, _) = watch::channel(Progress { len: 0, done: Done::Streaming });
        Body { chunks: Mutex::new(Vec::new()), progress: tx, expected }
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

    fn chunks(&self) -> std::sync::MutexGuard<'_, Vec<Bytes>> {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, data: Bytes) {
        let n = data.len() as u64;
        self.chunks().push(data);
        self.progress.send_modify(|p| p.len += n);
    }

    pub fn finish(&self) {
        self.progress.send_modify(|p| p.done = Done::Complete);
    }

    pub fn fail(&self) {
        self.progress.send_modify(|p| {
            if p.done == Done::Streaming {
                p.done = Done::Failed
            }
        });
    }

    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
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
        BodyReader { body: self, idx: 0, rx: self.progress.subscribe() }
    }
}

/// One delivery's position in a body.
pub struct BodyReader<'a> {
    body: &'a Body,
    idx: usize,
    rx: watch::Receiver<Progress>,
}

impl BodyReader<'_> {
    /// The next chunk if one is there now: Some(Ok(Some(chunk))), the end
    /// (Some(Ok(None))), a failure (Some(Err)), or None when it would wait.
    pub fn try_next(&mut self) -> Option<Result<Option<Bytes>, ()>> {
        let p = *self.rx.borrow_and_update();
        {
            let chunks = self.body.chunks();
            if self.idx < chunks.len() {
                self.idx += 1;
                return Some(Ok(Some(chunks[self.idx - 1].clone())));
            }
        }
        match p.done {
            Done::Complete => Some(Ok(None)),
            Done::Failed => Some(Err(())),
            Done::Streaming => None,
        }
    }

    /// The next chunk; Ok(None) at the end; Err if the fetch failed.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ()> {
        loop {
            // State first, chunks second: a chunk pushed in between is seen
            // below, and a push after the check wakes `changed`.
            let p = *self.rx.borrow_and_update();
            {
                let chunks = self.body.chunks();
                if self.idx < chunks.len() {
                    self.idx += 1;
                    return Ok(Some(chunks[self.idx - 1].clone()));
                }
            }
            match p.done {
                Done::Complete => return Ok(None),
                Done::Failed => return Err(()),
                Done::Streaming => {
                    if self.rx.changed().await.is_err() {
                        return Err(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
