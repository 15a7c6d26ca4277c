//! cache-log: prints the shared-memory log as varnishlog does.

pub mod cli;

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use common::follow;
use common::group::{Group, Grouping, OwnedRecord};
use common::vsl::Tag;

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
pub fn write_group(out: &mut (impl Write + ?Sized), g: &Group, raw: bool, filter: &Filter) -> std::io::Result<()> {
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

fn write_raw(out: &mut (impl Write + ?Sized), r: &OwnedRecord) -> std::io::Result<()> {
    writeln!(out, "{:>10} {:<14} {} {}", r.vxid, r.tag.name(), r.side.letter(), r.text())
}

/// Run cache-log. Returns Err with a message for main to print.
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    let filter = Filter::new(&args.include, &args.exclude)?;
    let query = args.query.as_deref().map(common::query::Query::parse).transpose().map_err(|e| e.to_string())?;
    let raw = args.grouping == Grouping::Raw;
    let mut file = args.write.as_deref().map(|p| common::vslfile::create(p, args.append)).transpose()?;
    let mut emit = |out: &mut dyn Write, g: &Group| -> std::io::Result<()> {
        if query.as_ref().is_some_and(|q| !q.matches(g)) {
            return Ok(());
        }
        match file.as_mut() {
            Some(f) => common::vslfile::write_group(f, g),
            None => write_group(out, g, raw, &filter),
        }
    };
    let res = match &args.read {
        Some(path) => common::vslfile::read_groups(path, args.grouping, out as &mut dyn Write, |o, g| emit(o, g)),
        None => {
            let dir = common::instance::resolve(args.name.as_deref());
            let opts = follow::Options { dump: args.dump, wait: follow::parse_wait(args.wait.as_deref())? };
            let timeout = Duration::from_secs_f64(args.timeout.max(0.0));
            follow::follow_groups("cache-log", &dir, &opts, args.grouping, timeout, out as &mut dyn Write, |o, g| emit(o, g))
        }
    };
    if let Some(mut f) = file {
        f.flush().map_err(|e| format!("writing {}: {e}", args.write.as_deref().unwrap_or(std::path::Path::new("")).display()))?;
    }
    res
}
