//! `--max-rate BOUND`: the highest constant rate the target serves while
//! BOUND (e.g. `p99<10ms`) holds, with no errors and no dropped sends.
//! A closed-loop step first measures what the target can take at all;
//! then open-loop steps bisect between 0 and a little above that.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::cli::RunArgs;
use crate::plan::Plan;
use crate::report::{self, Meta};

/// Bisection steps after the capacity probe.
const STEPS: usize = 7;

fn step(plan: &Plan, rate: Option<f64>, secs: f64, quiet: bool) -> Result<(Value, f64)> {
    let mut p = plan.clone();
    p.rate = rate;
    p.stages.clear();
    p.count = None;
    p.duration_s = Some(secs);
    let (rec, elapsed, _) = crate::local::run_local(&p, quiet)?;
    let meta =
        Meta { label: String::new(), target: String::new(), started: String::new(), duration_s: secs.min(elapsed.max(secs)), plan: p };
    Ok((report::summary(&meta, &rec, &[], None), rec.requests as f64 / secs))
}

pub fn max_rate(plan: &Plan, bound: &str, a: &RunArgs) -> Result<i32> {
    let check = crate::checks::parse(bound)?;
    let secs = plan.duration_s.unwrap_or(10.0).min(if a.duration.is_some() { f64::MAX } else { 5.0 });
    if secs < 1.0 {
        bail!("--max-rate needs steps of at least 1 s (-d)");
    }
    let say = |line: String| {
        if !a.json {
            crate::report::out(&format!("{line}\n"));
        }
    };
    let (_, capacity) = step(plan, None, secs, a.quiet)?;
    say(format!("closed loop with {} connection(s): {capacity:.0} req/s", plan.conns));
    if capacity <= 0.0 {
        bail!("the target answered nothing in the closed-loop step");
    }
    let meets = |s: &Value| -> Result<(bool, f64)> {
        let (v, holds) = check.judge(s)?;
        let clean = s["errors"]["total"].as_u64() == Some(0)
            && s["open_loop"]["dropped"].as_u64().unwrap_or(0) as f64 <= 0.01 * s["requests"].as_f64().unwrap_or(0.0);
        Ok((holds && clean, v))
    };
    let (mut lo, mut hi) = (0.0f64, capacity * 1.1);
    let mut steps = Vec::new();
    let mut best: Option<(f64, Value)> = None;
    for _ in 0..STEPS {
        let rate = if best.is_none() && lo == 0.0 && steps.is_empty() { capacity * 0.5 } else { (lo + hi) / 2.0 };
        if crate::local::interrupted() {
            break;
        }
        let (s, achieved) = step(plan, Some(rate.max(1.0)), secs, a.quiet)?;
        let (ok, v) = meets(&s)?;
        say(format!("  {rate:>10.0} req/s: achieved {achieved:.0}, {} = {v:.3}: {}", bound, if ok { "meets" } else { "misses" }));
        steps.push(json!({ "rate": rate, "achieved_rps": achieved, "value": v, "meets": ok }));
        if ok {
            lo = rate;
            best = Some((rate, s));
        } else {
            hi = rate;
        }
    }
    let result = json!({
        "bound": bound,
        "capacity_rps": capacity,
        "max_rate": best.as_ref().map(|(r, _)| *r),
        "summary_at_max": best.as_ref().map(|(_, s)| s.clone()),
        "steps": steps,
    });
    if a.json {
        crate::report::out(&(serde_json::to_string_pretty(&result)? + "\n"));
    } else {
        match &best {
            Some((r, _)) => crate::report::out(&format!("max rate meeting {bound}: {r:.0} req/s\n")),
            None => crate::report::out(&format!("no rate tried met {bound}\n")),
        }
    }
    Ok(if best.is_some() { 0 } else { 1 })
}
