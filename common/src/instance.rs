//! Instance directories: where `-n NAME` points, and the files kept there.
//!
//! Like varnishd, an instance is a directory. `-n` takes an absolute path, or
//! a name that is placed under the default state directory. Without `-n`, the
//! one default instance `cache-d` is used. The state directory is, in order:
//! `$CACHEKIT_STATE_DIR`; `/var/lib/cachekit` when running as root (Varnish
//! uses `/var/lib/varnish`); otherwise `$XDG_RUNTIME_DIR/cachekit`, or
//! `/tmp/cachekit-<uid>` when that is unset. Mount it as tmpfs for the best
//! log throughput: the segment is a memory-mapped file that lives there.

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
    fn names_go_under_the_state_dir() {
        assert_eq!(resolve(Some("edge1")), state_dir().join("edge1"));
        assert_eq!(resolve(None), state_dir().join(DEFAULT_INSTANCE));
        assert_eq!(resolve(Some("")), state_dir().join(DEFAULT_INSTANCE));
    }
}
