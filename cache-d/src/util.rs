//! Small helpers: wall-clock seconds for log timestamps, a transaction's
//! Timestamp records, HTTP dates, the host name used in Via, a Host
//! value's name without its port, and an int socket option.

use std::time::{SystemTime, UNIX_EPOCH};

use common::log::vsl::{Batch, Side as LogSide, Tag};

/// Seconds since the epoch, as Varnish's timestamps show them. Read
/// straight from the clock (a hit reads it about ten times; SystemTime's
/// general subtraction was most of each read's cost).
pub fn now() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 {
        return SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

pub use common::httpdate::format as http_date;

/// setsockopt of an int-valued option (`level`, `opt`) on `fd`; whether
/// the kernel took it.
pub fn set_int_sockopt(fd: std::os::fd::RawFd, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: the kernel reads one c_int, passed with its size.
    unsafe {
        libc::setsockopt(fd, level, opt, (&value as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) == 0
    }
}

/// This machine's host name, for Via.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cachekit".to_string())
}

/// `host[:port]` or `[v6]:port` without the port (a Host header's or a
/// backend's name, for SNI and for name lookups).
pub fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

/// Seconds with six decimals, as `{:.6}` prints them, for the log's hot
/// records (Timestamp, Hit, ReqStart): integer formatting instead of the
/// float formatter, which showed in profiles of hits. Values that do not
/// fit (not finite, 10^12 s or more) fall back to `{:.6}`.
pub struct Secs(pub f64);

impl Secs {
    /// Six decimals, as Varnish prints times: digits made in a stack
    /// buffer (every transaction prints a dozen of these; the formatter's
    /// padding machinery showed in hit profiles). None when the value
    /// does not fit (not finite, 10^12 s or more).
    fn digits(&self, buf: &mut [u8; 24]) -> Option<usize> {
        let x = self.0;
        if !x.is_finite() || x.abs() >= 1e12 {
            return None;
        }
        // + 0.5 and truncation: round() is a libm call, and showed in
        // hit profiles (x is finite and below 1e12 here, so the sum is
        // exact to the microsecond).
        let us = (x.abs() * 1e6 + 0.5) as u64;
        let mut at = buf.len();
        let (whole, mut frac) = (us / 1_000_000, us % 1_000_000);
        for _ in 0..3 {
            at = common::log::vsl::pair_before(buf, at, (frac % 100) as usize);
            frac /= 100;
        }
        at -= 1;
        buf[at] = b'.';
        at = common::log::vsl::digits_before(buf, at, whole);
        if x.is_sign_negative() {
            at -= 1;
            buf[at] = b'-';
        }
        Some(at)
    }

    /// Append the value as Display prints it, without core::fmt.
    pub fn put(&self, out: &mut Vec<u8>) {
        let mut buf = [0u8; 24];
        match self.digits(&mut buf) {
            Some(at) => out.extend_from_slice(&buf[at..]),
            None => out.extend_from_slice(format!("{:.6}", self.0).as_bytes()),
        }
    }
}

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut buf = [0u8; 24];
        match self.digits(&mut buf) {
            // Digits, a dot and a sign: ASCII.
            Some(at) => f.write_str(std::str::from_utf8(&buf[at..]).unwrap_or_default()),
            None => write!(f, "{:.6}", self.0),
        }
    }
}

/// A transaction's timestamps, client or backend side: each `Timestamp`
/// record gives the time, the time since the start and since the last.
pub struct Clock {
    side: LogSide,
    start: f64,
    last: f64,
}

impl Clock {
    /// A transaction starts at `t`: its `Start` record.
    pub fn start(log: &mut Batch, side: LogSide, vxid: u32, t: f64) -> Clock {
        let mut c = Clock { side, start: t, last: t };
        c.record(log, vxid, "Start", t);
        c
    }

    /// A restarted transaction's first timestamp: Start at the time of the
    /// last one (times stay relative to the request's first start).
    pub fn restart(&mut self, log: &mut Batch, vxid: u32) {
        let t = self.last;
        self.record(log, vxid, "Start", t);
    }

    pub fn stamp(&mut self, log: &mut Batch, vxid: u32, label: &str) {
        self.record(log, vxid, label, now());
    }

    /// A timestamp for an event that happened at `t` (not now).
    pub fn stamp_at(&mut self, log: &mut Batch, vxid: u32, label: &str, t: f64) {
        self.record(log, vxid, label, t);
    }

    fn record(&mut self, log: &mut Batch, vxid: u32, label: &str, t: f64) {
        let (start, last) = (self.start, self.last);
        log.rec_with(Tag::Timestamp, self.side, vxid, |o| {
            o.extend_from_slice(label.as_bytes());
            o.extend_from_slice(b": ");
            Secs(t).put(o);
            o.push(b' ');
            Secs(t - start).put(o);
            o.push(b' ');
            Secs(t - last).put(o);
        });
        self.last = t;
    }
}

/// A body read whole, refusing to grow past `cap`.
pub struct Capped {
    pub v: Vec<u8>,
    pub cap: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.v.len() + buf.len() > this.cap {
            return std::task::Poll::Ready(Err(std::io::Error::other("body too large to read whole")));
        }
        this.v.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::{host_name, Secs};

    #[test]
    fn names_lose_their_ports() {
        assert_eq!(host_name("example.com:8443"), "example.com");
        assert_eq!(host_name("example.com"), "example.com");
        assert_eq!(host_name("[::1]:443"), "::1");
        assert_eq!(host_name("::1"), "::1");
        assert_eq!(host_name("10.0.0.1:80"), "10.0.0.1");
    }

    #[test]
    fn now_is_the_system_clock() {
        use super::now;
        use std::time::{SystemTime, UNIX_EPOCH};
        let a = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        let t = now();
        let b = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(a <= t + 1e-6 && t <= b + 1e-6, "{a} {t} {b}");
    }

    #[test]
    fn secs_print_as_six_decimals_do() {
        for x in [0.0, 1.5, 0.000001, 0.0000004, 12.3456789, 1796136670.937534, 1796136670.9375344, -3.25, -0.5, 59.9999996, 1e13] {
            assert_eq!(Secs(x).to_string(), format!("{x:.6}"), "{x}");
            let mut v = Vec::new();
            Secs(x).put(&mut v);
            assert_eq!(v, format!("{x:.6}").into_bytes(), "{x}");
        }
        assert_eq!(Secs(f64::INFINITY).to_string(), "inf");
    }
}
