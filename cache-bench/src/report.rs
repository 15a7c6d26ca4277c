//! A run's results for people and scripts: the text summary, the `--json`
//! summary (a documented contract: schema/summary.schema.json), the
//! per-second CSV, and the one-row-per-run history CSV.

use std::io::Write;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::plan::Plan;
use crate::stats::{max_ms, mean_ms, ms_at, Errors, Recorder};

/// Print to stdout; a reader that went away (`| head`) ends us quietly.
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}

/// Server counters sampled once a second (`--stat`): deltas per second.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServerSecond {
    pub client_req: u64,
    pub cache_hit: u64,
    pub cache_miss: u64,
    pub backend_req: u64,
}

/// What a run was, beside what it measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub label: String,
    pub target: String,
    /// RFC 3339, UTC.
    pub started: String,
    pub duration_s: f64,
    pub plan: Plan,
}

pub fn percentiles(h: &Histogram<u64>) -> Value {
    json!({
        "p50": round3(ms_at(h, 0.5)),
        "p90": round3(ms_at(h, 0.9)),
        "p99": round3(ms_at(h, 0.99)),
        "p999": round3(ms_at(h, 0.999)),
        "max": round3(max_ms(h)),
        "mean": round3(mean_ms(h)),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The fields every result has, for the whole run and for each agent.
pub fn core(r: &Recorder, duration_s: f64) -> Value {
    let looked = r.hits + r.misses;
    json!({
        "requests": r.requests,
        "errors": r.errors,
        "duration_s": round3(duration_s),
        "rps": round3(if duration_s > 0.0 { r.requests as f64 / duration_s } else { 0.0 }),
        "bytes": r.bytes,
        "latency_ms": percentiles(&r.latency),
        "ttfb_ms": percentiles(&r.ttfb),
        "hits": r.hits,
        "misses": r.misses,
        "hit_rate": if looked > 0 { round3(r.hits as f64 / looked as f64) } else { 0.0 },
        "hit_latency_ms": percentiles(&r.hit_latency),
        "miss_latency_ms": percentiles(&r.miss_latency),
    })
}

/// The `--json` summary.
pub fn summary(meta: &Meta, r: &Recorder, agents: &[(String, Recorder, f64)], server: Option<&[ServerSecond]>) -> Value {
    let mut v = core(r, meta.duration_s);
    let p = &meta.plan;
    let o = v.as_object_mut().expect("an object");
    o.insert("version".into(), json!(1));
    o.insert("tool".into(), json!(format!("cache-bench {}", env!("CARGO_PKG_VERSION"))));
    o.insert("label".into(), json!(meta.label));
    o.insert("target".into(), json!(meta.target));
    o.insert("started".into(), json!(meta.started));
    o.insert("mode".into(), json!(if p.open_loop() { "open" } else { "closed" }));
    o.insert("conns".into(), json!(p.conns));
    o.insert("threads".into(), json!(p.threads));
    o.insert(
        "open_loop".into(),
        if p.open_loop() {
            json!({
                "rate": p.rate,
                "stages": p.stages,
                "dropped": r.dropped,
                "lag_ms": percentiles(&r.lag),
                "fine_pace": p.fine_pace,
            })
        } else {
            Value::Null
        },
    );
    if !agents.is_empty() {
        let list: Vec<Value> = agents
            .iter()
            .map(|(name, rec, d)| {
                let mut a = core(rec, *d);
                a.as_object_mut().expect("an object").insert("agent".into(), json!(name));
                a
            })
            .collect();
        o.insert("agents".into(), json!(list));
    }
    if let Some(s) = server {
        let sum = |f: fn(&ServerSecond) -> u64| s.iter().map(f).sum::<u64>();
        let (hit, miss) = (sum(|x| x.cache_hit), sum(|x| x.cache_miss));
        o.insert(
            "server".into(),
            json!({
                "client_req": sum(|x| x.client_req),
                "cache_hit": hit,
                "cache_miss": miss,
                "backend_req": sum(|x| x.backend_req),
                "hit_rate": if hit + miss > 0 { round3(hit as f64 / (hit + miss) as f64) } else { 0.0 },
            }),
        );
    }
    v
}

fn human_bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{x:.0} {}", units[u])
    } else {
        format!("{x:.2} {}", units[u])
    }
}

fn pct_line(name: &str, h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return format!("  {name:<11} -\n");
    }
    format!(
        "  {name:<11} p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3} ms\n",
        ms_at(h, 0.5),
        ms_at(h, 0.9),
        ms_at(h, 0.99),
        ms_at(h, 0.999),
        max_ms(h),
        mean_ms(h)
    )
}

fn errors_text(e: &Errors) -> String {
    if e.total == 0 {
        return "0".into();
    }
    let kinds = [("connect", e.connect), ("timeout", e.timeout), ("status", e.status), ("short body", e.short_body), ("io", e.io)];
    let parts: Vec<String> = kinds.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
    format!("{} ({})", e.total, parts.join(", "))
}

/// The readable summary.
pub fn text(meta: &Meta, r: &Recorder, agents: &[(String, Recorder, f64)], server: Option<&[ServerSecond]>) -> String {
    let p = &meta.plan;
    let d = meta.duration_s.max(1e-9);
    let model = match (p.open_loop(), p.rate) {
        (true, Some(rate)) => format!("open loop at {rate} req/s"),
        (true, None) => format!("open loop in {} stage(s)", p.stages.len()),
        _ => "closed loop".into(),
    };
    let conns = match (p.h2, p.requests_per_conn) {
        (true, _) => format!("{} HTTP/2 connection(s) x {} stream(s)", p.conns, p.streams),
        (false, Some(1)) => format!("{} connection(s), a new one per request", p.conns),
        _ => format!("{} connection(s)", p.conns),
    };
    let mut s = format!(
        "cache-bench: {:.1} s, {model}, {conns}, {} thread(s), {} URL(s) on {}\n",
        meta.duration_s,
        p.threads,
        p.urls.len(),
        meta.target
    );
    s += &format!("  requests    {} ({:.1}/s)   errors {}\n", r.requests, r.requests as f64 / d, errors_text(&r.errors));
    s += &format!("  bytes       {} ({}/s)\n", human_bytes(r.bytes as f64), human_bytes(r.bytes as f64 / d));
    s += &pct_line("latency", &r.latency);
    s += &pct_line("first byte", &r.ttfb);
    let looked = r.hits + r.misses;
    if looked > 0 {
        s += &format!("  hits        {} ({:.1}%), misses {}\n", r.hits, 100.0 * r.hits as f64 / looked as f64, r.misses);
        if r.hits > 0 {
            s += &pct_line("  hit", &r.hit_latency);
        }
        if r.misses > 0 {
            s += &pct_line("  miss", &r.miss_latency);
        }
    }
    if p.open_loop() {
        s += &format!(
            "  schedule    lag p99 {:.3} ms, max {:.3} ms; {} dropped (due but never sent){}\n",
            ms_at(&r.lag, 0.99),
            max_ms(&r.lag),
            r.dropped,
            if p.fine_pace { "; paced to the microsecond (--fine-pace)" } else { "" }
        );
    }
    if let Some(sv) = server {
        let sum = |f: fn(&ServerSecond) -> u64| sv.iter().map(f).sum::<u64>();
        let (hit, miss) = (sum(|x| x.cache_hit), sum(|x| x.cache_miss));
        s += &format!(
            "  server      client_req {}, cache_hit {}, cache_miss {}, backend_req {}, hit rate {:.1}%\n",
            sum(|x| x.client_req),
            hit,
            miss,
            sum(|x| x.backend_req),
            if hit + miss > 0 { 100.0 * hit as f64 / (hit + miss) as f64 } else { 0.0 }
        );
    }
    for (name, a, ad) in agents {
        s += &format!(
            "  agent {name}: {} requests ({:.1}/s), errors {}, p99 {:.3} ms\n",
            a.requests,
            a.requests as f64 / ad.max(1e-9),
            errors_text(&a.errors),
            ms_at(&a.latency, 0.99)
        );
    }
    s
}

/// The per-second series: a header, then one row per second.
pub fn write_csv(path: &str, r: &Recorder, server: Option<&[ServerSecond]>) -> Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("cannot write {path}"))?;
    let mut header = vec!["second", "requests", "errors", "bytes", "hits", "misses", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"];
    if server.is_some() {
        header.extend(["srv_client_req", "srv_cache_hit", "srv_cache_miss", "srv_backend_req"]);
    }
    w.write_record(&header)?;
    for (i, s) in r.seconds.iter().enumerate() {
        let h = &s.latency;
        let mut row = vec![(i + 1).to_string(), s.requests.to_string(), s.errors.to_string(), s.bytes.to_string()];
        row.extend([s.hits.to_string(), s.misses.to_string()]);
        row.extend([ms_at(h, 0.5), ms_at(h, 0.9), ms_at(h, 0.99), ms_at(h, 0.999), max_ms(h)].map(|v| format!("{v:.3}")));
        if let Some(sv) = server {
            let x = sv.get(i).cloned().unwrap_or_default();
            row.extend([x.client_req, x.cache_hit, x.cache_miss, x.backend_req].map(|v| v.to_string()));
        }
        w.write_record(&row)?;
    }
    w.flush().with_context(|| format!("cannot write {path}"))?;
    Ok(())
}

pub const HISTORY_HEADER: [&str; 18] = [
    "time",
    "label",
    "version",
    "target",
    "mode",
    "conns",
    "threads",
    "rate",
    "duration_s",
    "requests",
    "rps",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "errors",
    "hit_rate",
];

/// `git describe --always --dirty` where it works, else our version.
pub fn version_of_here() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("cache-bench-{}", env!("CARGO_PKG_VERSION")))
}

/// Append one row for this run to the history file (its header first if
/// the file is new or empty).
pub fn append_history(path: &str, summary: &Value) -> Result<()> {
    let fresh = std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(true);
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("cannot append to {path}"))?;
    let g = |k: &str| summary.get(k).cloned().unwrap_or(Value::Null);
    let lat = |k: &str| format!("{:.3}", summary["latency_ms"][k].as_f64().unwrap_or(0.0));
    let num = |v: Value| match v {
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let text = |v: Value| v.as_str().unwrap_or("").to_string();
    let row = [
        text(g("started")),
        text(g("label")),
        version_of_here(),
        text(g("target")),
        text(g("mode")),
        num(g("conns")),
        num(g("threads")),
        num(summary["open_loop"]["rate"].clone()),
        num(g("duration_s")),
        num(g("requests")),
        num(g("rps")),
        lat("p50"),
        lat("p90"),
        lat("p99"),
        lat("p999"),
        lat("max"),
        num(summary["errors"]["total"].clone()),
        num(g("hit_rate")),
    ];
    let mut w = csv::Writer::from_writer(f);
    if fresh {
        w.write_record(HISTORY_HEADER)?;
    }
    w.write_record(&row)?;
    w.flush().with_context(|| format!("cannot append to {path}"))?;
    Ok(())
}

/// A CSV file cache-bench wrote (a run's series or a history): its header
/// and rows. Rows may be shorter or longer than the header (a history
/// appended to by several versions).
pub fn read_csv(path: &str) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut r = csv::ReaderBuilder::new().flexible(true).from_path(path).with_context(|| format!("cannot read {path}"))?;
    let header: Vec<String> = r.headers().with_context(|| format!("{path}: no header"))?.iter().map(str::to_string).collect();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.with_context(|| format!("{path}: not CSV"))?;
        if rec.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        rows.push(rec.iter().map(str::to_string).collect());
    }
    Ok((header, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_rows_keep_commas_and_quotes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.csv");
        let p = path.to_str().unwrap();
        let summary = serde_json::json!({"label": "with, comma and \"quotes\"", "rps": 12.5, "target": "http://x/?a=1,2"});
        append_history(p, &summary).unwrap();
        append_history(p, &summary).unwrap();
        let (header, rows) = read_csv(p).unwrap();
        assert_eq!(header, HISTORY_HEADER);
        assert_eq!(rows.len(), 2, "one header, two rows");
        assert_eq!(rows[1][1], "with, comma and \"quotes\"");
        assert_eq!(rows[1][3], "http://x/?a=1,2");
        assert_eq!(rows[1][10], "12.5");
    }
}
