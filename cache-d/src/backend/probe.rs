//! Health probes: a thread per probed backend sends the probe request every
//! `.interval`, keeps the last 64 results, and calls the backend healthy
//! while at least `.threshold` of the last `.window` were good. Every probe
//! logs a `Backend_health` record in Varnish's layout; `backend.list -p`
//! shows the history.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::log::vsl::{Batch, Side, Tag};
use common::segment::SegmentWriter;

use crate::backend::health::{Outcome, ProbeSpec, ProbeState};
use crate::backend::pool::{Admin, Backend};

/// A probe's connection, plain or TLS.
/// A probe's connection: plain TCP, a Unix socket, or TLS over TCP.
trait ReadWrite: Read + Write {
    /// How long the next read may wait.
    fn read_timeout(&self, d: Duration);
}
impl ReadWrite for TcpStream {
    fn read_timeout(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
    }
}
impl ReadWrite for std::os::unix::net::UnixStream {
    fn read_timeout(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
    }
}
impl ReadWrite for rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    fn read_timeout(&self, d: Duration) {
        let _ = self.sock.set_read_timeout(Some(d));
    }
}

/// Send one probe; the outcome, the time it took and the response line.
pub fn probe_once(be: &Backend, spec: &ProbeSpec) -> (Outcome, f64, String) {
    let start = Instant::now();
    let mut out = Outcome::default();
    let left = |start: Instant| spec.timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
    // A backend on a Unix socket (.path) is probed over it, in plain HTTP.
    if let Some(path) = &be.cfg.path {
        let s = match std::os::unix::net::UnixStream::connect(path) {
            Ok(s) => s,
            Err(e) => return (out, start.elapsed().as_secs_f64(), e.to_string()),
        };
        out.connected = true;
        let _ = s.set_write_timeout(Some(left(start)));
        let _ = s.set_read_timeout(Some(left(start)));
        if let Err(e) = preamble(be, &mut &s) {
            return (out, start.elapsed().as_secs_f64(), e);
        }
        // Varnish's default Host for a socket backend.
        let host = be.cfg.host_header.clone().unwrap_or_else(|| "0.0.0.0".into());
        return exchange(Box::new(s), spec, &host, out, start);
    }
    let Some(addr) = be.addrs.first() else { return (out, 0.0, "no address".into()) };
    let tcp = match TcpStream::connect_timeout(addr, spec.timeout) {
        Ok(s) => s,
        Err(e) => return (out, start.elapsed().as_secs_f64(), e.to_string()),
    };
    out.connected = true;
    // One deadline for the handshake, the request and the answer.
    let _ = tcp.set_write_timeout(Some(left(start)));
    let _ = tcp.set_read_timeout(Some(left(start)));
    if let Err(e) = preamble(be, &mut &tcp) {
        return (out, start.elapsed().as_secs_f64(), e);
    }
    // .ssl = 1: the probe speaks TLS as the fetches do (the handshake
    // happens with the first write).
    let s: Box<dyn ReadWrite> = match &be.cfg.ssl {
        None => Box::new(tcp),
        Some(tls) => match rustls::ClientConnection::new(tls.config.clone(), tls.name.clone()) {
            Ok(c) => Box::new(rustls::StreamOwned::new(c, tcp)),
            Err(e) => return (out, start.elapsed().as_secs_f64(), format!("TLS: {e}")),
        },
    };
    let host = be.cfg.host_header.clone().unwrap_or_else(|| addr.to_string());
    exchange(s, spec, &host, out, start)
}

/// The backend's .preamble first on the new connection (before TLS), as
/// on every connection Varnish opens to it.
fn preamble(be: &Backend, s: &mut impl Write) -> Result<(), String> {
    match &be.cfg.preamble {
        Some(p) => s.write_all(p).map_err(|e| format!("write failed: {e}")),
        None => Ok(()),
    }
}

/// Send the probe request on a connected `s`, read the status line.
fn exchange(mut s: Box<dyn ReadWrite>, spec: &ProbeSpec, host: &str, mut out: Outcome, start: Instant) -> (Outcome, f64, String) {
    let req = match &spec.request {
        Some(lines) => format!("{}\r\n\r\n", lines.join("\r\n")),
        None => format!("GET {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", spec.url),
    };
    if let Err(e) = s.write_all(req.as_bytes()).and_then(|()| s.flush()) {
        return (out, start.elapsed().as_secs_f64(), format!("write failed: {e}"));
    }
    out.sent = true;
    // As Varnish: the whole answer, to the backend's close, within the
    // timeout (its first 8 KiB kept); one that drips in slower fails.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let Some(left) = spec.timeout.checked_sub(start.elapsed()).filter(|d| !d.is_zero()) else {
            let over = start.elapsed().as_secs_f64() - spec.timeout.as_secs_f64();
            return (out, start.elapsed().as_secs_f64(), format!("Poll timeout {:.3}s exceeded by {over:.3}s", spec.timeout.as_secs_f64()));
        };
        s.read_timeout(left);
        match s.read(&mut chunk) {
            // A TLS backend that closes without close_notify ends it too.
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Ok(n) if buf.len() < 8192 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) => return (out, start.elapsed().as_secs_f64(), format!("Read error ({e})")),
        }
    }
    let line = String::from_utf8_lossy(&buf).lines().next().unwrap_or("").trim().to_string();
    let rtt = start.elapsed().as_secs_f64();
    if line.is_empty() {
        return (out, rtt, "no response".into());
    }
    out.received = true;
    // "HTTP/<version> <status>" as Varnish reads it; any other answer fails.
    let mut words = line.split_whitespace();
    let proto_ok = words.next().and_then(|p| p.strip_prefix("HTTP/")).is_some_and(|v| v.parse::<f64>().is_ok());
    let status = words.next().filter(|_| proto_ok).and_then(|c| c.parse::<u16>().ok());
    out.good = status == Some(spec.expected) && rtt <= spec.timeout.as_secs_f64();
    (out, rtt, line)
}

/// Make `be`'s `VBE.*` counters, and start probing it (if it has a
/// probe) until [`Backend::stop_probe`].
pub fn start(be: &Arc<Backend>, seg: Arc<SegmentWriter>) {
    be.attach_counters(&seg);
    let Some(spec) = be.cfg.probe.clone() else { return };
    be.set_happy(be.probe_state().good);
    let be = be.clone();
    let _ = std::thread::Builder::new().name(format!("probe-{}", be.name)).spawn(move || {
        while !be.probe_stopped() {
            let (outcome, rtt, line) = probe_once(&be, &spec);
            let (was, is, text) = {
                let mut st = be.probe_state();
                let (was, is) = st.record(&spec, outcome, rtt);
                let verb = match (was, is) {
                    (true, true) => "Still healthy",
                    (false, true) => "Back healthy",
                    (true, false) => "Went sick",
                    (false, false) => "Still sick",
                };
                let text = format!(
                    "{} {verb} {} {} {} {} {rtt:.6} {:.6} {line}",
                    be.full_name(),
                    st.flags(),
                    st.good_in(spec.window),
                    spec.threshold,
                    spec.window,
                    st.avg
                );
                (was, is, text)
            };
            if was != is {
                be.changed();
            }
            be.set_happy(be.probe_state().good);
            let mut b = Batch::new();
            b.rec(Tag::BackendHealth, Side::None, 0, text.as_bytes());
            seg.log(&b);
            // Sleep the interval, waking up to notice a stop.
            let until = Instant::now() + spec.interval;
            while Instant::now() < until && !be.probe_stopped() {
                std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
            }
        }
    });
}

/// `backend.list [-j] [-p]` for these backends.
/// A director's line in backend.list: Admin "probe", its healthy
/// members of all, healthy while one is (Varnish's vdir list).
pub struct DirectorRow {
    /// `vcl.name`.
    pub name: String,
    pub kind: &'static str,
    pub healthy: usize,
    pub total: usize,
    /// When a member's health last changed.
    pub since: f64,
}

impl DirectorRow {
    fn health(&self) -> &'static str {
        if self.healthy > 0 {
            "healthy"
        } else {
            "sick"
        }
    }
}

pub fn backend_list(list: &[Arc<Backend>], dirs: &[DirectorRow], json: bool, details: bool, argv: &[&str]) -> String {
    if json {
        let mut m = serde_json::Map::new();
        for b in list {
            let (admin, since) = b.admin();
            let (probe, health) = probe_column(b);
            let mut e = serde_json::json!({
                "type": "backend", "admin_health": admin_word(b, admin),
                "probe_message": [probe.0, probe.1, health], "last_change": since,
            });
            if let (true, Some(spec)) = (details, &b.cfg.probe) {
                let st = b.probe_state().clone();
                e["probe_details"] = serde_json::json!({
                    "bits_4": st.ipv4, "bits_X": st.xmit, "bits_R": st.recv, "bits_H": st.good,
                    "good": st.good_in(spec.window), "threshold": spec.threshold, "window": spec.window,
                });
            }
            m.insert(b.full_name(), e);
        }
        for d in dirs.iter().filter(|_| !details) {
            let e = serde_json::json!({
                "type": d.kind, "admin_health": "probe",
                "probe_message": [d.healthy, d.total, d.health()], "last_change": d.since,
            });
            m.insert(d.name.clone(), e);
        }
        let doc = serde_json::json!([3, argv, (crate::util::now() * 1000.0).round() / 1000.0, m]);
        return serde_json::to_string_pretty(&doc).unwrap_or_default();
    }
    let mut out = String::from("Backend name                   Admin      Probe    Health     Last change");
    for b in list {
        let (admin, since) = b.admin();
        let (probe, health) = probe_column(b);
        let when = common::httpdate::format(since);
        out.push_str(&format!(
            "\n{:<30} {:<10} {:<8} {health:<10} {when}",
            b.full_name(),
            admin_word(b, admin),
            format!("{}/{}", probe.0, probe.1)
        ));
        if let (true, Some(spec)) = (details, &b.cfg.probe) {
            let st = b.probe_state().clone();
            out.push_str(&format!(
                "\n Current states  good: {:2} threshold: {:2} window: {:2}\n  Average response time of good probes: {:.6}\n  Oldest ================================================== Newest",
                st.good_in(spec.window),
                spec.threshold,
                spec.window,
                st.avg
            ));
            let n = st.probes.min(64) as u32;
            for (bits, c, label) in
                [(st.ipv4, '4', "Good IPv4"), (st.xmit, 'X', "Good Xmit"), (st.recv, 'R', "Good Recv"), (st.good, 'H', "Happy")]
            {
                let row: String = (0..64u32).rev().map(|i| if i < n && bits >> i & 1 == 1 { c } else { '-' }).collect();
                out.push_str(&format!("\n  {row} {label}"));
            }
        }
    }
    // With -p a director shows nothing of its own (Varnish lists it plainly).
    for d in dirs.iter().filter(|_| !details) {
        let (when, counts) = (common::httpdate::format(d.since), format!("{}/{}", d.healthy, d.total));
        out.push_str(&format!("\n{:<30} {:<10} {counts:<8} {:<10} {when}", d.name, "probe", d.health()));
    }
    out
}

/// The Admin column: a forced state, else "probe" for a backend with a
/// probe and "healthy" for one without (Varnish's VDI_Ahealth).
fn admin_word(b: &Backend, admin: Admin) -> &'static str {
    match admin {
        Admin::Auto if b.cfg.probe.is_none() => "healthy",
        a => a.word(),
    }
}

/// (good, window) and the health word: the probe's view, whatever
/// backend.set_health forced (a backend without a probe is healthy).
fn probe_column(b: &Backend) -> ((u32, u32), &'static str) {
    let (probe, happy) = match &b.cfg.probe {
        Some(spec) => {
            let st = b.probe_state();
            ((st.good_in(spec.window), spec.window), st.happy)
        }
        None => ((0, 0), true),
    };
    (probe, if happy { "healthy" } else { "sick" })
}

impl Backend {
    /// The probe's view (meaningful with a probe).
    pub fn probe_state(&self) -> std::sync::MutexGuard<'_, ProbeState> {
        self.probe.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Stop the probe thread (the program was discarded).
    pub fn stop_probe(&self) {
        self.probe_stop.store(true, Ordering::SeqCst);
    }
    fn probe_stopped(&self) -> bool {
        self.probe_stop.load(Ordering::SeqCst)
    }
    /// Healthy by the admin state, else by the probe (none: healthy).
    pub fn healthy(&self) -> bool {
        match self.admin().0 {
            Admin::Healthy => true,
            Admin::Sick => false,
            Admin::Auto => self.cfg.probe.is_none() || self.probe_state().happy,
        }
    }
    /// Seconds since the health last changed (a shard director's rampup);
    /// infinite for a backend healthy since it was made.
    pub fn healthy_for(&self) -> f64 {
        let changed = self.admin().1;
        if changed <= self.created {
            return f64::INFINITY;
        }
        (crate::util::now() - changed).max(0.0)
    }
}
