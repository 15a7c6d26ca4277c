//! What a log reader needs to run as a service (`-D`, `-P`, signals), shared
//! by cache-log and cache-ncsa: detach, keep a pid file, and turn SIGHUP and
//! SIGUSR1 into flags and SIGTERM/SIGINT into a clean stop of
//! [`crate::log::follow::follow_groups`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGHUP: reopen the output file (log rotation).
pub static REOPEN: AtomicBool = AtomicBool::new(false);
/// Set by SIGUSR1: flush the output now.
pub static FLUSH: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hup(_: libc::c_int) {
    REOPEN.store(true, Ordering::SeqCst);
}
extern "C" fn on_usr1(_: libc::c_int) {
    FLUSH.store(true, Ordering::SeqCst);
}
extern "C" fn on_stop(_: libc::c_int) {
    crate::log::follow::STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Detach from the terminal (`-D`): keep the working directory so relative
/// paths stay valid, stdio to /dev/null. Call before starting threads.
pub fn daemonize() -> Result<(), String> {
    // SAFETY: called before any thread is started.
    if unsafe { libc::daemon(1, 0) } != 0 {
        return Err(format!("cannot daemonize: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Route SIGHUP, SIGUSR1, SIGTERM and SIGINT to the flags above.
pub fn install_signals() {
    // SAFETY: the handlers only store to atomics.
    unsafe {
        libc::signal(libc::SIGHUP, on_hup as *const () as libc::sighandler_t);
        libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
    }
}

/// A pid file (`-P`), removed when dropped.
pub struct PidFile(PathBuf);

impl PidFile {
    pub fn create(path: &Path) -> Result<PidFile, String> {
        std::fs::write(path, format!("{}\n", std::process::id())).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `-D` then `-P`, and the signals: what both readers do before reading.
pub fn start(daemon: bool, pid_file: Option<&Path>) -> Result<Option<PidFile>, String> {
    if daemon {
        daemonize()?;
    }
    let pid = pid_file.map(PidFile::create).transpose()?;
    install_signals();
    Ok(pid)
}
