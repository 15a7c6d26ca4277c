//! Where `--stat` reads the server's counters: a cache-d on this host
//! (`-n` name or directory: its shared-memory segment), or a remote
//! `cache-stat --listen` exporter (`http://HOST:PORT/metrics`, fetched
//! with reqwest), the usual case when the load runs on another machine.
//! Either gives the four totals the per-second columns are made of.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// The counters --stat follows, in the CSV's order: client requests, hits,
/// misses, backend requests.
pub type Totals = [u64; 4];

pub enum Source {
    Local(Box<common::segment::Segment>),
    Remote { url: String, client: reqwest::blocking::Client },
}

/// The largest exposition read: cache-stat's with every one of the 4,096
/// backend slots in use is about 10 MiB (4,096 x 20 lines).
const MAX_EXPOSITION: u64 = 64 << 20;

/// The Prometheus names of the four (as cache-stat exports MAIN.*), each
/// without labels (`varnish_backend_req` also names every backend's own
/// count, with a `backend` label).
const NAMES: [&str; 4] = ["varnish_main_client_req", "varnish_main_cache_hit", "varnish_main_cache_miss", "varnish_backend_req"];

impl Source {
    /// The source `--stat VALUE` names, checked now: an instance that is
    /// not there, or an endpoint that does not answer or is not a cachekit
    /// exporter, is an error before the run starts.
    pub fn open(spec: &str) -> Result<Source> {
        if spec.starts_with("https://") {
            bail!("--stat {spec}: cache-stat --listen serves plain http://");
        }
        if !spec.starts_with("http://") {
            let dir = common::instance::resolve(Some(spec));
            let seg = common::segment::Segment::open(&dir)
                .with_context(|| format!("--stat: cannot read cache-d's counters in {}", dir.display()))?;
            return Ok(Source::Local(Box::new(seg)));
        }
        let client = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(3))
            .build()
            .context("--stat: no HTTP client")?;
        let mut s = Source::Remote { url: spec.to_string(), client };
        s.read()?;
        Ok(s)
    }

    /// The four totals now.
    pub fn read(&mut self) -> Result<Totals> {
        match self {
            Source::Local(seg) => {
                let _ = seg.refresh();
                let v = |n: &str| seg.value_of(n).unwrap_or(0);
                Ok([v("MAIN.client_req"), v("MAIN.cache_hit"), v("MAIN.cache_miss"), v("MAIN.backend_req")])
            }
            Source::Remote { url, client } => {
                let resp = client.get(url.as_str()).send().map_err(|e| anyhow!("--stat {url}: cannot reach the exporter: {e}"))?;
                if !resp.status().is_success() {
                    bail!("--stat {url}: the exporter answered {}", resp.status());
                }
                // Read at most MAX_EXPOSITION: an endpoint that is not an
                // exporter must not fill the load host's memory.
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::Read::take(resp, MAX_EXPOSITION + 1), &mut text)
                    .map_err(|e| anyhow!("--stat {url}: {e}"))?;
                if text.len() as u64 > MAX_EXPOSITION {
                    bail!("--stat {url}: not a cachekit exporter (the answer is over {} MiB)", MAX_EXPOSITION >> 20);
                }
                parse(&text).map_err(|e| anyhow!("--stat {url}: {e}"))
            }
        }
    }
}

/// The four totals from an exposition (read with prometheus-parse); an
/// error when it is not a cachekit (or Varnish) exporter, or when the
/// exporter cannot read cache-d.
pub fn parse(text: &str) -> Result<Totals> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .map_err(|_| anyhow!("not a cachekit exporter (not a Prometheus exposition)"))?;
    // The sample of `name` without labels, as a count.
    let value = |name: &str| {
        scrape.samples.iter().find(|s| s.metric == name && s.labels.is_empty()).and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => {
                Some(v).filter(|v| v.is_finite() && *v >= 0.0)
            }
            _ => None,
        })
    };
    match value("varnish_up") {
        None => bail!("not a cachekit exporter (no varnish_up: point it at cache-stat --listen's /metrics)"),
        Some(up) if up != 1.0 => bail!("the exporter is up but cannot read cache-d's counters (varnish_up 0)"),
        Some(_) => {}
    }
    let mut out = [0u64; 4];
    for (i, name) in NAMES.iter().enumerate() {
        out[i] = value(name).ok_or_else(|| anyhow!("the exporter has no {name}"))? as u64;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exposition_gives_the_four_and_refuses_others() {
        let text = "# TYPE varnish_up gauge\nvarnish_up 1\nvarnish_main_client_req 12\nvarnish_main_cache_hit 7\n\
                    varnish_main_cache_miss 5\nvarnish_backend_req{backend=\"default\",server=\"boot\"} 99\nvarnish_backend_req 5\n";
        assert_eq!(parse(text).unwrap(), [12, 7, 5, 5]);
        assert!(parse("node_load1 0.5\n").unwrap_err().to_string().contains("not a cachekit exporter"));
        assert!(parse("varnish_up 0\n").unwrap_err().to_string().contains("cannot read"));
        assert!(parse("varnish_up 1\nvarnish_main_client_req 1\n").unwrap_err().to_string().contains("varnish_main_cache_hit"));
    }
}
