//! cache-ncsa: one access-log line per client request, from the
//! shared-memory log, in varnishncsa's formats.

pub mod cli;
pub mod format;

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::log::follow;
use common::log::group::{Grouper, Grouping};

use crate::cli::Args;
use crate::format::Format;

/// The preset formats (`--format-preset`).
pub const PRESET_COMMON: &str = r#"%h %l %u %t "%r" %s %b"#;
pub const PRESET_JSON: &str = "%h %l %u %t %r %s %b %{Referer}i %{User-agent}i %{Host}i %m %U %q %H %I %O %D %{Varnish:time_firstbyte}x %{Varnish:hitmiss}x %{Varnish:handling}x %{Varnish:vxid}x";

/// How lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The format, values escaped as varnishncsa does.
    Text,
    /// The format, values escaped for JSON strings (varnishncsa -j with a
    /// format: the format itself is the JSON).
    JsonValues,
    /// One JSON object of the format's fields (-j without -F/-f, or
    /// --format-preset json).
    JsonObject,
}

/// The format text and how to write it, from -F / -f / --format-preset / -j.
pub fn format_of(args: &Args) -> Result<(String, Output), String> {
    let given = if args.json { Output::JsonValues } else { Output::Text };
    if let Some(path) = &args.format_file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let line = text.lines().next().unwrap_or("").to_string();
        return Ok((line, given));
    }
    if let Some(f) = &args.format {
        return Ok((f.clone(), given));
    }
    let preset = if args.json { Output::JsonObject } else { Output::Text };
    match args.format_preset.as_deref() {
        None | Some("combined") => Ok((crate::cli::DEFAULT_FORMAT.to_string(), preset)),
        Some("common") => Ok((PRESET_COMMON.to_string(), preset)),
        Some("json") => Ok((PRESET_JSON.to_string(), Output::JsonObject)),
        Some(other) => Err(format!("unknown --format-preset \"{other}\"; use combined, common or json")),
    }
}

/// Which sides get lines.
#[derive(Clone, Copy)]
struct Sides {
    client: bool,
    backend: bool,
    /// ESI subrequests too (-E; always with request grouping).
    esi: bool,
}

/// Write the lines of one group (when it matches the query).
fn emit(
    out: &mut (impl Write + ?Sized),
    g: &common::log::group::Group,
    query: Option<&common::log::query::Query>,
    format: &Format,
    how: Output,
    sides: Sides,
) -> std::io::Result<()> {
    if query.is_some_and(|q| !q.matches(g)) {
        return Ok(());
    }
    for (_, tx) in &g.txs {
        let backend = tx.kind == common::log::group::TxKind::BeReq;
        if (backend && !sides.backend) || (!backend && !sides.client) {
            continue;
        }
        if !backend && tx.linked && !tx.restart && !sides.esi {
            continue;
        }
        let line = match how {
            Output::JsonObject => format.render_json(tx),
            _ => format.render_quoted(tx, how == Output::JsonValues),
        };
        if let Some(line) = line {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// The output file of -w: reopened (at its path, so a renamed file is left
/// behind whole) when SIGHUP asked for it.
struct LogFile {
    path: PathBuf,
    w: BufWriter<File>,
    /// The last byte written ended a line: a reopen here splits nothing.
    line_start: bool,
}

impl LogFile {
    fn open(path: &Path, append: bool) -> Result<LogFile, String> {
        let f = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(LogFile { path: path.to_path_buf(), w: BufWriter::with_capacity(1 << 16, f), line_start: true })
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.line_start && common::background::REOPEN.swap(false, Ordering::SeqCst) {
            self.w.flush()?;
            let f = OpenOptions::new().create(true).append(true).open(&self.path)?;
            self.w = BufWriter::with_capacity(1 << 16, f);
        }
        let n = self.w.write(buf)?;
        if n > 0 {
            self.line_start = buf[n - 1] == b'\n';
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        common::background::FLUSH.store(false, Ordering::SeqCst);
        self.w.flush()
    }
}

/// Run cache-ncsa, writing lines to `out` (or the -w file).
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    let (text, how) = format_of(&args)?;
    let format = Format::parse(&text)?;
    let query = common::log::query::Query::from_options(&args.query, &args.query_file)?;
    // "-w -" is stdout, as for varnishncsa.
    let path = args.output.write.as_deref().filter(|p| *p != Path::new("-"));
    let mut file = path.map(|p| LogFile::open(p, args.output.append)).transpose()?;
    let grouping = if args.grouping == "request" { Grouping::Request } else { Grouping::Vxid };
    // As varnishncsa: client lines by default, backend lines with -b (and
    // both with -b -c); request grouping logs every transaction of a group.
    // -E shows ESI subrequests (and implies client lines), as
    // varnishncsa's does for vxid grouping.
    let sides = match (args.client || args.esi, args.backend) {
        _ if grouping == Grouping::Request => Sides { client: true, backend: true, esi: true },
        (false, false) => Sides { client: true, backend: false, esi: false },
        (c, b) => Sides { client: c, backend: b, esi: args.esi },
    };
    let _pid = common::background::start(args.output.daemon, args.output.pid_file.as_deref())?;
    let out: &mut dyn Write = match file.as_mut() {
        Some(f) => f,
        None => out,
    };
    // Only the records the lines read are kept (all of them for -q).
    let grouper = match query {
        None => Grouper::new(grouping).keeping(format.tags()),
        Some(_) => Grouper::new(grouping),
    };
    let res = if let Some(path) = &args.read {
        common::log::vslfile::read_groups(path, grouper, out, |o, g| emit(o, g, query.as_ref(), &format, how, sides))
    } else {
        let dir = common::instance::resolve(args.instance.name.as_deref());
        let opts = follow::Options { dump: args.dump, wait: follow::parse_wait(args.wait.as_deref())? };
        follow::follow_groups("cache-ncsa", &dir, &opts, grouper, Duration::from_secs(120), out, |o, g| {
            emit(o, g, query.as_ref(), &format, how, sides)
        })
    };
    if let Some(f) = file.as_mut() {
        f.flush().map_err(|e| format!("{}: {e}", f.path.display()))?;
    }
    res
}
