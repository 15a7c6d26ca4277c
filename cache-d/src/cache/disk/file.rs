//! A store's files (the store and its bans journal) opened by the
//! instance directory's rules; apart, so the journal and the store both
//! use it without importing each other.

use std::fs::{File, OpenOptions};
use std::path::Path;

/// Open a store's file (or its bans journal) by the instance directory's
/// rules (common::instance::open_private): never through a symlink, made
/// 0600, refused when another user owns it or others can write it or its
/// directory. Stores hold cached bodies and the hash key.
pub(crate) fn open_file(path: &Path, opts: &mut OpenOptions) -> Result<File, String> {
    common::instance::open_private(path, opts).map_err(|e| match e {
        common::instance::FileError::Io { path, source } => format!("storage {}: cannot open: {source}", path.display()),
        e => format!("storage {e}"),
    })
}
