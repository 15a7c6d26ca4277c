//! What a run does: the target, the requests, the load model. A plan is
//! plain data (serde) because the coordinator sends it to its agents.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

/// `3s`, `500ms`, `2m`, `1h`, `250us`, or plain seconds (`1.5`), up to
/// a year.
pub fn parse_duration(s: &str) -> Result<Duration> {
    common::args::duration(s, MAX_SECS, "a year").map_err(|e| anyhow!(e))
}

/// The longest duration anything in a plan may take (a year).
pub const MAX_SECS: f64 = 365.0 * 86400.0;

/// How the next URL is chosen from the list.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pick {
    /// In file order, each connection from its own place in the list.
    Seq,
    /// Uniformly at random.
    Random,
    /// By popularity: the k-th URL with probability proportional to
    /// 1/k^s (a few hot objects and a long tail, as real traffic).
    Zipf(f64),
}

/// One stage of an open-loop ramp: over `secs`, move the rate linearly
/// from the previous stage's rate (0 for the first) to `rate`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub secs: f64,
    pub rate: f64,
}

/// `10s:1000,30s:5000`.
pub fn parse_stages(s: &str) -> Result<Vec<Stage>> {
    s.split(',')
        .map(|st| {
            let (d, r) = st.split_once(':').ok_or_else(|| anyhow!("bad stage \"{st}\" (DURATION:RATE, e.g. 10s:1000)"))?;
            let rate: f64 = r.trim().parse().map_err(|_| anyhow!("bad rate in stage \"{st}\""))?;
            if !(rate >= 0.0 && rate.is_finite()) {
                bail!("bad rate in stage \"{st}\"");
            }
            Ok(Stage { secs: parse_duration(d)?.as_secs_f64(), rate })
        })
        .collect()
}

/// Everything a generator (local or an agent) needs to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    /// Full URLs (http://host:port/path), all on one host and port.
    pub urls: Vec<String>,
    pub pick: Pick,
    pub conns: usize,
    pub threads: usize,
    /// Stop after this long (closed or open loop)...
    pub duration_s: Option<f64>,
    /// ...or after this many requests (closed loop).
    pub count: Option<u64>,
    /// Open loop: this many requests per second, or a ramp.
    pub rate: Option<f64>,
    pub stages: Vec<Stage>,
    /// Close and reopen the connection after this many requests.
    pub requests_per_conn: Option<u64>,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    /// Host header instead of the URL's.
    pub host: Option<String>,
    /// Responses with another status are errors (default: any 2xx or 3xx).
    pub expect_status: Option<u16>,
    /// Responses with another body size are errors.
    pub expect_size: Option<u64>,
    pub timeout_s: f64,
    pub seed: u64,
    /// https: trust these PEM certificates (default: the system's bundle).
    #[serde(default)]
    pub cacert: Option<String>,
    /// https: accept any certificate.
    #[serde(default)]
    pub insecure: bool,
    /// Connect to this address instead of resolving the URL's host
    /// (which still goes in SNI and Host).
    #[serde(default)]
    pub resolve: Option<String>,
    /// Speak HTTP/2 (prior knowledge on http://, ALPN h2 on https://).
    #[serde(default)]
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (https:// only).
    #[serde(default)]
    pub h3: bool,
    /// HTTP/2 and HTTP/3: requests in flight at once on each connection.
    #[serde(default = "one")]
    pub streams: usize,
    /// --new-conn: a new connection per request, TLS sessions not resumed.
    #[serde(default)]
    pub new_conn: bool,
    /// --fine-pace: open-loop requests leave at their due times to the
    /// microsecond (a timerfd per connection), not on the millisecond
    /// tick of the runtime's timers.
    #[serde(default)]
    pub fine_pace: bool,
}

fn one() -> usize {
    1
}

impl Plan {
    /// The run's length in seconds (stages add up).
    pub fn length_s(&self) -> Option<f64> {
        if !self.stages.is_empty() {
            return Some(self.stages.iter().map(|s| s.secs).sum());
        }
        self.duration_s
    }

    pub fn open_loop(&self) -> bool {
        self.rate.is_some() || !self.stages.is_empty()
    }

    /// The same plan with `share` of its connections and rate (one agent's
    /// part of a distributed run: agent `i` of `n`).
    pub fn share(&self, i: usize, n: usize) -> Plan {
        let mut p = self.clone();
        p.conns = (self.conns / n + usize::from(i < self.conns % n)).max(1);
        p.threads = self.threads.min(p.conns).max(1);
        let f = 1.0 / n as f64;
        p.rate = self.rate.map(|r| r * f);
        p.stages = self.stages.iter().map(|s| Stage { secs: s.secs, rate: s.rate * f }).collect();
        p.count = self.count.map(|c| c / n as u64 + u64::from((i as u64) < c % n as u64));
        p.seed = self.seed.wrapping_add(i as u64 * 0x9e37_79b9_7f4a_7c15);
        p
    }

    /// Check the plan and resolve its target.
    pub fn target(&self) -> Result<Target> {
        if self.urls.is_empty() {
            bail!("no URL to request");
        }
        let mut first: Option<(String, u16)> = None;
        let mut paths = Vec::with_capacity(self.urls.len());
        for u in &self.urls {
            let (host, port, path) = split_url(u)?;
            match &first {
                None => first = Some((host, port)),
                Some((h, p)) if *h == host && *p == port => {}
                Some((h, p)) => bail!("all URLs must be on one host: {u} is not on {h}:{p}"),
            }
            paths.push(path);
        }
        let (host, port) = first.expect("one URL at least");
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addr = match &self.resolve {
            Some(r) => resolved(r, bare, port)?,
            None => (bare, port)
                .to_socket_addrs()
                .with_context(|| format!("cannot resolve {host}"))?
                .next()
                .ok_or_else(|| anyhow!("{host} resolves to no address"))?,
        };
        let https = self.urls[0].starts_with("https://");
        let default_port = if https { 443 } else { 80 };
        let host_header = self.host.clone().unwrap_or_else(|| if port == default_port { host.clone() } else { format!("{host}:{port}") });
        let tls = if https {
            let mode = crate::tls::Mode { h2: self.h2, h3: self.h3, resume: !self.new_conn };
            Some(crate::tls::client(bare, self.cacert.as_deref(), self.insecure, mode)?)
        } else {
            None
        };
        let requests = paths.iter().map(|p| self.request_bytes(p, &host_header)).collect();
        if self.conns == 0 || self.threads == 0 {
            bail!("-c and -t must be at least 1");
        }
        if self.streams == 0 || self.streams > 10_000 {
            bail!("--streams must be between 1 and 10000");
        }
        if self.streams > 1 && !self.h2 && !self.h3 {
            bail!("--streams needs --h2 or --h3");
        }
        if self.h3 && !https {
            bail!("--h3 needs https:// URLs (QUIC is always TLS)");
        }
        self.check_bounds()?;
        let h2 = H2Target { scheme: if https { "https" } else { "http" }.into(), authority: host_header, paths };
        Ok(Target { addr, requests, head: self.method.eq_ignore_ascii_case("HEAD"), tls, h2 })
    }

    /// Numbers a plan may carry (from the command line, or from a
    /// coordinator over the network): finite, and within what one host can
    /// do, so no later arithmetic overflows or waits forever.
    pub fn check_bounds(&self) -> Result<()> {
        let secs_ok = |s: f64| s.is_finite() && (0.0..=MAX_SECS).contains(&s);
        if self.conns > 1_000_000 || self.threads > 4096 {
            bail!("-c {} / -t {}: more than one host can open", self.conns, self.threads);
        }
        if !self.duration_s.is_none_or(secs_ok) || !self.length_s().is_none_or(secs_ok) {
            bail!("the run's length must be between 0 and a year");
        }
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0 && self.timeout_s <= 86400.0) {
            bail!("--timeout must be between 0 and a day");
        }
        let rate_ok = |r: f64| r.is_finite() && (0.0..=1e9).contains(&r);
        if !self.rate.is_none_or(rate_ok) || !self.stages.iter().all(|st| rate_ok(st.rate) && secs_ok(st.secs)) {
            bail!("rates must be between 0 and 1e9 requests per second");
        }
        Ok(())
    }

    fn request_bytes(&self, path: &str, host: &str) -> Vec<u8> {
        let mut r = format!("{} {path} HTTP/1.1\r\nHost: {host}\r\n", self.method);
        for (n, v) in &self.headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        if let Some(b) = &self.body {
            r.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        r.push_str("\r\n");
        let mut bytes = r.into_bytes();
        if let Some(b) = &self.body {
            bytes.extend_from_slice(b.as_bytes());
        }
        bytes
    }
}

/// A small valid plan, for other modules' tests.
#[cfg(test)]
pub(crate) fn tests_plan() -> Plan {
    Plan {
        urls: vec!["http://127.0.0.1:8080/".into()],
        pick: Pick::Seq,
        conns: 1,
        threads: 1,
        duration_s: Some(1.0),
        count: None,
        rate: None,
        stages: vec![],
        requests_per_conn: None,
        method: "GET".into(),
        headers: vec![],
        body: None,
        host: None,
        expect_status: None,
        expect_size: None,
        timeout_s: 5.0,
        cacert: None,
        insecure: false,
        resolve: None,
        h2: false,
        h3: false,
        streams: 1,
        new_conn: false,
        fine_pace: false,
        seed: 1,
    }
}

/// A resolved plan: where to connect and the bytes of each request.
pub struct Target {
    pub addr: SocketAddr,
    pub requests: Vec<Vec<u8>>,
    pub head: bool,
    /// For https: the client configuration and the name for SNI.
    pub tls: Option<crate::tls::TlsClient>,
    /// What an HTTP/2 request needs (--h2).
    pub h2: H2Target,
}

/// The parts of an HTTP/2 request: :scheme, :authority (the Host the
/// HTTP/1 requests carry) and each URL's :path.
pub struct H2Target {
    pub scheme: String,
    pub authority: String,
    pub paths: Vec<String>,
}

/// `--resolve HOST:ADDR` (curl's `HOST:PORT:ADDR` too): the address to
/// connect to for `host`.
fn resolved(spec: &str, host: &str, port: u16) -> Result<SocketAddr> {
    let (name, rest) = spec.split_once(':').ok_or_else(|| anyhow!("--resolve {spec}: HOST:ADDRESS"))?;
    if name != host {
        bail!("--resolve {spec}: the URLs are on {host}");
    }
    // curl's form names the port first.
    let rest = match rest.split_once(':') {
        Some((p, a)) if p.parse::<u16>().is_ok() && !a.is_empty() && !rest.starts_with('[') => a,
        _ => rest,
    };
    let ip: std::net::IpAddr =
        rest.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| anyhow!("--resolve {spec}: {rest} is not an IP address"))?;
    Ok(SocketAddr::new(ip, port))
}

/// `https` or `http`: the scheme of a URL.
pub fn scheme(u: &str) -> &'static str {
    if u.starts_with("https://") {
        "https"
    } else {
        "http"
    }
}

/// `http[s]://host[:port]/path?query` → (host, port, path).
pub fn split_url(u: &str) -> Result<(String, u16, String)> {
    let (rest, default_port) = match (u.strip_prefix("http://"), u.strip_prefix("https://")) {
        (Some(r), _) => (r, 80),
        (_, Some(r)) => (r, 443),
        _ => bail!("{u}: not an http:// or https:// URL"),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(end) = authority.strip_prefix('[').and_then(|a| a.find(']')) {
        let host = &authority[..end + 2];
        let port = authority[end + 2..].strip_prefix(':');
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() {
        bail!("{u}: no host");
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| anyhow!("{u}: bad port"))?,
        None => default_port,
    };
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        bail!("{u}: spaces or control characters in the path");
    }
    Ok((host, port, path.to_string()))
}

/// Read a URL file (http_load's format): one URL per line; blank lines
/// and `#` comments skipped; a line starting with `/` is a path on `base`.
pub fn read_url_file(path: &str, base: Option<&str>) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let url = if line.starts_with('/') {
            let base = base.ok_or_else(|| anyhow!("{path}:{}: a path needs a URL on the command line to go with it", n + 1))?;
            let (h, p, _) = split_url(base)?;
            format!("{}://{h}:{p}{line}", scheme(base))
        } else {
            line.to_string()
        };
        split_url(&url).with_context(|| format!("{path}:{}", n + 1))?;
        out.push(url);
    }
    if out.is_empty() {
        bail!("{path}: no URL in the file");
    }
    Ok(out)
}

/// When the i-th request of an open-loop schedule should leave, in seconds
/// from the start (None past the end): constant rate, or linear ramps.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// (start time, start count, start rate, end rate, length) per stage.
    stages: Vec<(f64, f64, f64, f64, f64)>,
    end: f64,
}

impl Schedule {
    pub fn new(plan: &Plan) -> Schedule {
        let mut stages = Vec::new();
        let (mut t, mut n) = (0.0, 0.0);
        if plan.stages.is_empty() {
            let r = plan.rate.unwrap_or(0.0);
            let len = plan.duration_s.unwrap_or(f64::INFINITY);
            stages.push((0.0, 0.0, r, r, len));
            return Schedule { stages, end: len };
        }
        let mut prev = 0.0;
        for s in &plan.stages {
            stages.push((t, n, prev, s.rate, s.secs));
            n += (prev + s.rate) / 2.0 * s.secs;
            t += s.secs;
            prev = s.rate;
        }
        Schedule { stages, end: t }
    }

    /// Requests due by time `t`.
    pub fn due_by(&self, t: f64) -> f64 {
        let t = t.min(self.end);
        let mut due = 0.0;
        for &(t0, n0, r0, r1, len) in &self.stages {
            if t < t0 {
                break;
            }
            let x = (t - t0).min(len);
            let slope = if len > 0.0 && len.is_finite() { (r1 - r0) / len } else { 0.0 };
            due = n0 + r0 * x + slope * x * x / 2.0;
        }
        due
    }

    /// The time the i-th request (from 0) is due.
    pub fn time_of(&self, i: u64) -> Option<f64> {
        let target = i as f64 + 1.0;
        for &(t0, n0, r0, r1, len) in &self.stages {
            let n1 = n0 + (r0 + r1) / 2.0 * len;
            if target > n1 + 1e-9 {
                continue;
            }
            // Solve n0 + r0 x + a x²/2 = target for x in [0, len].
            let need = target - n0;
            let a = if len > 0.0 && len.is_finite() { (r1 - r0) / len } else { 0.0 };
            let x = if a.abs() < 1e-12 {
                if r0 <= 0.0 {
                    return None;
                }
                need / r0
            } else {
                let disc = (r0 * r0 + 2.0 * a * need).max(0.0);
                (-r0 + disc.sqrt()) / a
            };
            let t = t0 + x.clamp(0.0, len);
            return (t <= self.end).then_some(t);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan { conns: 10, threads: 2, duration_s: Some(10.0), ..tests_plan() }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("3x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn urls() {
        assert_eq!(split_url("http://h:81/a?b").unwrap(), ("h".into(), 81, "/a?b".into()));
        assert_eq!(split_url("http://h").unwrap(), ("h".into(), 80, "/".into()));
        assert_eq!(split_url("http://[::1]:8080/x").unwrap(), ("[::1]".into(), 8080, "/x".into()));
        assert_eq!(split_url("https://h/x").unwrap(), ("h".into(), 443, "/x".into()));
        assert_eq!(split_url("https://h:8443").unwrap(), ("h".into(), 8443, "/".into()));
        assert!(split_url("ftp://h/").is_err());
        assert_eq!(resolved("a.test:127.0.0.2", "a.test", 443).unwrap(), "127.0.0.2:443".parse().unwrap());
        assert_eq!(resolved("a.test:443:127.0.0.2", "a.test", 8443).unwrap(), "127.0.0.2:8443".parse().unwrap());
        assert_eq!(resolved("a.test:[::1]", "a.test", 443).unwrap(), "[::1]:443".parse().unwrap());
        assert!(resolved("b.test:127.0.0.1", "a.test", 443).is_err());
        assert!(resolved("a.test:nowhere", "a.test", 443).is_err());
        let mut p = plan();
        p.urls.push("http://other:1/".into());
        assert!(p.target().is_err());
    }

    #[test]
    fn constant_and_ramped_schedules() {
        let mut p = plan();
        p.rate = Some(100.0);
        let s = Schedule::new(&p);
        assert!((s.time_of(0).unwrap() - 0.01).abs() < 1e-9);
        assert!((s.time_of(99).unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(s.time_of(1000), None, "past 10 s");
        assert!((s.due_by(2.5) - 250.0).abs() < 1e-9);
        p.stages = parse_stages("10s:1000,10s:1000").unwrap();
        let s = Schedule::new(&p);
        // 0 → 1000 over 10 s: 5000 requests, then 10000 more.
        assert!((s.due_by(10.0) - 5000.0).abs() < 1e-6);
        assert!((s.due_by(20.0) - 15000.0).abs() < 1e-6);
        assert!((s.time_of(4999).unwrap() - 10.0).abs() < 1e-6);
        assert!((s.time_of(14999).unwrap() - 20.0).abs() < 1e-6);
        assert_eq!(s.time_of(15000), None);
        // Monotonic.
        let times: Vec<f64> = (0..15000).map(|i| s.time_of(i).unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn absurd_numbers_are_refused() {
        for f in [
            |p: &mut Plan| p.duration_s = Some(1e300),
            |p: &mut Plan| p.duration_s = Some(f64::NAN),
            |p: &mut Plan| p.rate = Some(f64::INFINITY),
            |p: &mut Plan| p.timeout_s = 1e300,
            |p: &mut Plan| p.conns = usize::MAX,
            |p: &mut Plan| p.stages = vec![Stage { secs: 1e300, rate: 1.0 }],
        ] {
            let mut p = plan();
            f(&mut p);
            assert!(p.target().is_err());
        }
        assert!(parse_duration("1e300s").is_err());
        assert!(plan().target().is_ok());
    }

    #[test]
    fn shares_add_up() {
        let mut p = plan();
        p.conns = 5;
        p.rate = Some(1000.0);
        p.count = Some(101);
        let parts: Vec<Plan> = (0..2).map(|i| p.share(i, 2)).collect();
        assert_eq!(parts.iter().map(|p| p.conns).sum::<usize>(), 5);
        assert_eq!(parts.iter().map(|p| p.count.unwrap()).sum::<u64>(), 101);
        assert!((parts.iter().map(|p| p.rate.unwrap()).sum::<f64>() - 1000.0).abs() < 1e-9);
    }
}
