//! What the views show, apart from how: counter readings over time, rates,
//! varnishstat's hit-rate windows, and the series the charts draw. Fed one
//! reading per refresh; a child restart (the segment's generation moves on,
//! or a counter goes backwards) starts the arithmetic over instead of
//! showing negative rates.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use common::counters::Kind;
use common::segment::{CounterInfo, Health, Segment};

/// How many refreshes the charts keep (10 minutes at the default 1 s).
pub const CHART_SAMPLES: usize = 600;

/// A moving average over the last `nmax` samples that fills up from 0, as
/// varnishstat's hit-rate windows do: while fewer than `nmax` samples have
/// come, it is their plain mean.
#[derive(Clone, Debug)]
pub struct MovingAvg {
    nmax: u32,
    n: u32,
    acc: f64,
}

impl MovingAvg {
    pub fn new(nmax: u32) -> MovingAvg {
        MovingAvg { nmax, n: 0, acc: 0.0 }
    }
    pub fn push(&mut self, v: f64) {
        if self.n < self.nmax {
            self.n += 1;
        }
        self.acc += (v - self.acc) / f64::from(self.n);
    }
    /// Samples in the window so far (up to its size).
    pub fn n(&self) -> u32 {
        self.n
    }
    pub fn value(&self) -> f64 {
        self.acc
    }
}

/// Hit rate over the last 10, 100 and 1000 refreshes that had lookups.
#[derive(Clone, Debug)]
pub struct HitRate {
    pub windows: [MovingAvg; 3],
    last: Option<(u64, u64)>,
}

impl Default for HitRate {
    fn default() -> HitRate {
        HitRate { windows: [MovingAvg::new(10), MovingAvg::new(100), MovingAvg::new(1000)], last: None }
    }
}

impl HitRate {
    /// Feed the cumulative hit and miss counters. `reset` (a child
    /// restart) makes this reading the new baseline.
    pub fn update(&mut self, hit: u64, miss: u64, reset: bool) -> Option<f64> {
        let mut ratio = None;
        if let (Some((h0, m0)), false) = (self.last, reset) {
            if hit >= h0 && miss >= m0 {
                let (dh, dm) = ((hit - h0) as f64, (miss - m0) as f64);
                if dh + dm > 0.0 {
                    let r = dh / (dh + dm);
                    self.windows.iter_mut().for_each(|w| w.push(r));
                    ratio = Some(r);
                }
            }
        }
        self.last = Some((hit, miss));
        ratio
    }
}

/// Everything known about the counters after the latest refresh.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub infos: Vec<CounterInfo>,
    pub values: Vec<u64>,
    /// Change per second since the previous refresh (None for gauges and
    /// right after a start or restart).
    pub rates: Vec<Option<f64>>,
    pub generation: u64,
    pub hitrate: HitRate,
    /// Refreshes so far, and child restarts seen while watching.
    pub refreshes: u64,
    pub restarts_seen: u64,
    /// Per refresh, oldest first: (client requests/s, hit rate or None,
    /// backend requests/s) for the charts, and every counter's rate.
    pub series: VecDeque<(Option<f64>, Option<f64>, Option<f64>)>,
    pub rate_series: VecDeque<Vec<Option<f64>>>,
    last_t: f64,
}

impl History {
    /// Index of a counter by name.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.infos.iter().position(|c| c.name == name)
    }

    /// A counter's current value by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.index(name).map(|i| self.values[i])
    }

    /// Take a reading taken at `t` seconds. Returns true when it shows a
    /// child restart (or a new daemon) since the previous one.
    pub fn update(&mut self, infos: &[CounterInfo], values: Vec<u64>, generation: u64, t: f64) -> bool {
        let first = self.refreshes == 0;
        let same_layout = self.infos.len() == infos.len() && self.infos.iter().zip(infos).all(|(a, b)| a.name == b.name);
        // The previous value of each counter; by name when the set changed
        // (a program with other backends came or went: not a restart).
        let old: Vec<Option<u64>> = if same_layout {
            self.values.iter().map(|v| Some(*v)).collect()
        } else {
            let by_name: std::collections::HashMap<&str, u64> =
                self.infos.iter().map(|c| c.name.as_str()).zip(self.values.iter().copied()).collect();
            infos.iter().map(|c| by_name.get(c.name.as_str()).copied()).collect()
        };
        // A fixed counter that went back means a new child; a backend's can
        // start over with a reloaded program of the same name.
        let went_back = infos
            .iter()
            .zip(old.iter().zip(&values))
            .any(|(c, (o, new))| c.kind == Kind::Counter && !c.name.starts_with("VBE.") && o.is_some_and(|o| *new < o));
        let restarted = !first && (generation != self.generation || went_back);
        let dt = t - self.last_t;
        self.rates = if first || restarted || dt <= 0.0 {
            vec![None; values.len()]
        } else {
            infos
                .iter()
                .zip(old.iter().zip(&values))
                .map(|(c, (o, new))| o.filter(|_| c.kind == Kind::Counter).map(|o| new.saturating_sub(o) as f64 / dt))
                .collect()
        };
        if !same_layout {
            self.infos = infos.to_vec();
            self.rate_series.clear();
        }
        if restarted {
            self.restarts_seen += 1;
        }
        self.values = values;
        self.generation = generation;
        self.last_t = t;
        self.refreshes += 1;
        let (hit, miss) = (self.get("MAIN.cache_hit").unwrap_or(0), self.get("MAIN.cache_miss").unwrap_or(0));
        let ratio = self.hitrate.update(hit, miss, restarted);
        let rate_of = |name: &str| self.index(name).and_then(|i| self.rates[i]);
        let point = (rate_of("MAIN.client_req"), ratio, rate_of("MAIN.backend_req"));
        push_capped(&mut self.series, point);
        let rates = self.rates.clone();
        push_capped(&mut self.rate_series, rates);
        restarted
    }

    /// The hit rate since the child started: hits / (hits + misses).
    pub fn hitrate_since_start(&self) -> Option<f64> {
        let (h, m) = (self.get("MAIN.cache_hit")? as f64, self.get("MAIN.cache_miss")? as f64);
        (h + m > 0.0).then(|| h / (h + m))
    }

    /// Average per second since the child started (counters only; the
    /// manager's counters over the manager's uptime).
    pub fn average(&self, i: usize) -> Option<f64> {
        let clock = if self.infos.get(i)?.name.starts_with("MGT.") { "MGT.uptime" } else { "MAIN.uptime" };
        let up = self.get(clock).filter(|u| *u > 0)? as f64;
        (self.infos.get(i)?.kind == Kind::Counter).then(|| self.values[i] as f64 / up)
    }
}

fn push_capped<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() == CHART_SAMPLES {
        q.pop_front();
    }
    q.push_back(v);
}

/// Where readings come from: the instance's segment, attached when the
/// daemon is there and re-attached when it is replaced.
pub struct Source {
    dir: PathBuf,
    seg: Option<Segment>,
}

/// A reading, or why there is none.
pub enum Reading {
    Values {
        infos: Vec<CounterInfo>,
        values: Vec<u64>,
        generation: u64,
    },
    /// No daemon (yet, or any more): the message names the instance.
    Waiting(String),
}

impl Source {
    pub fn new(dir: &Path) -> Source {
        Source { dir: dir.to_path_buf(), seg: None }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Read every counter now.
    pub fn read(&mut self) -> Reading {
        if self.seg.as_ref().is_some_and(|s| s.health() != Health::Running) {
            self.seg = None;
        }
        if self.seg.is_none() {
            match Segment::open(&self.dir) {
                Ok(s) => self.seg = Some(s),
                Err(e) if e.is_transient() => return Reading::Waiting(format!("waiting for cache-d in {} ({e})", self.dir.display())),
                Err(e) => return Reading::Waiting(e.to_string()),
            }
        }
        let Some(seg) = self.seg.as_mut() else { return Reading::Waiting(String::new()) };
        // Backends come and go with programs: pick up their counters.
        if let Err(e) = seg.refresh() {
            self.seg = None;
            return Reading::Waiting(e.to_string());
        }
        let values = (0..seg.counters().len()).map(|i| seg.value(i)).collect();
        Reading::Values { infos: seg.counters().to_vec(), values, generation: seg.generation() }
    }
}

/// `d+hh:mm:ss`, as varnishstat writes uptimes.
pub fn dhms(secs: u64) -> String {
    format!("{}+{:02}:{:02}:{:02}", secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::counters::{Format, Level};

    fn info(name: &str, kind: Kind) -> CounterInfo {
        CounterInfo { name: name.into(), kind, level: Level::Info, format: Format::Integer, description: String::new() }
    }

    #[test]
    fn windows_fill_up_then_slide() {
        let mut h = HitRate::default();
        assert_eq!(h.update(0, 0, false), None, "the first reading is the baseline");
        // 5 refreshes at 100% hits, then 5 at 0%.
        let (mut hit, mut miss) = (0, 0);
        for _ in 0..5 {
            hit += 10;
            h.update(hit, miss, false);
        }
        assert_eq!(h.windows[0].n(), 5);
        assert_eq!(h.windows[0].value(), 1.0);
        for _ in 0..5 {
            miss += 10;
            h.update(hit, miss, false);
        }
        // Ten samples: the 10-window holds their mean; so do the others,
        // which are still filling up.
        assert_eq!((h.windows[0].n(), h.windows[1].n(), h.windows[2].n()), (10, 10, 10));
        assert!((h.windows[0].value() - 0.5).abs() < 1e-9);
        assert!((h.windows[2].value() - 0.5).abs() < 1e-9);
        // Full: the 10-window now forgets faster than the 100-window.
        for _ in 0..10 {
            hit += 10;
            h.update(hit, miss, false);
        }
        assert_eq!(h.windows[0].n(), 10);
        assert!(h.windows[0].value() > h.windows[1].value());
        // A refresh without lookups changes nothing.
        let before = h.windows[0].value();
        assert_eq!(h.update(hit, miss, false), None);
        assert_eq!(h.windows[0].value(), before);
    }

    #[test]
    fn a_child_restart_is_a_new_baseline() {
        let infos = [info("MAIN.cache_hit", Kind::Counter), info("MAIN.cache_miss", Kind::Counter), info("MAIN.n_object", Kind::Gauge)];
        let mut h = History::default();
        assert!(!h.update(&infos, vec![100, 100, 5], 1, 0.0));
        assert!(!h.update(&infos, vec![190, 110, 3], 1, 1.0));
        assert_eq!(h.rates, vec![Some(90.0), Some(10.0), None], "gauges have no rate");
        assert_eq!(h.hitrate.windows[0].value(), 0.9);
        // The child restarted: counters start again from 0, generation 2.
        assert!(h.update(&infos, vec![3, 1, 0], 2, 2.0));
        assert_eq!(h.rates, vec![None, None, None], "no negative rates");
        assert_eq!(h.hitrate.windows[0].n(), 1, "no sample from across the restart");
        assert!(!h.update(&infos, vec![13, 1, 0], 2, 3.0));
        assert_eq!(h.rates[0], Some(10.0));
        assert_eq!(h.hitrate.windows[0].n(), 2);
        // Same generation but a counter went back (a new daemon).
        assert!(h.update(&infos, vec![1, 1, 0], 2, 4.0));
        assert_eq!(h.restarts_seen, 2);
        assert_eq!(h.hitrate_since_start(), Some(0.5));
    }

    #[test]
    fn backends_coming_and_going_is_not_a_restart() {
        let before = [info("MAIN.cache_hit", Kind::Counter), info("MAIN.cache_miss", Kind::Counter)];
        let after = [info("MAIN.cache_hit", Kind::Counter), info("VBE.v2.api.req", Kind::Counter), info("MAIN.cache_miss", Kind::Counter)];
        let mut h = History::default();
        h.update(&before, vec![10, 10], 1, 0.0);
        h.update(&before, vec![20, 10], 1, 1.0);
        assert!(!h.update(&after, vec![30, 0, 20], 1, 2.0), "a program with a new backend was loaded");
        assert_eq!(h.rates, vec![Some(10.0), None, Some(10.0)], "rates by name; the new counter has none yet");
        assert_eq!(h.hitrate.windows[0].n(), 2);
        assert!(!h.update(&after, vec![40, 7, 20], 1, 3.0));
        assert_eq!(h.rates[1], Some(7.0));
        // Discarded and loaded again under the same name: starts over, still no restart.
        assert!(!h.update(&after, vec![50, 1, 20], 1, 4.0));
        assert_eq!(h.restarts_seen, 0);
    }

    #[test]
    fn uptimes_read_like_varnishstat() {
        assert_eq!(dhms(0), "0+00:00:00");
        assert_eq!(dhms(90061), "1+01:01:01");
    }
}
