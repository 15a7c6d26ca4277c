//! The floor of CPU per request on this machine: the least an HTTP/1.1
//! server can do per keep-alive hit, for `scripts/bench-cpu.sh` to print
//! beside cache-d and varnishd (issue 37).
//!
//! One thread, one edge-triggered epoll set, non-blocking sockets: per
//! wake-up it reads what each ready connection sent (`recv` until it would
//! block), counts the complete requests (each ends with an empty line), and
//! answers each with one `writev` of a fixed header block and a body kept in
//! memory. No parsing, no policy, no log, no counters, no timeouts, no
//! allocation per request: what is left is the kernel's share of a hit (the
//! wake-up, the read, the write and its loopback delivery) plus a few
//! hundred instructions. A server that does the same syscalls per request
//! cannot cost less than this.
//!
//! `floor PORT SIZE threads` is the other shape, varnishd's: a thread per
//! connection with blocking sockets, each `writev` sleeping in the kernel
//! until the whole answer is queued.
//!
//! Usage: `floor PORT SIZE [epoll|threads]` (listens on 127.0.0.1:PORT,
//! answers every request with SIZE bytes; prints nothing, runs until
//! killed). `FLOOR_SNDBUF=N` sets SO_SNDBUF on the epoll shape's
//! connections (no autotuning of the send buffer), to measure what the
//! kernel's buffer size costs large answers on loopback.

use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

/// A header block of the size cache-d's hits carry (Date, Age, Via,
/// X-Varnish, Accept-Ranges, Connection: the same ~260 bytes), so the
/// floor writes as many bytes as the servers it is compared with.
fn header(size: usize) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nDate: Fri, 04 Dec 2026 08:00:00 GMT\r\nServer: floor\r\nContent-Type: application/octet-stream\r\n\
         Cache-Control: max-age=3600\r\nLast-Modified: Fri, 04 Dec 2026 07:00:00 GMT\r\nContent-Length: {size}\r\n\
         X-Varnish: 32770 3\r\nAge: 12\r\nVia: 1.1 floor (cachekit)\r\nAccept-Ranges: bytes\r\nConnection: keep-alive\r\n\r\n"
    )
    .into_bytes()
}

/// One connection: the tail of a request not yet complete, and what is
/// still to write of the answers (offset into the response stream).
#[derive(Default)]
struct Conn {
    /// The last 3 bytes seen, to find a request's end across reads.
    tail: [u8; 3],
    /// Answers owed but not yet written in full.
    owed: usize,
    /// Bytes of the first owed answer already written.
    sent: usize,
}

/// Requests ended in `bytes` (each by an empty line), `tail` carrying the
/// last 3 bytes seen across reads.
fn ends(tail: &mut [u8; 3], bytes: &[u8]) -> usize {
    let mut n = 0;
    for &b in bytes {
        if b == b'\n' && *tail == *b"\r\n\r" {
            n += 1;
        }
        *tail = [tail[1], tail[2], b];
    }
    n
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let port = args.get(1).and_then(|a| a.parse::<u16>().ok());
    let size = args.get(2).and_then(|a| a.parse::<usize>().ok());
    let (Some(port), Some(size), mode @ ("epoll" | "threads")) = (port, size, args.get(3).map_or("epoll", String::as_str)) else {
        eprintln!("usage: floor PORT SIZE [epoll|threads]");
        std::process::exit(2);
    };
    let head = header(size);
    let body = vec![b'x'; size];
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    if mode == "threads" {
        return threads(listener, head, body);
    }
    listener.set_nonblocking(true)?;
    // SAFETY: plain epoll syscalls on descriptors this process owns; the
    // event array outlives every call that fills it.
    let ep = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    add(ep, listener.as_raw_fd(), libc::EPOLLIN as u32)?;
    let mut conns: HashMap<RawFd, Conn> = HashMap::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut buf = vec![0u8; 64 * 1024];
    let sndbuf = std::env::var("FLOOR_SNDBUF").ok().and_then(|v| v.parse::<libc::c_int>().ok());
    loop {
        let n = match check(unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1) }) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for ev in &events[..n] {
            let fd = ev.u64 as RawFd;
            if fd == listener.as_raw_fd() {
                while let Ok((s, _)) = listener.accept() {
                    s.set_nonblocking(true)?;
                    s.set_nodelay(true)?;
                    if let Some(n) = sndbuf {
                        // SAFETY: setsockopt with a c_int it reads.
                        unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, (&n as *const libc::c_int).cast(), 4) };
                    }
                    let fd = s.into_raw_fd();
                    add(ep, fd, (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLET) as u32)?;
                    conns.insert(fd, Conn::default());
                }
                continue;
            }
            let Some(c) = conns.get_mut(&fd) else { continue };
            if !serve(fd, c, &mut buf, &head, &body) {
                conns.remove(&fd);
                // SAFETY: fd came from into_raw_fd and is closed once.
                unsafe { libc::close(fd) };
            }
        }
    }
}

fn add(ep: RawFd, fd: RawFd, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: fd as u64 };
    // SAFETY: ev lives across the call.
    check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
}

/// Reads what the connection sent, counts the requests it ended, and writes
/// the answers owed; false when the peer closed or the socket failed.
fn serve(fd: RawFd, c: &mut Conn, buf: &mut [u8], head: &[u8], body: &[u8]) -> bool {
    loop {
        // SAFETY: buf is valid for buf.len() bytes.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if r == 0 {
            return false;
        }
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
                break;
            }
            return false;
        }
        c.owed += ends(&mut c.tail, &buf[..r as usize]);
    }
    let whole = head.len() + body.len();
    while c.owed > 0 {
        let (h, b) = if c.sent < head.len() { (&head[c.sent..], body) } else { (&head[..0], &body[c.sent - head.len()..]) };
        let iov = [
            libc::iovec { iov_base: h.as_ptr() as *mut _, iov_len: h.len() },
            libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: b.len() },
        ];
        // SAFETY: both iovecs point into slices alive across the call.
        let w = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
        if w < 0 {
            return io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock;
        }
        c.sent += w as usize;
        if c.sent == whole {
            c.sent = 0;
            c.owed -= 1;
        }
    }
    true
}

/// A thread per connection, blocking reads and writes (varnishd's shape).
fn threads(listener: TcpListener, head: Vec<u8>, body: Vec<u8>) -> io::Result<()> {
    let answer: std::sync::Arc<(Vec<u8>, Vec<u8>)> = std::sync::Arc::new((head, body));
    for s in listener.incoming() {
        let mut s = s?;
        s.set_nodelay(true)?;
        let answer = answer.clone();
        std::thread::spawn(move || {
            use std::io::{IoSlice, Read, Write};
            let mut buf = vec![0u8; 64 * 1024];
            let mut tail = [0u8; 3];
            while let Ok(n @ 1..) = s.read(&mut buf) {
                for _ in 0..ends(&mut tail, &buf[..n]) {
                    let (h, b) = (&answer.0[..], &answer.1[..]);
                    let mut sent = 0;
                    while sent < h.len() + b.len() {
                        let iov = if sent < h.len() {
                            [IoSlice::new(&h[sent..]), IoSlice::new(b)]
                        } else {
                            [IoSlice::new(&[]), IoSlice::new(&b[sent - h.len()..])]
                        };
                        match s.write_vectored(&iov) {
                            Ok(w) if w > 0 => sent += w,
                            _ => return,
                        }
                    }
                }
            }
        });
    }
    Ok(())
}
