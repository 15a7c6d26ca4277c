//! cache-log: prints the shared-memory log as varnishlog does.

pub mod cli;

use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

use common::follow::{self, Event, Flow};
use common::group::{Group, Grouper, Grouping, OwnedRecord};
use common::vsl::{Records, Tag};

use crate::cli::Args;

/// Parse a comma-separated tag list (names are case-insensitive; a
/// trailing or leading `*` matches a prefix or suffix).
pub fn parse_taglist(list: &str) -> Result<Vec<Tag>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = name.to_ascii_lowercase();
        let hits: Vec<Tag> = if let Some(p) = lower.strip_suffix('*') {
            Tag::ALL.iter().copied().filter(|t| t.name().to_ascii_lowercase().starts_with(p)).collect()
        } else if let Some(s) = lower.strip_prefix('*') {
            Tag::ALL.iter().copied().filter(|t| t.name().to_ascii_lowercase().ends_with(s)).collect()
        } else {
            Tag::from_name(name).into_iter().collect()
        };
        if hits.is_empty() {
            return Err(format!("unknown tag \"{name}\""));
        }
        out.extend(hits);
    }
    Ok(out)
}

/// Which records to show.
pub struct Filter {
    include: Option<HashSet<Tag>>,
    exclude: HashSet<Tag>,
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Filter, String> {
        let mut inc = HashSet::new();
        for l in include {
            inc.extend(parse_taglist(l)?);
        }
        let mut exc = HashSet::new();
        for l in exclude {
            exc.extend(parse_taglist(l)?);
        }
        Ok(Filter { include: (!include.is_empty()).then_some(inc), exclude: exc })
    }
    fn shows(&self, t: Tag) -> bool {
        !self.exclude.contains(&t) && self.include.as_ref().is_none_or(|i| i.contains(&t))
    }
}

/// Write one group in varnishlog's layout.
pub fn write_group(out: &mut impl Write, g: &Group, raw: bool, filter: &Filter) -> std::io::Result<()> {
    if raw {
        for (_, tx) in &g.txs {
            for r in tx.records.iter().filter(|r| filter.shows(r.tag)) {
                write_raw(out, r)?;
            }
        }
        return Ok(());
    }
    for (level, tx) in &g.txs {
        let stars = "*".repeat(*level);
        writeln!(out, "{stars:<3} << {:<8} >> {:<10}", tx.kind.label(), tx.vxid)?;
        let dashes = "-".repeat(*level);
        for r in tx.records.iter().filter(|r| filter.shows(r.tag)) {
            writeln!(out, "{dashes:<3} {:<14} {}", r.tag.name(), r.text())?;
        }
    }
    writeln!(out)
}

fn write_raw(out: &mut impl Write, r: &OwnedRecord) -> std::io::Result<()> {
    writeln!(out, "{:>10} {:<14} {} {}", r.vxid, r.tag.name(), r.side.letter(), r.text())
}

/// Parse `-t`: seconds, or "off".
pub fn parse_wait(v: Option<&str>, dump: bool) -> Result<Option<Duration>, String> {
    match v {
        None if dump => Ok(Some(Duration::ZERO)),
        None | Some("off") => Ok(None),
        Some(s) => s
            .parse::<f64>()
            .ok()
            .filter(|f| *f >= 0.0)
            .map(|f| Some(Duration::from_secs_f64(f)))
            .ok_or_else(|| format!("-t {s}: expected seconds or \"off\"")),
    }
}

/// Run cache-log. Returns Err with a message for main to print.
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    let filter = Filter::new(&args.include, &args.exclude)?;
    let dir = common::instance::resolve(args.name.as_deref());
    let wait = parse_wait(args.wait.as_deref(), args.dump)?;
    let opts = follow::Options { dump: args.dump, wait: wait.filter(|w| !w.is_zero()) };
    let raw = args.grouping == Grouping::Raw;
    let timeout = Duration::from_secs_f64(args.timeout.max(0.0));
    let mut grouper = Grouper::new(args.grouping);
    let mut groups = Vec::new();
    let mut io_err: Option<std::io::Error> = None;
    let res = follow::follow(&dir, &opts, |ev| {
        match ev {
            Event::Records(buf) => {
                let now = Instant::now();
                for r in Records::new(buf) {
                    grouper.feed(&r, now, &mut groups);
                }
            }
            Event::Notice(n) => {
                let _ = out.flush();
                eprintln!("cache-log: {n}");
            }
            Event::Flush => grouper.flush(&mut groups),
            Event::Idle => grouper.expire(Instant::now(), timeout, &mut groups),
        }
        for g in groups.drain(..) {
            if let Err(e) = write_group(out, &g, raw, &filter) {
                io_err = Some(e);
                return Flow::Stop;
            }
        }
        if let Err(e) = out.flush() {
            io_err = Some(e);
            return Flow::Stop;
        }
        Flow::Continue
    });
    match io_err {
        // A closed pipe (`| head`) is not an error.
        Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Some(e) => return Err(format!("writing output: {e}")),
        None => {}
    }
    res.map_err(|e| e.to_string())
}
