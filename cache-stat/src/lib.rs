//! cache-stat: the counters viewer. Script modes (`-1`, `-j`, `-l`,
//! `--prometheus`), a `/metrics` server (`--listen`), the interactive
//! screen ([`tui`]) on a terminal, and the `-1` listing every interval when
//! stdout is not one.

pub mod cli;
pub mod filter;
pub mod model;
pub mod prom;
pub mod tui;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::counters::{Format, Kind};
use common::segment::{CounterInfo, Segment, SegmentError};

use crate::cli::Args;
pub use crate::filter::Filter;

/// Attach, waiting up to `wait` (None = forever) for a daemon to appear.
pub fn attach(dir: &Path, wait: Option<Duration>) -> Result<Segment, SegmentError> {
    let start = Instant::now();
    let mut said = false;
    loop {
        match Segment::open(dir) {
            Ok(s) => return Ok(s),
            Err(e) if e.is_transient() && wait.is_none_or(|w| start.elapsed() < w) => {
                if !said {
                    eprintln!("cache-stat: {e}; waiting for it");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// One counter's current reading.
pub struct Reading<'a> {
    pub info: &'a CounterInfo,
    pub value: u64,
}

/// The counters the filter lets through, in segment order.
pub fn read<'a>(seg: &'a Segment, filter: &Filter) -> Vec<Reading<'a>> {
    seg.counters()
        .iter()
        .enumerate()
        .filter(|(_, c)| filter.shows(&c.name))
        .map(|(i, info)| Reading { info, value: seg.value(i) })
        .collect()
}

/// `-1`: name, value, per-second average or `.`, description.
pub fn write_once(out: &mut impl Write, rows: &[Reading<'_>], uptime: u64) -> std::io::Result<()> {
    let mut width = 18;
    for r in rows {
        width = width.max(r.info.name.len());
        write!(out, "{:<width$} {:>12} ", r.info.name, r.value)?;
        match r.info.kind {
            Kind::Counter if uptime > 0 => write!(out, "{:>12.2}", r.value as f64 / uptime as f64)?,
            Kind::Counter => write!(out, "{:>12.2}", 0.0)?,
            Kind::Gauge | Kind::Bitmap => write!(out, "{:>12}", ".  ")?,
        }
        writeln!(out, " {}", r.info.description)?;
    }
    Ok(())
}

/// `-j`: varnishstat's JSON layout (version 1).
pub fn to_json(rows: &[Reading<'_>], timestamp: &str) -> serde_json::Value {
    let mut counters = serde_json::Map::new();
    for r in rows {
        let flag = match r.info.kind {
            Kind::Counter => "c",
            Kind::Gauge => "g",
            Kind::Bitmap => "b",
        };
        let format = match r.info.format {
            Format::Integer => "i",
            Format::Bytes => "B",
            Format::Duration => "d",
            Format::Bitmap => "b",
        };
        counters.insert(
            r.info.name.clone(),
            serde_json::json!({ "description": r.info.description, "flag": flag, "format": format, "value": r.value }),
        );
    }
    serde_json::json!({ "version": 1, "timestamp": timestamp, "counters": counters })
}

/// `-l`: names and descriptions.
pub fn write_list(out: &mut impl Write, rows: &[Reading<'_>]) -> std::io::Result<()> {
    writeln!(out, "cache-stat -f option fields:")?;
    writeln!(out, "Field name                     Description")?;
    writeln!(out, "----------                     -----------")?;
    for r in rows {
        writeln!(out, "{:<30} {}", r.info.name, r.info.description)?;
    }
    Ok(())
}

/// Run cache-stat; errors are returned as messages for main.
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    let wait = common::log::follow::parse_wait(Some(&args.wait))?;
    let dir = common::instance::resolve(args.instance.name.as_deref());
    // Before the screen takes the terminal: a segment truncated under us
    // then gives the terminal back as it is now.
    common::segment::exit_on_sigbus(&dir);
    let filter = Filter::from_patterns(args.patterns());
    if let Some(addr) = &args.listen {
        let dir = dir.clone();
        let patterns = args.patterns();
        return prom::serve(addr, move || {
            let filter = Filter::from_patterns(patterns.clone());
            match model::Source::new(&dir).read() {
                model::Reading::Values { infos, values, .. } => {
                    let (i, v): (Vec<_>, Vec<_>) = infos.into_iter().zip(values).filter(|(c, _)| filter.shows(&c.name)).unzip();
                    prom::render(Some((&i, &v)))
                }
                model::Reading::Waiting(_) => prom::render(None),
            }
        });
    }
    let one_shot = args.once || args.json || args.list || args.prometheus;
    let interval = std::time::Duration::from_secs_f64(args.interval);
    if !one_shot {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
        let mut source = model::Source::new(&dir);
        if tty {
            let name = args.instance.name.clone().unwrap_or_else(|| dir.display().to_string());
            return tui::run(&mut source, tui::App::new(&name, filter, interval));
        }
        return repeat(&mut source, &filter, interval, out);
    }
    let seg = attach(&dir, wait).map_err(|e| e.to_string())?;
    let rows = read(&seg, &filter);
    let res = if args.list {
        write_list(out, &rows)
    } else if args.prometheus {
        let infos: Vec<_> = rows.iter().map(|r| r.info.clone()).collect();
        let values: Vec<u64> = rows.iter().map(|r| r.value).collect();
        out.write_all(prom::render(Some((&infos, &values))).as_bytes())
    } else if args.json {
        let ts = chrono::Local::now().format("%Y-%m-%dT%H:%M:%S").to_string();
        serde_json::to_writer_pretty(&mut *out, &to_json(&rows, &ts)).map_err(std::io::Error::other).and_then(|_| writeln!(out))
    } else {
        let uptime = seg.value_of("MAIN.uptime").unwrap_or(0);
        write_once(out, &rows, uptime)
    };
    finish(res.and_then(|_| out.flush()))
}

/// A closed pipe (`cache-stat | head`) is a normal end.
fn finish(res: std::io::Result<()>) -> Result<(), String> {
    match res {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing output: {e}")),
        Ok(()) => Ok(()),
    }
}

/// Not a terminal: the `-1` listing every interval, a blank line between
/// readings, following restarts; waiting is said once on stderr.
fn repeat(source: &mut model::Source, filter: &Filter, interval: std::time::Duration, out: &mut impl Write) -> Result<(), String> {
    let mut said_waiting = false;
    loop {
        match source.read() {
            model::Reading::Values { infos, values, .. } => {
                said_waiting = false;
                let rows: Vec<Reading<'_>> = infos
                    .iter()
                    .zip(&values)
                    .filter(|(c, _)| filter.shows(&c.name))
                    .map(|(info, &value)| Reading { info, value })
                    .collect();
                let uptime = infos.iter().position(|c| c.name == "MAIN.uptime").map_or(0, |i| values[i]);
                let res = write_once(out, &rows, uptime).and_then(|_| writeln!(out)).and_then(|_| out.flush());
                if res.is_err() {
                    return finish(res);
                }
            }
            model::Reading::Waiting(msg) => {
                if !said_waiting {
                    eprintln!("cache-stat: {msg}");
                    said_waiting = true;
                }
            }
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_rules_follow_varnishstat() {
        let f = Filter::new(&["^MAIN.s_*".into(), "MAIN.*".into()]);
        assert!(f.shows("MAIN.client_req"));
        assert!(!f.shows("MAIN.s_req_hdrbytes"));
        assert!(!f.shows("MGT.uptime"));
        let only_exclude = Filter::new(&["^MGT.*".into()]);
        assert!(only_exclude.shows("MAIN.uptime"));
        assert!(!only_exclude.shows("MGT.uptime"));
        assert!(Filter::new(&[]).shows("anything"));
    }

    #[test]
    fn include_exclude_globs_in_command_line_order() {
        let args = crate::cli::Args::try_parse_ordered(["cache-stat", "-X", "MAIN.s_req_*", "-f", "^MGT.*", "-I", "MAIN.s_*"]).unwrap();
        let want = [(false, "MAIN.s_req_*"), (false, "MGT.*"), (true, "MAIN.s_*")];
        assert_eq!(args.patterns, want.map(|(s, g)| (s, g.to_string())));
        let f = Filter::from_patterns(args.patterns);
        assert!(f.shows("MAIN.s_sess") && !f.shows("MAIN.s_req_hdrbytes") && !f.shows("MAIN.client_req"));
    }

    #[test]
    fn once_layout() {
        let info = |name: &str, kind| CounterInfo {
            name: name.into(),
            kind,
            level: common::counters::Level::Info,
            format: Format::Integer,
            description: "Desc".into(),
        };
        let (a, b) = (info("MAIN.client_req", Kind::Counter), info("MAIN.n_object", Kind::Gauge));
        let rows = [Reading { info: &a, value: 100 }, Reading { info: &b, value: 3 }];
        let mut out = Vec::new();
        write_once(&mut out, &rows, 50).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "MAIN.client_req             100         2.00 Desc\nMAIN.n_object                 3          .   Desc\n");
        let j = to_json(&rows, "2026-01-01T00:00:00");
        assert_eq!(j["counters"]["MAIN.client_req"]["value"], 100);
        assert_eq!(j["counters"]["MAIN.n_object"]["flag"], "g");
        assert_eq!(j["version"], 1);
    }
}
