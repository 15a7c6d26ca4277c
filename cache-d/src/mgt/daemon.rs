//! Becoming a daemon (fork, setsid, stdio to /dev/null) with the parent
//! waiting until the child reports it is ready or why it failed, and waiting
//! for a stop signal.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};

/// The child's end of the start-up pipe.
pub struct Ready {
    pipe: File,
}

impl Ready {
    /// Tell the parent we are serving; detach stdio.
    pub fn succeed(mut self) {
        let _ = self.pipe.write_all(b"\0");
        detach_stdio();
    }
    /// Tell the parent why start-up failed (it prints it and exits 2).
    pub fn fail(mut self, why: &str) {
        let _ = self.pipe.write_all(why.as_bytes());
    }
}

/// Fork. The parent waits for the child's verdict and exits with it; the
/// child returns a [`Ready`] to report on.
pub fn fork() -> std::io::Result<Ready> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) into a local array; close-on-exec, so the child
    // process the manager starts does not hold the parent waiting.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fds are fresh and owned here.
    let (mut rd, wr) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: called before any thread exists (no runtime yet).
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(rd);
            // SAFETY: setsid in the new child has no preconditions.
            unsafe { libc::setsid() };
            Ok(Ready { pipe: wr })
        }
        _child => {
            drop(wr);
            let mut msg = Vec::new();
            let _ = rd.read_to_end(&mut msg);
            match msg.as_slice() {
                [0] => std::process::exit(0),
                [] => {
                    eprintln!("cache-d: the daemon exited during start-up");
                    std::process::exit(2)
                }
                why => {
                    eprintln!("cache-d: {}", String::from_utf8_lossy(why));
                    std::process::exit(2)
                }
            }
        }
    }
}

fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// Resolve on SIGTERM or SIGINT.
pub async fn wait_for_stop() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Tell systemd (a `Type=notify` unit) how start-up or shutdown goes:
/// `READY=1` once the child serves, `STOPPING=1` when stopping. A no-op
/// without `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else { return };
    let bytes = path.as_encoded_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name),
        None => std::os::unix::net::SocketAddr::from_pathname(std::path::Path::new(&path)),
    };
    if let Ok(addr) = addr {
        let _ = sock.send_to_addr(format!("{state}\nMAINPID={}\n", std::process::id()).as_bytes(), &addr);
    }
}
