//! What a run measured: HDR histograms (latency, time to first byte, hits,
//! misses, schedule lag) and counts, in total and per second. Every thread
//! and every agent records its own; they merge exactly (histograms added
//! bucket by bucket, never percentiles averaged). Histograms travel as
//! HdrHistogram's V2 encoding in base64, so result files and the agent
//! protocol carry the full distributions.

use anyhow::{anyhow, Result};
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latencies are recorded in microseconds, 1 µs to 1 hour.
const MAX_US: u64 = 3_600_000_000;

/// An empty histogram that grows to the largest value recorded (so a
/// second of sub-millisecond answers takes a few kB, not the buckets up to
/// an hour).
pub fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new(sigfig).expect("valid precision")
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The connection could not be made.
    Connect,
    /// No complete response within the timeout.
    Timeout,
    /// A status the plan did not expect.
    Status,
    /// A body shorter than announced, or not the expected size.
    ShortBody,
    /// The connection broke, or the response was not HTTP.
    Io,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    pub total: u64,
    pub connect: u64,
    pub timeout: u64,
    pub status: u64,
    pub short_body: u64,
    pub io: u64,
}

impl Errors {
    pub fn add(&mut self, k: ErrorKind) {
        self.total += 1;
        match k {
            ErrorKind::Connect => self.connect += 1,
            ErrorKind::Timeout => self.timeout += 1,
            ErrorKind::Status => self.status += 1,
            ErrorKind::ShortBody => self.short_body += 1,
            ErrorKind::Io => self.io += 1,
        }
    }
    pub fn merge(&mut self, o: &Errors) {
        self.total += o.total;
        self.connect += o.connect;
        self.timeout += o.timeout;
        self.status += o.status;
        self.short_body += o.short_body;
        self.io += o.io;
    }
}

/// One second of a run.
#[derive(Clone, Serialize, Deserialize)]
pub struct Second {
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    #[serde(with = "hist")]
    pub latency: Histogram<u64>,
}

impl Second {
    fn add(&mut self, o: &Second) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.bytes += o.bytes;
        self.hits += o.hits;
        self.misses += o.misses;
        let _ = self.latency.add(&o.latency);
    }
}

impl Default for Second {
    fn default() -> Second {
        Second { requests: 0, errors: 0, bytes: 0, hits: 0, misses: 0, latency: histogram(2) }
    }
}

/// Everything one thread (or one agent, or a whole run) measured; in
/// serde (agent results, result files) with its full histograms.
#[derive(Clone, Serialize, Deserialize)]
pub struct Recorder {
    pub requests: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: Errors,
    /// Open loop: requests due that were never sent (the generator could
    /// not keep the rate).
    pub dropped: u64,
    #[serde(with = "hist")]
    pub latency: Histogram<u64>,
    #[serde(with = "hist")]
    pub ttfb: Histogram<u64>,
    #[serde(with = "hist")]
    pub hit_latency: Histogram<u64>,
    #[serde(with = "hist")]
    pub miss_latency: Histogram<u64>,
    /// Open loop: how late each request left against its schedule.
    #[serde(with = "hist")]
    pub lag: Histogram<u64>,
    pub seconds: Vec<Second>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            requests: 0,
            bytes: 0,
            hits: 0,
            misses: 0,
            errors: Errors::default(),
            dropped: 0,
            latency: histogram(3),
            ttfb: histogram(3),
            hit_latency: histogram(3),
            miss_latency: histogram(3),
            lag: histogram(3),
            seconds: Vec::new(),
        }
    }
}

fn clamp_us(us: u64) -> u64 {
    us.clamp(1, MAX_US)
}

impl Recorder {
    fn second(&mut self, s: usize) -> &mut Second {
        if self.seconds.len() <= s {
            self.seconds.resize_with(s + 1, Second::default);
        }
        &mut self.seconds[s]
    }

    /// A response: its latency and time to first byte in µs, its size, and
    /// whether the cache served it, completed in second `s` of the run.
    pub fn ok(&mut self, s: usize, latency_us: u64, ttfb_us: u64, bytes: u64, hit: bool) {
        let l = clamp_us(latency_us);
        self.requests += 1;
        self.bytes += bytes;
        let _ = self.latency.record(l);
        let _ = self.ttfb.record(clamp_us(ttfb_us));
        if hit {
            self.hits += 1;
            let _ = self.hit_latency.record(l);
        } else {
            self.misses += 1;
            let _ = self.miss_latency.record(l);
        }
        let sec = self.second(s);
        sec.requests += 1;
        sec.bytes += bytes;
        if hit {
            sec.hits += 1;
        } else {
            sec.misses += 1;
        }
        let _ = sec.latency.record(l);
    }

    /// A failed request, in second `s`.
    pub fn error(&mut self, s: usize, k: ErrorKind) {
        self.errors.add(k);
        self.second(s).errors += 1;
    }

    pub fn lag(&mut self, us: u64) {
        let _ = self.lag.record(clamp_us(us));
    }

    /// Add another recorder's measurements to this one, exactly.
    pub fn merge(&mut self, o: &Recorder) {
        self.requests += o.requests;
        self.bytes += o.bytes;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors.merge(&o.errors);
        self.dropped += o.dropped;
        for (a, b) in [
            (&mut self.latency, &o.latency),
            (&mut self.ttfb, &o.ttfb),
            (&mut self.hit_latency, &o.hit_latency),
            (&mut self.miss_latency, &o.miss_latency),
            (&mut self.lag, &o.lag),
        ] {
            let _ = a.add(b);
        }
        for (i, s) in o.seconds.iter().enumerate() {
            self.second(i).add(s);
        }
    }

    /// Fold everything recorded after second `last` into it (requests
    /// in flight at the end), so the series has exactly `last + 1` rows.
    pub fn fold_after(&mut self, last: usize) {
        if self.seconds.len() > last + 1 {
            let tail: Vec<Second> = self.seconds.drain(last + 1..).collect();
            let d = self.second(last);
            for s in &tail {
                d.add(s);
            }
        }
        self.second(last);
    }
}

/// Histograms in serde: HdrHistogram's V2 encoding in base64.
mod hist {
    use hdrhistogram::Histogram;
    use serde::{de::Error as _, ser::Error as _, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::encode(h).map_err(S::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        super::decode(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

fn encode(h: &Histogram<u64>) -> Result<String> {
    let mut buf = Vec::new();
    V2Serializer::new().serialize(h, &mut buf).map_err(|e| anyhow!("encoding a histogram: {e:?}"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(buf))
}

fn decode(s: &str) -> Result<Histogram<u64>> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| anyhow!("a histogram is not base64: {e}"))?;
    let h: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).map_err(|e| anyhow!("a histogram does not decode: {e:?}"))?;
    // Recorded histograms cover 1 µs..1 h; widen a decoded one to that so
    // merges never fail on range.
    let mut out = histogram(h.sigfig());
    out.add(&h).map_err(|e| anyhow!("a histogram is out of range: {e:?}"))?;
    Ok(out)
}

/// Milliseconds at quantile `q` (0 for an empty histogram).
pub fn ms_at(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

pub fn max_ms(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.max() as f64 / 1000.0
    }
}

pub fn mean_ms(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.mean() / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_is_exact_and_survives_the_wire() {
        let (mut a, mut b, mut all) = (Recorder::default(), Recorder::default(), Recorder::default());
        let mut x = 7u64;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let us = 50 + x % 200_000;
            let r = if i % 3 == 0 { &mut a } else { &mut b };
            r.ok((i / 5000) as usize, us, us / 2, 100, i % 4 == 0);
            all.ok((i / 5000) as usize, us, us / 2, 100, i % 4 == 0);
        }
        a.error(0, ErrorKind::Timeout);
        all.error(0, ErrorKind::Timeout);
        let a: Recorder = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        let mut m = Recorder::default();
        m.merge(&a);
        m.merge(&b);
        assert_eq!((m.requests, m.hits, m.errors.timeout), (all.requests, all.hits, 1));
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(m.latency.value_at_quantile(q), all.latency.value_at_quantile(q), "q{q}");
        }
        assert_eq!(m.seconds.len(), 4);
        assert_eq!(m.seconds.iter().map(|s| s.requests).sum::<u64>(), 20_000);
        m.fold_after(1);
        assert_eq!(m.seconds.len(), 2);
        assert_eq!(m.seconds.iter().map(|s| s.requests).sum::<u64>(), 20_000);
    }
}
