//! Flag groups several tools share, each one struct flattened into the
//! tools' command lines (`#[command(flatten)]`), so the letters, types and
//! help stay the same everywhere. (cache-d's `-T`/`-S` bind and create the
//! admin socket while cache-adm's connect to several: different meanings
//! and types, so each keeps its own.)

use std::path::PathBuf;
use std::time::Duration;

/// A duration as the tools take it on the command line: `3s`, `500ms`,
/// `2m`, `1h`, `250us`, or plain seconds (`1.5`), from 0 up to
/// `max_secs` (`max_text` says it in words for the message).
pub fn duration(s: &str, max_secs: f64, max_text: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("bad duration \"{s}\" (try 3s, 500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in \"{s}\" (s, ms, us, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=max_secs).contains(&secs) {
        return Err(format!("bad duration \"{s}\" (0 to {max_text})"));
    }
    Ok(Duration::from_secs_f64(secs))
}

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
    /// format, read back with -r; "-" writes it to stdout); SIGHUP reopens
    /// it (for logrotate).
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
