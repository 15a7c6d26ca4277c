//! Pass/fail for cron: `--fail-if 'p99>20ms'` thresholds and
//! `--baseline FILE.json` comparisons, judged on the JSON summary.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

/// One `--fail-if` threshold: fails when `metric op value` holds.
#[derive(Clone, Debug)]
pub struct Check {
    pub text: String,
    metric: String,
    op: Op,
    value: f64,
}

/// The metrics a check can name (besides dotted paths into the summary,
/// such as `errors.timeout` or `ttfb_ms.p99`).
pub const METRICS: &str = "p50 p90 p99 p999 max mean (latency, ms), ttfb_p50..ttfb_max, rps, requests, bytes, errors, error_rate (%), \
hits, misses, hit_rate (%), dropped, lag_p99 (ms)";

pub fn parse(s: &str) -> Result<Check> {
    let ops = [(">=", Op::Ge), ("<=", Op::Le), ("==", Op::Eq), ("!=", Op::Ne), (">", Op::Gt), ("<", Op::Lt), ("=", Op::Eq)];
    let (at, len, op) = ops
        .iter()
        .filter_map(|(t, op)| s.find(t).map(|i| (i, t.len(), *op)))
        .min_by_key(|(i, len, _)| (*i, usize::MAX - len))
        .ok_or_else(|| anyhow!("--fail-if '{s}': no comparison (use > < >= <= == !=, e.g. 'p99>20ms')"))?;
    let metric = s[..at].trim().to_ascii_lowercase();
    let raw = s[at + len..].trim();
    if metric.is_empty() {
        bail!("--fail-if '{s}': no metric before the comparison");
    }
    let value = parse_value(&metric, raw).with_context(|| format!("--fail-if '{s}'"))?;
    let c = Check { text: s.trim().to_string(), metric, op, value };
    Ok(c)
}

/// `20ms`, `1.5s`, `500us`, `50000`, `50k`, `2M`, `1%`.
fn parse_value(metric: &str, raw: &str) -> Result<f64> {
    let split = raw.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).unwrap_or(raw.len());
    let (n, unit) = raw.split_at(split);
    let v: f64 = n.parse().map_err(|_| anyhow!("'{raw}' is not a number"))?;
    let timed = is_time(metric);
    Ok(match unit.trim() {
        "" => v,
        "ms" if timed => v,
        "s" if timed => v * 1000.0,
        "us" | "µs" if timed => v / 1000.0,
        "%" => v,
        "k" | "K" => v * 1e3,
        "M" => v * 1e6,
        u => bail!("unit '{u}' does not fit {metric}"),
    })
}

fn is_time(metric: &str) -> bool {
    let m = metric.trim_start_matches("ttfb_").trim_start_matches("lag_");
    matches!(m, "p50" | "p90" | "p99" | "p999" | "max" | "mean") || metric.contains("_ms.")
}

/// The value of `metric` in a summary.
pub fn value_of(metric: &str, s: &Value) -> Option<f64> {
    let f = |v: &Value| v.as_f64();
    let pct = ["p50", "p90", "p99", "p999", "max", "mean"];
    if pct.contains(&metric) {
        return f(&s["latency_ms"][metric]);
    }
    if let Some(p) = metric.strip_prefix("ttfb_").filter(|p| pct.contains(p)) {
        return f(&s["ttfb_ms"][p]);
    }
    if let Some(p) = metric.strip_prefix("lag_").filter(|p| pct.contains(p)) {
        return f(&s["open_loop"]["lag_ms"][p]).or(Some(0.0));
    }
    match metric {
        "errors" => f(&s["errors"]["total"]),
        "error_rate" => {
            let (e, r) = (f(&s["errors"]["total"])?, f(&s["requests"])?);
            Some(if e + r > 0.0 { 100.0 * e / (e + r) } else { 0.0 })
        }
        "hit_rate" => f(&s["hit_rate"]).map(|x| x * 100.0),
        "dropped" => f(&s["open_loop"]["dropped"]).or(Some(0.0)),
        m => {
            let mut v = s;
            for part in m.split('.') {
                v = v.get(part)?;
            }
            f(v)
        }
    }
}

impl Check {
    /// (the measured value, whether the check fails).
    pub fn judge(&self, s: &Value) -> Result<(f64, bool)> {
        let v = value_of(&self.metric, s).ok_or_else(|| anyhow!("--fail-if '{}': no metric '{}' ({METRICS})", self.text, self.metric))?;
        let fails = match self.op {
            Op::Gt => v > self.value,
            Op::Ge => v >= self.value,
            Op::Lt => v < self.value,
            Op::Le => v <= self.value,
            Op::Eq => v == self.value,
            Op::Ne => v != self.value,
        };
        Ok((v, fails))
    }
}

/// Compare with a saved `--json` summary: throughput may not drop, nor
/// p50/p99 latency or the error rate rise, nor the hit rate fall, by more
/// than `tolerance` (a fraction). Returns the comparisons made.
pub fn against_baseline(path: &str, s: &Value, tolerance: f64) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the baseline {path}"))?;
    let base: Value = serde_json::from_str(&text).with_context(|| format!("{path} is not a cache-bench --json summary"))?;
    if base.get("requests").is_none() {
        bail!("{path} is not a cache-bench --json summary");
    }
    let mut out = Vec::new();
    // (metric, higher is better)
    for (m, up) in [("rps", true), ("p50", false), ("p99", false), ("hit_rate", true), ("error_rate", false)] {
        let (Some(b), Some(v)) = (value_of(m, &base), value_of(m, s)) else { continue };
        let failed = if up {
            v < b * (1.0 - tolerance) - 1e-9
        } else {
            // A floor of 0.1 (ms, or percentage points) so noise on tiny
            // values is not a regression.
            v > (b * (1.0 + tolerance)).max(b + 0.1)
        };
        out.push(json!({ "check": format!("baseline {m}"), "baseline": b, "value": v, "failed": failed }));
    }
    Ok(out)
}

/// `10%` or `0.1`: a fraction.
pub fn parse_tolerance(s: &str) -> Result<f64> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| anyhow!("--tolerance {s}: a percentage such as 10%"))?;
    if !(0.0..=10.0).contains(&v) {
        bail!("--tolerance {s}: out of range");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Value {
        json!({
            "requests": 1000, "rps": 52000.0, "errors": {"total": 2, "timeout": 2},
            "latency_ms": {"p50": 0.4, "p90": 1.0, "p99": 21.0, "p999": 30.0, "max": 40.0, "mean": 0.5},
            "ttfb_ms": {"p99": 3.0}, "hit_rate": 0.91, "open_loop": null
        })
    }

    #[test]
    fn thresholds() {
        let s = summary();
        let j = |t: &str| parse(t).unwrap().judge(&s).unwrap();
        assert_eq!(j("p99>20ms"), (21.0, true));
        assert_eq!(j("p99 > 0.025s"), (21.0, false));
        assert!(!j("rps<50000").1);
        assert!(j("rps<60k").1);
        assert!(j("errors>0").1);
        assert!(j("errors.timeout>=2").1);
        assert!(j("hit_rate<95%").1);
        assert!((j("error_rate>0.1%").0 - 0.1996).abs() < 1e-3);
        assert!(!j("ttfb_p99>5ms").1);
        assert!(parse("p99").is_err());
        assert!(parse("p99>20parsecs").is_err());
        assert!(parse("nosuch>1").unwrap().judge(&s).is_err());
    }

    #[test]
    fn baseline_regressions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.json");
        std::fs::write(&path, summary().to_string()).unwrap();
        let p = path.to_str().unwrap();
        let same = against_baseline(p, &summary(), 0.1).unwrap();
        assert!(same.iter().all(|c| c["failed"] == false), "{same:?}");
        let mut slower = summary();
        slower["rps"] = json!(40000.0);
        let r = against_baseline(p, &slower, 0.1).unwrap();
        assert!(r.iter().any(|c| c["check"] == "baseline rps" && c["failed"] == true));
        assert!(against_baseline(dir.path().join("none").to_str().unwrap(), &summary(), 0.1).is_err());
    }
}
