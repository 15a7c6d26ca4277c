//! What a listener that serves each connection on a thread of its own
//! bounds: how many connections it holds at once ([`Slots`]), how long an
//! exchange may take — a deadline for the whole of it, not per read: a peer
//! that sends one byte just before each read timeout would otherwise hold a
//! thread forever ([`Deadlined`]) — and what one line may cost
//! ([`read_line`]). Used by the admin socket, cache-stat's /metrics and the
//! cache-bench agent.

use std::io::{BufRead, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// At most `max` connections at once: each holds a [`Slot`] until it is
/// dropped (also when the thread meant to serve it could not start).
#[derive(Clone, Debug)]
pub struct Slots {
    live: Arc<AtomicUsize>,
    max: usize,
}

/// One connection's place among its listener's [`Slots`].
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Slots {
    pub fn new(max: usize) -> Slots {
        Slots { live: Arc::new(AtomicUsize::new(0)), max }
    }

    /// A place for one more connection, or None when all are taken.
    pub fn take(&self) -> Option<Slot> {
        if self.live.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(self.live.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When reads must be done by; shared, so whoever owns the protocol can
/// move or lift it while a buffered reader owns the socket.
#[derive(Clone, Debug, Default)]
pub struct Deadline(Arc<Mutex<Option<Instant>>>);

impl Deadline {
    pub fn at(t: Option<Instant>) -> Deadline {
        Deadline(Arc::new(Mutex::new(t)))
    }
    pub fn in_(d: Duration) -> Deadline {
        Deadline::at(Some(Instant::now() + d))
    }
    pub fn set(&self, t: Option<Instant>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = t;
    }
    pub fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A socket read within a [`Deadline`]; with none set, each read may wait
/// `idle` (None: as long as it takes).
pub struct Deadlined {
    s: TcpStream,
    deadline: Deadline,
    idle: Option<Duration>,
}

impl Deadlined {
    pub fn new(s: TcpStream, deadline: Deadline, idle: Option<Duration>) -> Deadlined {
        Deadlined { s, deadline, idle }
    }
    pub fn get_ref(&self) -> &TcpStream {
        &self.s
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let wait = match self.deadline.get() {
            Some(t) => {
                let left = t.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
                Some(left.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "deadline passed"))?)
            }
            None => self.idle,
        };
        self.s.set_read_timeout(wait)?;
        self.s.read(buf)
    }
}

/// Read one line of at most `max` bytes (its `\n` included) into `line`;
/// Ok(0) at EOF, an InvalidData error for a longer line (nothing more of it
/// is read).
pub fn read_line<R: BufRead + ?Sized>(r: &mut R, max: usize, line: &mut Vec<u8>) -> std::io::Result<usize> {
    line.clear();
    let n = std::io::Read::take(r, max as u64).read_until(b'\n', line)?;
    if n == max && line.last() != Some(&b'\n') {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a line longer than {max} bytes")));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Write};

    #[test]
    fn slots_are_given_back_when_dropped() {
        let slots = Slots::new(2);
        let (a, b) = (slots.take().unwrap(), slots.take().unwrap());
        assert!(slots.take().is_none());
        drop(a);
        let c = slots.take().unwrap();
        assert!(slots.take().is_none());
        drop((b, c));
        assert!(slots.take().is_some());
    }

    #[test]
    fn lines_are_bounded() {
        let mut line = Vec::new();
        let mut r = &b"short\nxxxxxxxxxxxxxxxxxxxx\n"[..];
        assert_eq!(read_line(&mut r, 10, &mut line).unwrap(), 6);
        assert!(read_line(&mut r, 10, &mut line).is_err());
        assert_eq!(read_line(&mut &b""[..], 10, &mut line).unwrap(), 0);
    }

    #[test]
    fn a_dribbling_peer_meets_the_deadline() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            for _ in 0..100 {
                if c.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (s, _) = l.accept().unwrap();
        let d = Deadline::in_(Duration::from_millis(500));
        let mut r = BufReader::new(Deadlined::new(s, d.clone(), Some(Duration::from_secs(60))));
        let t0 = Instant::now();
        let mut line = Vec::new();
        assert!(read_line(&mut r, 1 << 20, &mut line).is_err());
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        d.set(None);
    }
}
