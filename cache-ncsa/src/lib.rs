//! cache-ncsa: one access-log line per client request, from the
//! shared-memory log, in varnishncsa's formats.

pub mod cli;
pub mod format;

use std::io::Write;
use std::time::{Duration, Instant};

use common::follow::{self, Event, Flow};
use common::group::{Grouper, Grouping};
use common::vsl::Records;

use crate::cli::Args;
use crate::format::Format;

/// Parse `-t`: seconds, or "off".
fn parse_wait(v: Option<&str>) -> Result<Option<Duration>, String> {
    match v {
        None | Some("off") => Ok(None),
        Some(s) => s
            .parse::<f64>()
            .ok()
            .filter(|f| *f >= 0.0)
            .map(|f| Some(Duration::from_secs_f64(f)))
            .ok_or_else(|| format!("-t {s}: expected seconds or \"off\"")),
    }
}

/// Run cache-ncsa, writing lines to `out`.
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    let format = Format::parse(&args.format)?;
    let dir = common::instance::resolve(args.name.as_deref());
    let opts = follow::Options { dump: args.dump, wait: parse_wait(args.wait.as_deref())? };
    let mut grouper = Grouper::new(Grouping::Vxid);
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
                eprintln!("cache-ncsa: {n}");
            }
            Event::Flush => grouper.flush(&mut groups),
            Event::Idle => grouper.expire(Instant::now(), Duration::from_secs(120), &mut groups),
        }
        for g in groups.drain(..) {
            for (_, tx) in &g.txs {
                if let Some(line) = format.render(tx) {
                    if let Err(e) = writeln!(out, "{line}") {
                        io_err = Some(e);
                        return Flow::Stop;
                    }
                }
            }
        }
        if let Err(e) = out.flush() {
            io_err = Some(e);
            return Flow::Stop;
        }
        Flow::Continue
    });
    match io_err {
        Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Some(e) => return Err(format!("writing output: {e}")),
        None => {}
    }
    res.map_err(|e| e.to_string())
}
