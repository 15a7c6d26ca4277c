//! Listeners (`-a`), as varnishd takes them:
//! `[name=][host][:port][,PROTO]` for TCP and
//! `[name=]/path/to.sock[,PROTO][,user=U][,group=G][,mode=OCTAL]` for a
//! Unix-domain socket. PROTO is `HTTP` (the default) or `PROXY` (the PROXY
//! protocol, versions 1 and 2, before the first request), in any case.
//! The manager binds them and hands the descriptors to the child.

pub mod movable;
pub mod proxy;
pub mod stream;

use std::net::ToSocketAddrs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StartError;

/// What a listener's connections speak first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http,
    Proxy,
    /// TLS, then HTTP/1.1 (certificates from `-A`).
    Https,
    /// QUIC and HTTP/3 on an https listener's UDP port (not an `-a`
    /// protocol: every https listener has it).
    Quic,
}

impl Proto {
    fn parse(s: &str) -> Option<Proto> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Proto::Http),
            "proxy" => Some(Proto::Proxy),
            "https" => Some(Proto::Https),
            _ => None,
        }
    }

    /// As the child's inheritance names it.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Http => "HTTP/1",
            Proto::Proxy => "PROXY",
            Proto::Https => "HTTPS",
            Proto::Quic => "QUIC",
        }
    }

    /// The transport a session's `Begin` record names (TLS carries HTTP/1).
    pub fn transport(self) -> &'static str {
        match self {
            Proto::Proxy => "PROXY",
            Proto::Http | Proto::Https => "HTTP/1",
            Proto::Quic => "HTTP/3",
        }
    }

    pub fn from_name(s: &str) -> Option<Proto> {
        match s {
            "HTTP/1" => Some(Proto::Http),
            "PROXY" => Some(Proto::Proxy),
            "HTTPS" => Some(Proto::Https),
            "QUIC" => Some(Proto::Quic),
            _ => None,
        }
    }
}

/// Where a listener listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    /// `host:port` as given (`:port` for every address).
    Tcp(String),
    Unix(PathBuf),
}

/// Ownership and mode of a Unix socket's file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Perms {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
}

/// One `-a` argument, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub addr: Addr,
    pub proto: Proto,
    pub perms: Perms,
}

/// Parse the `index`-th `-a` argument (its name defaults to `a<index>`),
/// with varnishd's messages for what it refuses.
pub fn parse(spec: &str, index: usize) -> Result<Spec, String> {
    let mut parts = spec.split(',');
    let first = parts.next().unwrap_or_default();
    let (name, endpoint) = match first.split_once('=') {
        Some((n, a)) => (n.to_string(), a),
        None => (format!("a{index}"), first),
    };
    if name.is_empty() || name.contains([':', ' ']) {
        return Err(format!("Invalid listen name '{name}' in -a ({spec})"));
    }
    if endpoint.is_empty() {
        return Err(format!("Missing address in -a ({spec})"));
    }
    let unix = endpoint.starts_with('/');
    if !unix && endpoint.contains('/') {
        return Err(format!("Unix domain socket addresses must be absolute paths in -a ({endpoint})"));
    }
    let (mut proto, mut perms) = (None, Perms::default());
    for sub in parts {
        let Some((key, val)) = sub.split_once('=') else {
            if proto.is_some() {
                return Err(format!("Too many protocol sub-args in -a ({sub})"));
            }
            proto = Some(Proto::parse(sub).ok_or_else(|| format!("Unknown protocol '{sub}'"))?);
            continue;
        };
        if !unix {
            return Err(format!("Invalid sub-arg {sub} for IP addresses in -a"));
        }
        match key {
            "user" if perms.uid.is_some() => return Err(format!("Too many user sub-args in -a ({sub})")),
            "user" => perms.uid = Some(user_id(val).ok_or_else(|| format!("Unknown user {val} in -a"))?),
            "group" if perms.gid.is_some() => return Err(format!("Too many group sub-args in -a ({sub})")),
            "group" => perms.gid = Some(group_id(val).ok_or_else(|| format!("Unknown group {val} in -a"))?),
            "mode" if perms.mode.is_some() => return Err(format!("Too many mode sub-args in -a ({sub})")),
            "mode" if val.is_empty() => return Err("Empty mode sub-arg in -a".to_string()),
            "mode" => {
                let m = u32::from_str_radix(val, 8).map_err(|_| format!("Invalid mode sub-arg {val} in -a"))?;
                if m == 0 || m > 0o777 {
                    return Err(format!("Mode sub-arg {val} out of range in -a"));
                }
                perms.mode = Some(m);
            }
            _ => return Err(format!("Invalid sub-arg {sub} in -a")),
        }
    }
    let addr = if unix { Addr::Unix(PathBuf::from(endpoint)) } else { Addr::Tcp(endpoint.to_string()) };
    Ok(Spec { name, addr, proto: proto.unwrap_or(Proto::Http), perms })
}

fn user_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam with a valid C string; the result is read at once
    // (the manager parses its arguments before it starts any thread).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    (!pw.is_null()).then(|| unsafe { (*pw).pw_uid })
}

fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: as in user_id.
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    (!gr.is_null()).then(|| unsafe { (*gr).gr_gid })
}

/// A bound listening socket.
pub enum Socket {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
    /// QUIC (HTTP/3) beside an https listener, on the same port.
    Udp(std::net::UdpSocket),
}

impl Socket {
    pub fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
            Socket::Udp(s) => s.as_raw_fd(),
        }
    }
}

/// A bound listener: its name (`a0`, `a1`... or the `-a name=`), what its
/// connections speak first, and its socket.
pub struct Listener {
    pub name: Arc<str>,
    pub proto: Proto,
    pub socket: Socket,
}

/// Which listener a connection came in on.
#[derive(Clone)]
pub struct On {
    pub name: Arc<str>,
    pub proto: Proto,
}

/// Bind the `index`-th `-a` argument (a host name may give several addresses).
pub fn bind(spec: &str, index: usize) -> Result<Vec<Listener>, StartError> {
    let s = parse(spec, index).map_err(StartError::Config)?;
    let name: Arc<str> = s.name.into();
    match &s.addr {
        Addr::Tcp(addr) => {
            let full = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.clone() };
            let full = if full.contains(':') && !full.ends_with(']') { full } else { format!("{full}:80") };
            let addrs: Vec<_> = full.to_socket_addrs().map_err(|e| StartError::Config(format!("-a {spec}: {e}")))?.collect();
            if addrs.is_empty() {
                return Err(StartError::Config(format!("-a {spec}: resolves to no address")));
            }
            let mut out = Vec::new();
            for a in addrs {
                let socket = std::net::TcpListener::bind(a).map_err(|source| StartError::Listen { addr: a.to_string(), source })?;
                let bound = socket.local_addr().map_err(|source| StartError::Listen { addr: a.to_string(), source })?;
                out.push(Listener { name: name.clone(), proto: s.proto, socket: Socket::Tcp(socket) });
                if s.proto == Proto::Https {
                    out.extend(bind_quic(&name, bound));
                }
            }
            Ok(out)
        }
        Addr::Unix(path) => {
            let socket = bind_unix(path, &s.perms).map_err(|source| StartError::Listen { addr: path.display().to_string(), source })?;
            Ok(vec![Listener { name, proto: s.proto, socket: Socket::Unix(socket) }])
        }
    }
}

/// The UDP socket for QUIC beside an https listener bound at `bound`
/// (the same address and port), so that feature http3 can be turned on
/// at runtime. A port taken for UDP (another QUIC server) is not an
/// error: that listener has no HTTP/3, and the manager says so.
fn bind_quic(name: &Arc<str>, bound: std::net::SocketAddr) -> Option<Listener> {
    match std::net::UdpSocket::bind(bound) {
        Ok(socket) => Some(Listener { name: name.clone(), proto: Proto::Quic, socket: Socket::Udp(socket) }),
        Err(e) => {
            eprintln!("cache-d: listener {name}: no HTTP/3 on udp {bound}: {e}");
            None
        }
    }
}

/// Bind a Unix socket at `path`: a socket file left by an earlier run is
/// replaced (as varnishd does); anything else there is an error (varnishd
/// would unlink whatever it finds).
fn bind_unix(path: &Path, perms: &Perms) -> std::io::Result<std::os::unix::net::UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a file that is not a socket is in the way"));
        }
        std::fs::remove_file(path)?;
    }
    let l = std::os::unix::net::UnixListener::bind(path)?;
    if let Some(m) = perms.mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(m))?;
    }
    if perms.uid.is_some() || perms.gid.is_some() {
        std::os::unix::fs::chown(path, perms.uid, perms.gid)?;
    }
    Ok(l)
}

/// The addresses a listener's bound sockets have, as `_.listen` lines
/// (`name ip port`; `name path -` for a Unix socket, as varnishd's
/// `debug.listen_address` shows it).
pub fn listen_line(l: &Listener) -> std::io::Result<String> {
    Ok(match &l.socket {
        // Its port is its https listener's.
        Socket::Udp(_) => String::new(),
        Socket::Tcp(s) => {
            let a = s.local_addr()?;
            format!("{} {} {}\n", l.name, a.ip(), a.port())
        }
        Socket::Unix(s) => {
            let a = s.local_addr()?;
            let p = a.as_pathname().map(|p| p.display().to_string()).unwrap_or_default();
            format!("{} {} -\n", l.name, p)
        }
    })
}

#[cfg(test)]
mod tests;
