//! Instance directories: where `-n NAME` points, and the files kept there.
//!
//! Like varnishd, an instance is a directory. `-n` takes an absolute path, or
//! a name that is placed under the default state directory. Without `-n`, the
//! one default instance `cache-d` is used. The state directory is, in order:
//! `$CACHEKIT_STATE_DIR`; `/var/lib/cachekit` when running as root (Varnish
//! uses `/var/lib/varnish`); otherwise `$XDG_RUNTIME_DIR/cachekit`, or
//! `/tmp/cachekit-<uid>` when that is unset. Mount it as tmpfs for the best
//! log throughput: the segment is a memory-mapped file that lives there.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The instance name used when no `-n` is given (varnishd uses `varnishd`).
pub const DEFAULT_INSTANCE: &str = "cache-d";
/// File name of the shared-memory segment inside the instance directory.
pub const SEGMENT_FILE: &str = "_.segment";
/// File listing the daemon's bound listen addresses, one `name ip port` a line.
pub const LISTEN_FILE: &str = "_.listen";

/// The default state directory (see the module docs for the order).
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CACHEKIT_STATE_DIR") {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/var/lib/cachekit");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("cachekit"),
        _ => PathBuf::from(format!("/tmp/cachekit-{uid}")),
    }
}

/// Resolve the `-n` argument to an instance directory.
///
/// An absolute path is taken as is; anything else is a name (or relative path)
/// under [`state_dir`]. `None` means the default instance.
pub fn resolve(name: Option<&str>) -> PathBuf {
    match name {
        Some(n) if Path::new(n).is_absolute() => PathBuf::from(n),
        Some(n) if !n.is_empty() => state_dir().join(n),
        _ => state_dir().join(DEFAULT_INSTANCE),
    }
}

/// The lock file a running cache-d holds (flock) for the whole of its life.
pub const LOCK_FILE: &str = "_.lock";

/// Why an instance directory cannot be used by a daemon.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    #[error("instance dir {dir}: {source}")]
    Io { dir: PathBuf, source: std::io::Error },
    #[error("instance dir {dir} is not a directory")]
    NotDir { dir: PathBuf },
    #[error(
        "instance dir {dir} belongs to uid {owner}, not to this user (uid {me}): refusing it (another user may have made it first); remove it or choose another -n"
    )]
    NotOwned { dir: PathBuf, owner: u32, me: u32 },
    #[error("instance dir {dir} is writable by group or others (mode {mode:o}): run chmod go-w on it, or choose another -n")]
    Writable { dir: PathBuf, mode: u32 },
    #[error("another cache-d is running with instance dir {dir} (it holds {dir}/_.lock)")]
    Locked { dir: PathBuf },
}

/// The running daemon's hold on its instance directory (an exclusive flock
/// on `_.lock`, released when the process ends, however it ends).
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

/// Make (if needed), check and lock an instance directory for a daemon.
///
/// The rules: the directory (and a symlink to it, if it is one) belongs to
/// the user running cache-d and is not writable by group or others; its
/// parent belongs to that user or root and is not writable by others
/// unless sticky (as /tmp). So nobody else can have made it first, plant a
/// file or symlink in it, or swap it. Then an exclusive lock: of two
/// daemons started at the same instant on one directory, one gets it and
/// the other is refused before touching anything.
pub fn prepare(dir: &Path) -> Result<InstanceLock, InstanceError> {
    let io = |source| InstanceError::Io { dir: dir.to_path_buf(), source };
    fs::DirBuilder::new().recursive(true).mode(0o750).create(dir).map_err(io)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let link = fs::symlink_metadata(dir).map_err(io)?;
    if link.file_type().is_symlink() && link.uid() != me && link.uid() != 0 {
        return Err(InstanceError::NotOwned { dir: dir.to_path_buf(), owner: link.uid(), me });
    }
    let meta = fs::metadata(dir).map_err(io)?;
    if !meta.is_dir() {
        return Err(InstanceError::NotDir { dir: dir.to_path_buf() });
    }
    if meta.uid() != me {
        return Err(InstanceError::NotOwned { dir: dir.to_path_buf(), owner: meta.uid(), me });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(InstanceError::Writable { dir: dir.to_path_buf(), mode });
    }
    if let Some(parent) = fs::canonicalize(dir).ok().and_then(|d| d.parent().map(Path::to_path_buf)) {
        match dir_fault(&parent, me).map_err(io)? {
            Some(DirFault::Owner(owner)) => return Err(InstanceError::NotOwned { dir: parent, owner, me }),
            Some(DirFault::Writable(mode)) => return Err(InstanceError::Writable { dir: parent, mode }),
            None => {}
        }
    }
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io)?;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => InstanceError::Locked { dir: dir.to_path_buf() },
            _ => io(e),
        });
    }
    let _ = file.set_len(0);
    let _ = writeln!(file, "{}", std::process::id());
    Ok(InstanceLock { _file: file })
}

/// What makes a directory one that others could change under us.
enum DirFault {
    /// It belongs to this uid: another user, not root.
    Owner(u32),
    /// Group or others may write it, and it is not sticky (mode).
    Writable(u32),
}

/// The rule for a directory that holds our files: it belongs to this
/// user or root, and group and others cannot write it unless it is
/// sticky (as /tmp, where nobody removes or renames another's file).
fn dir_fault(dir: &Path, me: u32) -> std::io::Result<Option<DirFault>> {
    let m = fs::metadata(dir)?;
    let mode = m.permissions().mode() & 0o7777;
    Ok(if m.uid() != me && m.uid() != 0 {
        Some(DirFault::Owner(m.uid()))
    } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        Some(DirFault::Writable(mode))
    } else {
        None
    })
}

/// Why a private file (a disk store, its bans journal) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is a symbolic link: refusing to follow it (another user may have planted it); give the file's real path")]
    Symlink { path: PathBuf },
    #[error("{path} is not a regular file")]
    NotFile { path: PathBuf },
    #[error(
        "{path} belongs to uid {owner}, not to this user (uid {me}) or root: refusing it (another user may have made it first); remove it or choose another path"
    )]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error("{path} is writable by group or others (mode {mode:o}): anyone could have changed it; run chmod 600 on it if it is yours, else remove it")]
    Writable { path: PathBuf, mode: u32 },
    #[error("{path} has {links} hard links: refusing it (a link to another file may have been planted there); remove it")]
    Linked { path: PathBuf, links: u64 },
    #[error(
        "directory {dir} of {path} belongs to uid {owner}, not to this user (uid {me}) or root: keep the file in a directory of yours"
    )]
    DirNotOwned { dir: PathBuf, path: PathBuf, owner: u32, me: u32 },
    #[error(
        "directory {dir} of {path} is writable by group or others and not sticky (mode {mode:o}): run chmod go-w on it, or keep the file elsewhere"
    )]
    DirWritable { dir: PathBuf, path: PathBuf, mode: u32 },
}

/// Check the directory a private file is (or is to be) in, by the rule of
/// an instance directory's parent: it belongs to this user or root and
/// others cannot write it unless it is sticky; and if it is named through
/// a symlink, that link belongs to this user or root too.
pub fn check_file_dir(path: &Path) -> Result<(), FileError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let io = |source| FileError::Io { path: dir.to_path_buf(), source };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let link = fs::symlink_metadata(dir).map_err(io)?;
    if link.file_type().is_symlink() && link.uid() != me && link.uid() != 0 {
        return Err(FileError::DirNotOwned { dir: dir.to_path_buf(), path: path.to_path_buf(), owner: link.uid(), me });
    }
    let (dir, path) = (dir.to_path_buf(), path.to_path_buf());
    match dir_fault(&dir, me) {
        Err(source) => Err(FileError::Io { path: dir, source }),
        Ok(Some(DirFault::Owner(owner))) => Err(FileError::DirNotOwned { dir, path, owner, me }),
        Ok(Some(DirFault::Writable(mode))) => Err(FileError::DirWritable { dir, path, mode }),
        Ok(None) => Ok(()),
    }
}

/// Open a file only this user should read or write (a disk store, its bans
/// journal), with `opts` (read, write, append, create as the caller needs),
/// by the instance directory's rules:
///
/// - its directory passes [`check_file_dir`];
/// - a symlink at `path` is never followed (O_NOFOLLOW; O_CLOEXEC, as std
///   always sets it, so no child process inherits it);
/// - a new file is made 0600 (it holds cached bodies, and a store's header
///   the hash key);
/// - what was opened (checked on the descriptor, not the name, so nothing
///   can be swapped in between) is a regular file with one link, belongs
///   to this user or root, and group and others cannot write it; others'
///   read and execute bits, if it is ours, are taken away (0640 at most).
pub fn open_private(path: &Path, opts: &mut OpenOptions) -> Result<File, FileError> {
    check_file_dir(path)?;
    let io = |source| FileError::Io { path: path.to_path_buf(), source };
    let f = match opts.mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(FileError::Symlink { path: path.to_path_buf() }),
        Err(e) => return Err(io(e)),
    };
    let m = f.metadata().map_err(io)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mode = m.permissions().mode() & 0o7777;
    if !m.file_type().is_file() {
        return Err(FileError::NotFile { path: path.to_path_buf() });
    }
    if m.uid() != me && m.uid() != 0 {
        return Err(FileError::NotOwned { path: path.to_path_buf(), owner: m.uid(), me });
    }
    if mode & 0o022 != 0 {
        return Err(FileError::Writable { path: path.to_path_buf(), mode });
    }
    if m.nlink() != 1 {
        return Err(FileError::Linked { path: path.to_path_buf(), links: m.nlink() });
    }
    if m.uid() == me && mode & !0o640 != 0 {
        f.set_permissions(fs::Permissions::from_mode(mode & 0o640)).map_err(io)?;
    }
    Ok(f)
}

/// Write `name` in the instance dir as a whole: a fresh temporary file
/// (never a planted one: O_EXCL, no symlink followed) renamed into place.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
    let done = f.write_all(bytes).and_then(|_| fs::rename(&tmp, dir.join(name)));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done
}

/// Path of the segment file of an instance directory.
pub fn segment_path(dir: &Path) -> PathBuf {
    dir.join(SEGMENT_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_are_kept() {
        assert_eq!(resolve(Some("/srv/cache")), PathBuf::from("/srv/cache"));
    }

    #[test]
    fn instance_dirs_are_checked_and_locked() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("i");
        let lock = prepare(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o750);
        assert!(matches!(prepare(&dir), Err(InstanceError::Locked { .. })));
        drop(lock);
        let again = prepare(&dir).unwrap();
        drop(again);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&dir).unwrap_err();
        assert!(matches!(e, InstanceError::Writable { .. }) && e.to_string().contains(dir.to_str().unwrap()), "{e}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        // A planted symlink in place of the lock file is not followed.
        fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        std::os::unix::fs::symlink(t.path().join("victim"), dir.join(LOCK_FILE)).unwrap();
        assert!(prepare(&dir).is_err());
        assert!(!t.path().join("victim").exists());
        fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        // Files are written whole, through a fresh temporary file.
        std::os::unix::fs::symlink(t.path().join("victim2"), dir.join(".x.tmp")).unwrap();
        write_file(&dir, "x", b"hello", 0o640).unwrap();
        assert_eq!(fs::read(dir.join("x")).unwrap(), b"hello");
        assert!(!t.path().join("victim2").exists());
        // Not a directory.
        fs::write(t.path().join("f"), b"").unwrap();
        assert!(prepare(&t.path().join("f")).is_err());
    }

    #[test]
    fn private_files_follow_the_instance_dirs_rules() {
        let t = tempfile::tempdir().unwrap();
        let rw = || OpenOptions::new().read(true).write(true).create(true).truncate(false).clone();
        let p = t.path().join("store");
        open_private(&p, &mut rw()).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "made 0600");
        // A symlink is not followed, and its target is left alone.
        fs::write(t.path().join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(t.path().join("victim"), t.path().join("link")).unwrap();
        let e = open_private(&t.path().join("link"), &mut rw()).unwrap_err();
        assert!(matches!(e, FileError::Symlink { .. }) && e.to_string().contains("link"), "{e}");
        assert_eq!(fs::read(t.path().join("victim")).unwrap(), b"keep");
        // Writable by others: refused. A second link: refused.
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(open_private(&p, &mut rw()), Err(FileError::Writable { mode: 0o666, .. })));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        fs::hard_link(&p, t.path().join("second")).unwrap();
        assert!(matches!(open_private(&p, &mut rw()), Err(FileError::Linked { links: 2, .. })));
        fs::remove_file(t.path().join("second")).unwrap();
        // Readable by others: taken back to 0640.
        open_private(&p, &mut rw()).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
        // Not a regular file.
        assert!(matches!(open_private(t.path(), OpenOptions::new().read(true)), Err(FileError::NotFile { .. })));
        // A directory others can write (not sticky): refused before any open.
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(open_private(&open.join("s"), &mut rw()), Err(FileError::DirWritable { .. })));
        assert!(!open.join("s").exists());
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        open_private(&open.join("s"), &mut rw()).unwrap();
    }

    #[test]
    fn a_private_file_of_another_user_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root can give a file to another user (CI runs as root)");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("theirs");
        fs::write(&p, b"").unwrap();
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        let e = open_private(&p, OpenOptions::new().read(true).write(true)).unwrap_err();
        assert!(matches!(e, FileError::NotOwned { owner: 65534, .. }) && e.to_string().contains("theirs"), "{e}");
    }

    #[test]
    fn names_go_under_the_state_dir() {
        assert_eq!(resolve(Some("edge1")), state_dir().join("edge1"));
        assert_eq!(resolve(None), state_dir().join(DEFAULT_INSTANCE));
        assert_eq!(resolve(Some("")), state_dir().join(DEFAULT_INSTANCE));
    }
}
