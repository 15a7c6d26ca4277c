//! Flag groups several tools share, each one struct flattened into the
//! tools' command lines (`#[command(flatten)]`), so the letters, types and
//! help stay the same everywhere. (cache-d's `-T`/`-S` bind and create the
//! admin socket while cache-adm's connect to several: different meanings
//! and types, so each keeps its own.)

use std::path::PathBuf;

/// Which cache-d instance to read: `-n`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Instance {
    /// Instance directory (as for cache-d -n).
    #[arg(short = 'n', value_name = "DIR")]
    pub name: Option<String>,
}

/// Where the output goes instead of standard output, and running as a
/// service: `-w -a -D -P`, varnishlog's and varnishncsa's letters.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Output {
    /// Write to FILE instead of standard output (cache-log: the binary log
    /// format, read back with -r); SIGHUP reopens it (for logrotate).
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<PathBuf>,

    /// With -w, append to FILE instead of overwriting it.
    #[arg(short = 'a', requires = "write")]
    pub append: bool,

    /// Run in the background (detach from the terminal).
    #[arg(short = 'D')]
    pub daemon: bool,

    /// Write the process id to FILE (removed at exit).
    #[arg(short = 'P', value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
}
