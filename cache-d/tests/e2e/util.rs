//! The shared end-to-end harness (the workspace's `e2e` crate).

pub use e2e::harness::*;

/// A port free on every one of `ips` (loopback addresses) when this
/// returns: several nodes on 127.0.0.2, .3 ... can then share it.
pub fn free_port_on(ips: &[&str]) -> u16 {
    loop {
        let p = std::net::TcpListener::bind((ips[0], 0)).unwrap().local_addr().unwrap().port();
        if ips[1..].iter().all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok()) {
            return p;
        }
    }
}

/// A self-signed certificate for `names`, written into `dir` as
/// `STEM.pem` (certificate and key, as hitch and `-A` take them) and
/// `STEM-ca.pem` (the certificate alone, for a client to trust).
pub struct SelfSigned {
    pub bundle: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    /// The certificate, DER (what a client sees on the wire).
    pub der: Vec<u8>,
}

pub fn self_signed(dir: &std::path::Path, names: &[&str], stem: &str) -> SelfSigned {
    let (text, cert, der) = pem_bundle(names);
    let (bundle, ca) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}-ca.pem")));
    std::fs::write(&bundle, text).unwrap();
    std::fs::write(&ca, cert).unwrap();
    SelfSigned { bundle, ca, der }
}

/// A self-signed certificate for `names`: the PEM bundle (certificate and
/// key), the certificate's PEM, and its DER.
pub fn pem_bundle(names: &[&str]) -> (String, String, Vec<u8>) {
    let ck = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    (format!("{}{}", ck.cert.pem(), ck.key_pair.serialize_pem()), ck.cert.pem(), ck.cert.der().to_vec())
}

/// A TCP connection to `to` (ip:port) from the local address `from`: a
/// loopback address other than 127.0.0.1 stands for another machine.
pub fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddrV4) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let sin = |a: std::net::SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, owned by the TcpStream from here on (closed
    // when it drops), and sockaddr_in values that live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = std::net::TcpStream::from_raw_fd(fd);
        let (src, dst) = (sin(std::net::SocketAddrV4::new(from, 0)), sin(to));
        if libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len) != 0
            || libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(s)
    }
}

/// A named pipe at `path`.
pub fn mkfifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// Resident memory of process `pid`, in KiB (VmRSS in /proc/PID/status).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Run `cmd` to its end (at most `secs`) while sampling the resident
/// memory of process `pid`: its output and how far `pid` grew, in KiB.
/// Past `limit_kib` of growth `pid` is killed and the test fails (a
/// process reading /dev/zero would otherwise take the machine's memory).
pub fn watched(pid: u32, cmd: &mut std::process::Command, secs: u64, limit_kib: u64) -> (std::process::Output, u64) {
    use std::process::Stdio;
    let base = rss_kib(pid).unwrap_or(0);
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let t0 = std::time::Instant::now();
    let mut grew = 0;
    loop {
        grew = grew.max(rss_kib(pid).unwrap_or(base).saturating_sub(base));
        if grew > limit_kib {
            // SAFETY: killing the process under test on purpose.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = child.kill();
            panic!("process {pid} grew by {grew} KiB (limit {limit_kib}): killed");
        }
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), grew);
        }
        if t0.elapsed() > std::time::Duration::from_secs(secs) {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{cmd:?} still running after {secs}s: {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
