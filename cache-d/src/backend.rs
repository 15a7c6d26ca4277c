//! The backend: its address and a pool of idle keep-alive connections.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::error::{Error, Side};
use crate::http::BufConn;

pub type BeConn = BufConn<TcpStream>;

pub struct Backend {
    /// Name used in logs and counters (`default`, as for `-b` in varnishd).
    pub name: String,
    pub addrs: Vec<SocketAddr>,
    idle: Mutex<Vec<(BeConn, Instant)>>,
    /// Admin health (backend.set_health) and when it last changed.
    admin: Mutex<(Admin, f64)>,
}

/// `backend.set_health`: follow probes (auto), or force healthy or sick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admin {
    Auto,
    Healthy,
    Sick,
}

impl Admin {
    pub fn parse(s: &str) -> Option<Admin> {
        match s {
            "auto" => Some(Admin::Auto),
            "healthy" => Some(Admin::Healthy),
            "sick" => Some(Admin::Sick),
            _ => None,
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            Admin::Auto => "probe",
            Admin::Healthy => "healthy",
            Admin::Sick => "sick",
        }
    }
}

/// Resolve `-b host[:port]` (port 8080 by default).
pub fn resolve(spec: &str) -> Result<Vec<SocketAddr>, String> {
    let with_port = if spec.starts_with('[') {
        if spec.contains("]:") {
            spec.to_string()
        } else {
            format!("{spec}:8080")
        }
    } else if spec.matches(':').count() == 1 {
        spec.to_string()
    } else if spec.contains(':') {
        format!("[{spec}]:8080")
    } else {
        format!("{spec}:8080")
    };
    let addrs: Vec<SocketAddr> = with_port.to_socket_addrs().map_err(|e| format!("backend \"{spec}\": {e}"))?.collect();
    if addrs.is_empty() {
        return Err(format!("backend \"{spec}\" resolves to no address"));
    }
    Ok(addrs)
}

impl Backend {
    pub fn new(name: &str, addrs: Vec<SocketAddr>) -> Backend {
        Backend { name: name.to_string(), addrs, idle: Mutex::new(Vec::new()), admin: Mutex::new((Admin::Auto, crate::util::now())) }
    }

    /// Admin health and the time it last changed.
    pub fn admin(&self) -> (Admin, f64) {
        *self.admin.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_admin(&self, a: Admin) {
        *self.admin.lock().unwrap_or_else(|e| e.into_inner()) = (a, crate::util::now());
    }

    /// Healthy enough to send requests to? (No probes yet: auto is healthy.)
    pub fn healthy(&self) -> bool {
        self.admin().0 != Admin::Sick
    }

    /// An idle connection younger than `max_idle` that the backend has not
    /// closed (nor sent stray bytes on), if any.
    pub fn take_idle(&self, max_idle: Duration) -> Option<BeConn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((c, since)) = idle.pop() {
            if since.elapsed() >= max_idle {
                continue;
            }
            let mut probe = [0u8; 1];
            match c.io.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(c),
                _ => continue, // EOF, error, or unexpected data: drop it.
            }
        }
        None
    }

    /// Open a new connection within `timeout`, trying each address.
    pub async fn connect(&self, timeout: Duration) -> Result<BeConn, Error> {
        let mut last = None;
        for a in &self.addrs {
            match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(BufConn::new(s));
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")),
            }
        }
        Err(Error::io(Side::Backend, "connect", last.unwrap_or_else(|| std::io::Error::other("no address"))))
    }

    /// Return a connection whose last response was read completely.
    pub fn recycle(&self, c: BeConn) {
        if !c.buf.is_empty() {
            return; // Stray bytes after a response: not safe to reuse.
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push((c, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn backend_specs() {
        assert_eq!(resolve("127.0.0.1").unwrap()[0].port(), 8080);
        assert_eq!(resolve("127.0.0.1:81").unwrap()[0].port(), 81);
        assert_eq!(resolve("[::1]:82").unwrap()[0].port(), 82);
        assert_eq!(resolve("::1").unwrap()[0].port(), 8080);
        assert!(resolve("127.0.0.1:notaport").is_err());
    }
}
