//! cache-ncsa: one access-log line per client request, from the
//! shared-memory log, in varnishncsa's formats.

pub mod cli;
pub mod format;

use std::io::Write;
use std::time::Duration;

use common::follow;
use common::group::Grouping;

use crate::cli::Args;
use crate::format::Format;

/// Write the lines of one group (when it matches the query).
fn emit(
    out: &mut (impl Write + ?Sized),
    g: &common::group::Group,
    query: Option<&common::query::Query>,
    format: &Format,
) -> std::io::Result<()> {
    if query.is_some_and(|q| !q.matches(g)) {
        return Ok(());
    }
    for (_, tx) in &g.txs {
        if let Some(line) = format.render(tx) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// Run cache-ncsa, writing lines to `out`.
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    let format = Format::parse(&args.format)?;
    let query = args.query.as_deref().map(common::query::Query::parse).transpose().map_err(|e| e.to_string())?;
    if let Some(path) = &args.read {
        return common::vslfile::read_groups(path, Grouping::Vxid, out, |o, g| emit(o, g, query.as_ref(), &format));
    }
    let dir = common::instance::resolve(args.name.as_deref());
    let opts = follow::Options { dump: args.dump, wait: follow::parse_wait(args.wait.as_deref())? };
    follow::follow_groups("cache-ncsa", &dir, &opts, Grouping::Vxid, Duration::from_secs(120), out, |o, g| {
        emit(o, g, query.as_ref(), &format)
    })
}
