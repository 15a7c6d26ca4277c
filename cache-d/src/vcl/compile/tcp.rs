//! `import tcp;`: varnish-modules' vmod_tcp, on the client connection's
//! socket ([`crate::vcl::model::Ends::fd`]): TCP_INFO read into the log
//! or as the round-trip time, the congestion control algorithm, and
//! SO_MAX_PACING_RATE. Without a client request (the backend side) the
//! functions do nothing, as the vmod's.

use common::log::vsl::Tag;

use super::program::*;
use super::vmodargs::vcc_args;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::Task;

/// The longest congestion control name the kernel takes (TCP_CA_NAME_MAX).
const CA_NAME_MAX: usize = 16;

/// The client connection's descriptor, on the client side.
fn client_fd(t: &Task<'_>) -> Option<i32> {
    t.req.as_ref()?;
    t.ends.as_ref()?.fd
}

/// The socket's TCP_INFO.
pub(crate) fn tcp_info(fd: i32) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len`
    // bytes into it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len) };
    (rc == 0).then_some(info)
}

/// Set the socket's congestion control algorithm (the name cut to 16
/// bytes, as the vmod does).
pub(crate) fn set_congestion(fd: i32, name: &str) -> Result<String, String> {
    let mut n = name.as_bytes();
    if let Some(nul) = n.iter().position(|&b| b == 0) {
        n = &n[..nul];
    }
    let n = &n[..n.len().min(CA_NAME_MAX)];
    // SAFETY: the kernel reads `n.len()` bytes from the slice.
    let rc = unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, n.as_ptr().cast(), n.len() as libc::socklen_t) };
    let shown = String::from_utf8_lossy(n).into_owned();
    if rc < 0 {
        Err(shown)
    } else {
        Ok(shown)
    }
}

/// The socket's congestion control algorithm.
pub(crate) fn congestion(fd: i32) -> Option<String> {
    let mut buf = [0u8; CA_NAME_MAX];
    let mut len = CA_NAME_MAX as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf`.
    let rc = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len) };
    (rc == 0).then(|| String::from_utf8_lossy(&buf[..len as usize]).trim_end_matches('\0').to_string())
}

/// Set SO_MAX_PACING_RATE to `kbytes` KB/s (the vmod passes `kbytes * 1024`
/// as a C int).
pub(crate) fn set_pace(fd: i32, kbytes: i64) -> bool {
    let rate = (kbytes as i32).wrapping_mul(1024);
    crate::util::set_int_sockopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, rate)
}

/// The socket's SO_MAX_PACING_RATE (bytes per second), as the vmod reads
/// it back: (getsockopt's return, the rate as an unsigned int).
pub(crate) fn pace(fd: i32) -> (i32, u32) {
    let mut rate: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `rate`.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, (&mut rate as *mut u32).cast(), &mut len) };
    (rc, rate)
}

/// The one argument of a function that takes one, compiled.
fn one(params: &[&str], args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<Vec<ExprFn>, VclError> {
    vcc_args(params, 1, args, names, pos)?.into_iter().flatten().map(|e| sc.expr(e)).collect()
}

/// A function of vmod_tcp; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("tcp.")?;
    Some(match f {
        "dump_info" => vcc_args(&[], 0, args, names, pos).map(|_| -> ExprFn { Box::new(|t, _| dump_info(t)) }),
        "get_estimated_rtt" => vcc_args(&[], 0, args, names, pos).map(|_| -> ExprFn {
            Box::new(|t, _| {
                let Some(fd) = client_fd(t) else { return Val::Real(0.0) };
                match tcp_info(fd) {
                    // Whole milliseconds (the vmod divides integers).
                    Some(i) => Val::Real(f64::from(i.tcpi_rtt / 1000)),
                    None => {
                        t.record(Tag::VclError, b"getsockopt() failed");
                        Val::Real(0.0)
                    }
                }
            })
        }),
        "congestion_algorithm" => one(&["algorithm"], args, names, pos, sc).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| {
                let algo = x(t, c).text();
                let Some(fd) = client_fd(t) else { return Val::Int(-1) };
                match set_congestion(fd, &algo) {
                    Ok(_) => {
                        let now = congestion(fd).unwrap_or_default();
                        t.record(Tag::VclLog, format!("getsockopt() returned: {now}").as_bytes());
                        Val::Int(0)
                    }
                    Err(shown) => {
                        t.record(Tag::VclError, format!("TCP_CONGESTION setsockopt() for \"{shown}\" failed.").as_bytes());
                        Val::Int(-1)
                    }
                }
            })
        }),
        "set_socket_pace" => one(&[""], args, names, pos, sc).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| {
                let rate = x(t, c).num().unwrap_or(0.0) as i64;
                let Some(fd) = client_fd(t) else { return Val::None };
                if set_pace(fd, rate) {
                    t.record(Tag::VclLog, format!("vmod-tcp: Socket paced to {rate} KB/s.").as_bytes());
                } else {
                    t.record(Tag::VclError, b"set_socket_pace(): Error setting pace rate.");
                }
                let (rc, now) = pace(fd);
                t.record(Tag::VclLog, format!("getsockopt() {rc} {}", now as i32).as_bytes());
                Val::None
            })
        }),
        _ => err(format!("Symbol not found: '{name}'"), pos),
    })
}

/// tcp.dump_info(): two VCL_Log lines of TCP_INFO.
fn dump_info(t: &mut Task<'_>) -> Val {
    let Some(fd) = client_fd(t) else { return Val::None };
    let Some(i) = tcp_info(fd) else {
        t.record(Tag::VclError, b"getsockopt() failed");
        return Val::None;
    };
    let a = format!("tcpi: snd_mss={} rcv_mss={} lost={} retrans={}", i.tcpi_snd_mss, i.tcpi_rcv_mss, i.tcpi_lost, i.tcpi_retrans);
    let b = format!(
        "tcpi2: pmtu={} rtt={} rttvar={} snd_cwnd={} advmss={} reordering={}",
        i.tcpi_pmtu, i.tcpi_rtt, i.tcpi_rttvar, i.tcpi_snd_cwnd, i.tcpi_advmss, i.tcpi_reordering
    );
    t.record(Tag::VclLog, a.as_bytes());
    t.record(Tag::VclLog, b.as_bytes());
    Val::None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn pacing_sets_the_sockets_max_pacing_rate() {
        let (_c, s) = pair();
        let fd = s.as_raw_fd();
        assert!(set_pace(fd, 1000));
        assert_eq!(pace(fd), (0, 1000 * 1024));
        assert!(set_pace(fd, 1));
        assert_eq!(pace(fd).1, 1024);
    }

    #[test]
    fn congestion_control_is_set_and_read_back() {
        let (_c, s) = pair();
        let fd = s.as_raw_fd();
        // reno is always built into Linux.
        assert_eq!(set_congestion(fd, "reno").as_deref(), Ok("reno"));
        assert_eq!(congestion(fd).as_deref(), Some("reno"));
        assert_eq!(set_congestion(fd, "no-such-algorithm-at-all"), Err("no-such-algorith".to_string()));
    }

    #[test]
    fn tcp_info_reads_on_a_socket_and_fails_elsewhere() {
        let (_c, s) = pair();
        assert!(tcp_info(s.as_raw_fd()).is_some_and(|i| i.tcpi_snd_mss > 0));
        assert!(tcp_info(-1).is_none());
    }
}
