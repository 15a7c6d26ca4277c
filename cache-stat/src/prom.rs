//! Prometheus exposition (text format 0.0.4), with the metric names the
//! common Varnish exporter (prometheus_varnish_exporter) gives varnishstat's
//! counters, so dashboards and alerts written for it work unchanged:
//!
//! - `varnish_` + group + `_` + field, lower case, dots as underscores;
//!   groups: `MAIN.backend_*` and `VBE.*` → `backend`, `MGT.*` → `mgt`,
//!   `SMA.*` → `sma`, `LCK.*` → `lck`, `MEMPOOL.*` → `mempool`, `MAIN.*` →
//!   `main`;
//! - the identifier in the middle of a name becomes a label: `ident` (for
//!   `SMA.s0.c_bytes`: `varnish_sma_c_bytes{ident="s0"}`), and for
//!   backends `backend` and `server` (`VBE.boot.default.req` →
//!   `varnish_backend_req{backend="default",server="boot"}`);
//! - `MAIN.fetch_*` share `varnish_main_fetch{code="..."}`.
//!
//! Unlike that exporter, which calls everything a gauge, counters are typed
//! `counter`. `varnish_up` says whether the daemon could be read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use common::counters::Kind;
use common::segment::CounterInfo;

/// A counter's Prometheus name and labels.
pub fn metric(varnish_name: &str) -> (String, Vec<(&'static str, String)>) {
    let (kind, rest) = varnish_name.split_once('.').unwrap_or(("MAIN", varnish_name));
    let (ident, field) = match rest.rsplit_once('.') {
        Some((i, f)) => (Some(i), f),
        None => (None, rest),
    };
    let mut labels = Vec::new();
    let (group, field) = match kind {
        "MAIN" => match field.strip_prefix("backend_") {
            Some(f) => ("backend".to_string(), f.to_string()),
            None => ("main".to_string(), field.to_string()),
        },
        "VBE" => ("backend".to_string(), field.to_string()),
        other => (other.to_ascii_lowercase(), field.to_string()),
    };
    match (kind, ident) {
        // The program's name comes first and has no dot; a backend's name
        // may have some (a dynamic one's address: `d(192.0.2.1:80)`).
        ("VBE", Some(i)) => match i.split_once('.') {
            Some((vcl, be)) => {
                labels.push(("backend", be.to_string()));
                labels.push(("server", vcl.to_string()));
            }
            None => labels.push(("backend", i.to_string())),
        },
        (_, Some(i)) => labels.push(("ident", i.to_string())),
        _ => {}
    }
    let mut name = format!("varnish_{group}_{}", field.to_ascii_lowercase());
    if let Some(code) = name.strip_prefix("varnish_main_fetch_") {
        labels.push(("code", code.to_string()));
        name = "varnish_main_fetch".to_string();
    }
    let name = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    (name, labels)
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// The exposition of `values` (None: the daemon is not there, only
/// `varnish_up 0`).
pub fn render(counters: Option<(&[CounterInfo], &[u64])>) -> String {
    let mut out = String::new();
    out.push_str("# HELP varnish_up Was the last read of cache-d's counters successful.\n# TYPE varnish_up gauge\n");
    let _ = writeln!(out, "varnish_up {}", u8::from(counters.is_some()));
    let Some((infos, values)) = counters else { return out };
    // Families in first-seen order; samples grouped under their family.
    let mut order: Vec<String> = Vec::new();
    let mut families: BTreeMap<String, (String, Kind, Vec<String>)> = BTreeMap::new();
    for (info, value) in infos.iter().zip(values) {
        let (name, labels) = metric(&info.name);
        let fam = families.entry(name.clone()).or_insert_with(|| {
            order.push(name.clone());
            let help = if name == "varnish_main_fetch" { "Number of backend fetches".to_string() } else { escape_help(&info.description) };
            (help, info.kind, Vec::new())
        });
        // MAIN.backend_conn (a counter) and VBE.*.conn (a gauge) share a
        // family: one that mixes kinds is a gauge.
        if fam.1 != info.kind {
            fam.1 = Kind::Gauge;
        }
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label(v))).collect();
        let sample = if labels.is_empty() { format!("{name} {value}") } else { format!("{name}{{{}}} {value}", labels.join(",")) };
        fam.2.push(sample);
    }
    for name in order {
        let (help, kind, samples) = &families[&name];
        let kind = if *kind == Kind::Counter { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in samples {
            out.push_str(s);
            out.push('\n');
        }
    }
    out
}

/// Serve `/metrics` on `addr` until the process ends: each scrape reads the
/// segment afresh through `read`.
/// Scrapes answered at once; more connections are closed at once.
const MAX_CONNS: usize = 256;
/// A scraper has this long to send its request head, of at most 8 KiB.
const HEAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);
const MAX_HEAD: usize = 8 << 10;

pub fn serve(addr: &str, read: impl Fn() -> String + Send + Sync + 'static) -> Result<(), String> {
    use std::io::{BufReader, Write};
    let listener = std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("cache-stat: serving /metrics on http://{bound}/metrics");
    let read = std::sync::Arc::new(read);
    let slots = common::bounded::Slots::new(MAX_CONNS);
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        // Past the cap, dropped: a scraper retries, a flood costs nothing.
        let Some(slot) = slots.take() else { continue };
        let read = read.clone();
        let _ = std::thread::Builder::new().spawn(move || {
            answer(stream, &*read);
            drop(slot);
        });
    }

    /// One request: its head read within the deadline and size, one answer.
    fn answer(stream: std::net::TcpStream, read: &dyn Fn() -> String) {
        let _ = stream.set_write_timeout(Some(std::time::Duration::from_secs(10)));
        let Ok(mut w) = stream.try_clone() else { return };
        let deadline = common::bounded::Deadline::in_(HEAD_DEADLINE);
        let mut r = BufReader::new(common::bounded::Deadlined::new(stream, deadline, None));
        let (mut line, mut h, mut total) = (Vec::new(), Vec::new(), 0);
        match common::bounded::read_line(&mut r, MAX_HEAD, &mut line) {
            Ok(n) if n > 0 => total += n,
            _ => return,
        }
        // Skip the rest of the head, within the same bounds.
        loop {
            match common::bounded::read_line(&mut r, MAX_HEAD - total.min(MAX_HEAD - 1), &mut h) {
                Ok(n) if n > 2 => total += n,
                Ok(_) => break,
                Err(_) => return,
            }
        }
        let line = String::from_utf8_lossy(&line);
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
            ("GET" | "HEAD", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", read()),
            ("GET" | "HEAD", _) => ("404 Not Found", "text/plain; charset=utf-8", "try /metrics\n".to_string()),
            _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "GET /metrics\n".to_string()),
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = w.write_all(head.as_bytes());
        if method != "HEAD" {
            let _ = w.write_all(body.as_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_varnish_exporter() {
        assert_eq!(metric("MAIN.client_req"), ("varnish_main_client_req".into(), vec![]));
        assert_eq!(metric("MAIN.backend_conn"), ("varnish_backend_conn".into(), vec![]));
        assert_eq!(
            metric("VBE.boot.d(192.0.2.1:80).req"),
            ("varnish_backend_req".into(), vec![("backend", "d(192.0.2.1:80)".to_string()), ("server", "boot".to_string())])
        );
        assert_eq!(metric("MGT.child_start"), ("varnish_mgt_child_start".into(), vec![]));
        assert_eq!(metric("SMA.s0.g_bytes"), ("varnish_sma_g_bytes".into(), vec![("ident", "s0".to_string())]));
        assert_eq!(
            metric("VBE.boot.default.happy"),
            ("varnish_backend_happy".into(), vec![("backend", "default".to_string()), ("server", "boot".to_string())])
        );
        assert_eq!(metric("MAIN.fetch_head"), ("varnish_main_fetch".into(), vec![("code", "head".to_string())]));
    }
}
