//! Run-time parameters (`-p name=value`), with Varnish's names, units and
//! defaults. The management issue adds param.show/param.set on top of this.

use std::time::Duration;

/// Parameter values used by the request path.
#[derive(Debug, Clone)]
pub struct Params {
    pub timeout_idle: Duration,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub between_bytes_timeout: Duration,
    pub backend_idle_timeout: Duration,
    pub send_timeout: Duration,
    pub http_req_size: usize,
    pub http_resp_size: usize,
    pub http_max_hdr: usize,
    pub vsl_reclen: usize,
    pub vsl_space: u64,
    pub default_ttl: f64,
    pub default_grace: f64,
    pub default_keep: f64,
    /// Objects living shorter than this count as `beresp_shortlived`.
    pub shortlived: f64,
    pub http_req_hdr_len: usize,
    pub http_resp_hdr_len: usize,
    /// Storage budget of `-s malloc,SIZE` (default 100M, as varnishd).
    pub storage: u64,
    /// Most client connections served at once; more are dropped and counted
    /// in `MAIN.sess_dropped`. Our own parameter (Varnish bounds threads).
    pub max_connections: usize,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            timeout_idle: Duration::from_secs(5),
            connect_timeout: Duration::from_millis(3500),
            first_byte_timeout: Duration::from_secs(60),
            between_bytes_timeout: Duration::from_secs(60),
            backend_idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(600),
            http_req_size: 32 * 1024,
            http_resp_size: 32 * 1024,
            http_max_hdr: 64,
            vsl_reclen: 255,
            vsl_space: 80 << 20,
            default_ttl: 120.0,
            default_grace: 10.0,
            default_keep: 0.0,
            shortlived: 10.0,
            http_req_hdr_len: 8 * 1024,
            http_resp_hdr_len: 8 * 1024,
            storage: 100 << 20,
            max_connections: 10_000,
        }
    }
}

/// Names accepted by `-p`.
pub const NAMES: &[&str] = &[
    "timeout_idle",
    "connect_timeout",
    "first_byte_timeout",
    "between_bytes_timeout",
    "backend_idle_timeout",
    "send_timeout",
    "http_req_size",
    "http_resp_size",
    "http_max_hdr",
    "vsl_reclen",
    "vsl_space",
    "default_ttl",
    "default_grace",
    "default_keep",
    "shortlived",
    "http_req_hdr_len",
    "http_resp_hdr_len",
    "max_connections",
];

fn secs(v: &str) -> Result<Duration, String> {
    let f: f64 = v.parse().map_err(|_| format!("\"{v}\" is not a number of seconds"))?;
    if !(0.0..=1e9).contains(&f) {
        return Err(format!("{v} seconds is out of range"));
    }
    Ok(Duration::from_secs_f64(f))
}

/// Parse a size with an optional b/k/M/G suffix (powers of 1024).
pub fn parse_size(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last() {
        Some((i, 'b' | 'B')) => (&v[..i], 1),
        Some((i, 'k' | 'K')) => (&v[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&v[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("\"{v}\" is not a size (use e.g. 512k, 80M)"))?;
    if !(0.0..=(1u64 << 50) as f64).contains(&n) {
        return Err(format!("size \"{v}\" is out of range"));
    }
    Ok((n * mult as f64) as u64)
}

fn bounded(v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let n = parse_size(v)?;
    if n < lo || n > hi {
        return Err(format!("{v} is out of range ({lo}..={hi})"));
    }
    Ok(n)
}

impl Params {
    /// Set one parameter by name.
    pub fn set(&mut self, name: &str, v: &str) -> Result<(), String> {
        match name {
            "timeout_idle" => self.timeout_idle = secs(v)?,
            "connect_timeout" => self.connect_timeout = secs(v)?,
            "first_byte_timeout" => self.first_byte_timeout = secs(v)?,
            "between_bytes_timeout" => self.between_bytes_timeout = secs(v)?,
            "backend_idle_timeout" => self.backend_idle_timeout = secs(v)?,
            "send_timeout" => self.send_timeout = secs(v)?,
            "http_req_size" => self.http_req_size = bounded(v, 256, 1 << 30)? as usize,
            "http_resp_size" => self.http_resp_size = bounded(v, 256, 1 << 30)? as usize,
            "http_max_hdr" => self.http_max_hdr = bounded(v, 32, 65535)? as usize,
            "vsl_reclen" => self.vsl_reclen = bounded(v, 16, common::vsl::RECLEN_MAX as u64)? as usize,
            "vsl_space" => self.vsl_space = bounded(v, common::ring::MIN_RING, 4 << 30)?,
            "default_ttl" => self.default_ttl = secs(v)?.as_secs_f64(),
            "default_grace" => self.default_grace = secs(v)?.as_secs_f64(),
            "default_keep" => self.default_keep = secs(v)?.as_secs_f64(),
            "shortlived" => self.shortlived = secs(v)?.as_secs_f64(),
            "http_req_hdr_len" => self.http_req_hdr_len = bounded(v, 40, 1 << 30)? as usize,
            "http_resp_hdr_len" => self.http_resp_hdr_len = bounded(v, 40, 1 << 30)? as usize,
            "max_connections" => self.max_connections = bounded(v, 1, 1 << 24)? as usize,
            _ => return Err(format!("unknown parameter \"{name}\"")),
        }
        Ok(())
    }
}

/// clap value parser for `-p name=value`: checks the name and the value.
pub fn parse_param_arg(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("\"{s}\" is not of the form name=value"))?;
    Params::default().set(k, v)?;
    Ok((k.to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_params() {
        assert_eq!(parse_size("80M"), Ok(80 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("lots").is_err());
        let mut p = Params::default();
        p.set("timeout_idle", "1.5").unwrap();
        assert_eq!(p.timeout_idle, Duration::from_millis(1500));
        assert!(p.set("http_max_hdr", "8").is_err());
        assert!(p.set("nope", "1").is_err());
        assert!(parse_param_arg("timeout_idle").is_err());
        for n in NAMES {
            assert!(!matches!(Params::default().set(n, "x"), Err(e) if e.contains("unknown")), "{n}");
        }
    }
}
