//! cache-log: prints the shared-memory log as varnishlog does.

pub mod cli;

use std::io::Write;
use std::time::Duration;

use common::log::follow;
use common::log::group::{Group, Grouper, Grouping, OwnedRecord};
use common::log::vsl::{Side, Tag};

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

/// What the selection options say of one tag.
#[derive(Clone, Debug, Default)]
struct TagSel {
    /// -i (true) or -x (false), the last one given for this tag.
    listed: Option<bool>,
    /// -I: shown when the payload matches one of these.
    show_if: Vec<regex::Regex>,
    /// -X: hidden when the payload matches one of these.
    hide_if: Vec<regex::Regex>,
}

/// Which records to show, as varnishlog decides: a record whose payload
/// matches a -X of its tag is hidden; else a tag named by -i is shown, by
/// -x hidden; else a tag with -I regexes is shown when one matches; else
/// everything is shown, unless the first selection option was an include
/// (-i or -I).
pub struct Filter {
    tags: Vec<TagSel>,
    default_show: bool,
}

/// Parse `[TAG:]REGEX` (-I / -X); without a tag list, every tag.
fn tag_regex(spec: &str) -> Result<(Vec<Tag>, regex::Regex), String> {
    let (tags, re) = match spec.split_once(':') {
        Some((t, r)) if !t.is_empty() && parse_taglist(t).is_ok() => (parse_taglist(t)?, r),
        _ => (Tag::ALL.to_vec(), spec),
    };
    let re = regex::Regex::new(re).map_err(|e| format!("bad regular expression \"{re}\": {e}"))?;
    Ok((tags, re))
}

impl Filter {
    /// From the selection options in the order given: ('i'|'x'|'I'|'X', argument).
    pub fn new(selection: &[(char, String)]) -> Result<Filter, String> {
        let default_show = !matches!(selection.first(), Some(('i' | 'I', _)));
        let mut tags = vec![TagSel::default(); 256];
        for (opt, arg) in selection {
            match opt {
                'i' | 'x' => {
                    for t in parse_taglist(arg)? {
                        tags[t as usize].listed = Some(*opt == 'i');
                    }
                }
                _ => {
                    let (list, re) = tag_regex(arg)?;
                    for t in list {
                        let slot = &mut tags[t as usize];
                        if *opt == 'I' {
                            slot.show_if.push(re.clone());
                        } else {
                            slot.hide_if.push(re.clone());
                        }
                    }
                }
            }
        }
        Ok(Filter { tags, default_show })
    }

    fn shows(&self, r: &OwnedRecord) -> bool {
        let sel = &self.tags[r.tag as usize];
        if !sel.hide_if.is_empty() && sel.hide_if.iter().any(|re| re.is_match(&r.text())) {
            return false;
        }
        if let Some(listed) = sel.listed {
            return listed;
        }
        if !sel.show_if.is_empty() {
            return sel.show_if.iter().any(|re| re.is_match(&r.text()));
        }
        self.default_show
    }
}

/// The -i/-x/-I/-X options of a command line, in their order (clap keeps
/// each kind apart; the order matters).
pub fn selection_order(argv: &[String]) -> Vec<(char, String)> {
    let mut out = Vec::new();
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        let Some(rest) = a.strip_prefix('-').filter(|r| !r.starts_with('-')) else { continue };
        for (i, c) in rest.char_indices() {
            if matches!(c, 'i' | 'x' | 'I' | 'X') {
                let val = &rest[i + 1..];
                let val = if val.is_empty() { it.next().cloned().unwrap_or_default() } else { val.to_string() };
                out.push((c, val));
                break;
            }
            // Options that take a value end the cluster.
            if matches!(c, 'g' | 'n' | 'q' | 'Q' | 'r' | 'w' | 'T' | 't' | 'k') {
                if rest.len() == i + 1 {
                    it.next();
                }
                break;
            }
        }
    }
    out
}

/// Write one group in varnishlog's layout.
pub fn write_group(out: &mut (impl Write + ?Sized), g: &Group, raw: bool, verbose: bool, filter: &Filter) -> std::io::Result<()> {
    if raw {
        for (_, tx) in &g.txs {
            for r in tx.records.iter().filter(|r| filter.shows(r)) {
                write_raw(out, r)?;
            }
        }
        return Ok(());
    }
    for (level, tx) in &g.txs {
        let stars = "*".repeat(*level);
        if verbose {
            writeln!(out, "{stars:<3} {:10} << {:<8} >>   {:<10}", "", tx.kind.label(), tx.vxid)?;
        } else {
            writeln!(out, "{stars:<3} << {:<8} >> {:<10}", tx.kind.label(), tx.vxid)?;
        }
        let dashes = "-".repeat(*level);
        for r in tx.records.iter().filter(|r| filter.shows(r)) {
            if verbose {
                writeln!(out, "{dashes:<3} {:>10} {:<14} {} {}", r.vxid, r.tag.name(), r.side.letter(), shown(r))?;
            } else {
                writeln!(out, "{dashes:<3} {:<14} {}", r.tag.name(), shown(r))?;
            }
        }
    }
    writeln!(out)
}

/// --json: one object per transaction.
pub fn write_json(out: &mut (impl Write + ?Sized), g: &Group, filter: &Filter) -> std::io::Result<()> {
    for (level, tx) in &g.txs {
        let records: Vec<serde_json::Value> = tx
            .records
            .iter()
            .filter(|r| filter.shows(r))
            .map(|r| serde_json::json!({"tag": r.tag.name(), "side": r.side.letter().to_string(), "payload": r.text()}))
            .collect();
        let v = serde_json::json!({
            "vxid": tx.vxid, "type": tx.kind.label(), "level": level, "parent": tx.parent,
            "complete": tx.complete, "records": records,
        });
        serde_json::to_writer(&mut *out, &v).map_err(std::io::Error::other)?;
        writeln!(out)?;
    }
    Ok(())
}

/// -b / -c / -E (call only when one is set): the transactions
/// varnishlog shows then: requests with -c (ESI subrequests only with -E),
/// backend requests with -b, no sessions; raw records of the side(s) asked.
fn sides(g: &Group, client: bool, backend: bool, esi: bool) -> Option<Group> {
    let txs: Vec<(usize, common::log::group::Tx)> = g
        .txs
        .iter()
        .filter(|(_, t)| {
            use common::log::group::TxKind;
            match t.kind {
                TxKind::BeReq => backend,
                TxKind::Request => client && (esi || !t.linked || t.restart),
                TxKind::Session => false,
                TxKind::Record => {
                    let side = |s| t.records.iter().any(|r| r.side == s);
                    (!client || side(Side::Client)) && (!backend || side(Side::Backend))
                }
            }
        })
        .cloned()
        .collect();
    (!txs.is_empty()).then_some(Group { txs })
}

fn write_raw(out: &mut (impl Write + ?Sized), r: &OwnedRecord) -> std::io::Result<()> {
    writeln!(out, "{:>10} {:<14} {} {}", r.vxid, r.tag.name(), r.side.letter(), shown(r))
}

/// A record's payload as varnishlog prints it: the tags Varnish marks
/// unsafe (Debug, HttpGarbage, Hash) in double quotes, bytes outside
/// printable ASCII and the terminating NUL as %XX; the others as text.
fn shown(r: &OwnedRecord) -> std::borrow::Cow<'_, str> {
    if !matches!(r.tag, Tag::Debug | Tag::HttpGarbage | Tag::Hash) {
        return r.text();
    }
    let mut s = String::with_capacity(r.payload.len() + 5);
    s.push('"');
    for &b in r.payload.iter().chain(&[0]) {
        if (b' '..=b'~').contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02x}"));
        }
    }
    s.push('"');
    s.into()
}

/// The -w file: records go out one group per write, so a reopen asked by
/// SIGHUP happens between groups (the renamed file keeps whole groups).
struct VslOut {
    path: std::path::PathBuf,
    w: std::io::BufWriter<std::fs::File>,
}

impl Write for VslOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if common::background::REOPEN.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.w.flush()?;
            self.w = common::log::vslfile::create(&self.path, true).map_err(std::io::Error::other)?;
        }
        self.w.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

/// Run cache-log. Returns Err with a message for main to print.
pub fn run(args: Args, out: &mut impl Write) -> Result<(), String> {
    // The order of -i/-x/-I/-X matters; main passes it (else kinds in turn).
    let selection = if args.selection.is_empty() {
        let kinds = [('i', &args.include), ('x', &args.exclude), ('I', &args.include_regex), ('X', &args.exclude_regex)];
        kinds.iter().flat_map(|(c, v)| v.iter().map(move |a| (*c, a.clone()))).collect()
    } else {
        args.selection.clone()
    };
    let filter = Filter::new(&selection)?;
    let query = common::log::query::Query::from_options(&args.query, &args.query_file)?;
    let raw = args.grouping == Grouping::Raw;
    let mut shown = 0u64;
    // "-w -" writes the binary log to stdout, as varnishlog does.
    let to_stdout = args.output.write.as_deref() == Some(std::path::Path::new("-"));
    let mut file = match args.output.write.as_deref() {
        Some(p) if !to_stdout => Some(VslOut { w: common::log::vslfile::create(p, args.output.append)?, path: p.to_path_buf() }),
        _ => None,
    };
    let writing = args.output.write.is_some();
    let _pid = common::background::start(args.output.daemon, args.output.pid_file.as_deref())?;
    let mut emit = |out: &mut dyn Write, g: &Group| -> std::io::Result<()> {
        if query.as_ref().is_some_and(|q| !q.matches(g)) || args.keep.is_some_and(|k| shown >= k) {
            return Ok(());
        }
        let one_side;
        let client = args.client || args.esi;
        let g = if client || args.backend {
            match sides(g, client, args.backend, args.esi) {
                Some(x) => {
                    one_side = x;
                    &one_side
                }
                None => return Ok(()),
            }
        } else {
            g
        };
        shown += 1;
        if args.keep.is_some_and(|k| shown >= k) {
            follow::STOP_REQUESTED.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if g.txs.iter().any(|(_, t)| !t.complete) {
            // Flushed after -T or at the end without its End record.
            let v: Vec<String> = g.txs.iter().filter(|(_, t)| !t.complete).map(|(_, t)| t.vxid.to_string()).collect();
            eprintln!("cache-log: incomplete transaction(s) {} (no End record seen)", v.join(" "));
        }
        match () {
            _ if writing => common::log::vslfile::write_group(out, g),
            _ if args.json => write_json(out, g, &filter),
            _ => write_group(out, g, raw, args.verbose, &filter),
        }
    };
    // With -w the file is the output (flushed after every batch, as
    // stdout is).
    let out: &mut dyn Write = match file.as_mut() {
        Some(f) => f,
        None => out,
    };
    if to_stdout {
        out.write_all(&common::log::vslfile::FILE_ID).map_err(|e| format!("writing output: {e}"))?;
    }
    let res = match &args.read {
        Some(path) => common::log::vslfile::read_groups(path, Grouper::new(args.grouping), out, |o, g| emit(o, g)),
        None => {
            let dir = common::instance::resolve(args.instance.name.as_deref());
            let opts = follow::Options { dump: args.dump, wait: follow::parse_wait(args.wait.as_deref())? };
            let timeout = Duration::from_secs_f64(args.timeout.max(0.0));
            follow::follow_groups("cache-log", &dir, &opts, Grouper::new(args.grouping), timeout, out, |o, g| emit(o, g))
        }
    };
    out.flush().map_err(|e| format!("writing output: {e}"))?;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_tags_print_quoted_with_their_nul() {
        let rec = |tag, payload: &[u8]| OwnedRecord { tag, side: Side::Client, vxid: 1, payload: payload.to_vec() };
        assert_eq!(shown(&rec(Tag::Hash, b"/path")), "\"/path%00\"");
        assert_eq!(shown(&rec(Tag::HttpGarbage, b"GET\r\n\x7f")), "\"GET%0d%0a%7f%00\"");
        assert_eq!(shown(&rec(Tag::ReqUrl, b"/path")), "/path");
    }
}
