//! Run-time parameters: one table of definitions (Varnish's names, units,
//! defaults, limits and descriptions) behind `-p name=value` and the admin
//! socket's `param.show`, `param.set` and `param.reset`.

use std::time::Duration;

mod bits;
mod def;
mod flags;
mod table;
use bits::DEFAULT_FEATURES;
pub use bits::FEATURES;
pub use def::{Effect, Kind, ParamDef, ParamError, MAX_SECONDS};
pub use flags::flags;
pub use table::DEFS;

/// The definition of `name`.
pub fn def(name: &str) -> Option<&'static ParamDef> {
    DEFS.iter().find(|d| d.name == name)
}

/// Names accepted by `-p`.
pub fn names() -> impl Iterator<Item = &'static str> {
    DEFS.iter().map(|d| d.name)
}

/// Parse a size with an optional b/k/M/G suffix (powers of 1024).
pub fn parse_size(v: &str) -> Result<u64, ParamError> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last() {
        Some((i, 'b' | 'B')) => (&v[..i], 1),
        Some((i, 'k' | 'K')) => (&v[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&v[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&v[..i], 1 << 30),
        Some((i, 't' | 'T')) => (&v[..i], 1u64 << 40),
        _ => (v, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| ParamError::NotASize(v.to_string()))?;
    if !(0.0..=(1u64 << 50) as f64).contains(&n) {
        return Err(ParamError::SizeOutOfRange(v.to_string()));
    }
    Ok((n * mult as f64) as u64)
}

fn parse_bool(v: &str) -> Result<bool, ParamError> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "enable" => Ok(true),
        "off" | "false" | "no" | "disable" => Ok(false),
        _ => Err(ParamError::NotABoolean(v.to_string())),
    }
}

/// A value as a number in the parameter's own unit.
fn number(d: &ParamDef, v: &str) -> Result<f64, ParamError> {
    match d.kind {
        Kind::Seconds | Kind::Float => v.trim().parse::<f64>().map_err(|_| ParamError::NotFinite(v.to_string())),
        Kind::Bytes => match parse_size(v) {
            Err(ParamError::NotASize(v)) => Err(ParamError::NotBytes(v)),
            n => n.map(|n| n as f64),
        },
        Kind::Uint => parse_uint(v),
        Kind::Bool => parse_bool(v).map(|b| b as u8 as f64),
        Kind::Bits => bits::of(d.name).parse(v, bits::of(d.name).parse(d.default, 0)?).map(|b| b as f64),
        Kind::TagMask => parse_mask(v, &TagMask::default()).map(|_| 0.0),
        Kind::Pool => parse_pool(d, v).map(|_| 0.0),
        Kind::Text => Ok(0.0),
    }
}

/// A count; `unlimited` is the largest, as Varnish's tweak_uint takes it.
fn parse_uint(v: &str) -> Result<f64, ParamError> {
    if v.trim().eq_ignore_ascii_case("unlimited") {
        return Ok(u32::MAX as f64);
    }
    // As C's strtoul with base 0: 0x hexadecimal, a leading 0 octal.
    let t = v.trim();
    let n = match (t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")), t.strip_prefix('0')) {
        (Some(hex), _) => u32::from_str_radix(hex, 16),
        (None, Some(oct)) if !oct.is_empty() => u32::from_str_radix(oct, 8),
        _ => t.parse::<u32>(),
    };
    n.map(|n| n as f64).map_err(|_| ParamError::NotAWholeNumber(v.to_string()))
}

/// `min_pool,max_pool,max_age` (`pool_req`...): two counts within the
/// parameter's limits, the first no larger, and seconds up to 1000000.
pub fn parse_pool(d: &ParamDef, v: &str) -> Result<(u32, u32, f64), ParamError> {
    let f: Vec<&str> = v.split(',').map(str::trim).collect();
    let [min, max, age] = f.as_slice() else {
        return Err(ParamError::PoolFields);
    };
    let count = |s: &str| -> Result<u32, ParamError> {
        let n = parse_uint(s)?;
        check_limits(d, n)?;
        Ok(n as u32)
    };
    let (min, max) = (count(min)?, count(max)?);
    let age: f64 = age.parse().map_err(|_| ParamError::NotFinite(age.to_string()))?;
    if !(0.0..=1_000_000.0).contains(&age) {
        return Err(if age < 0.0 { ParamError::NotGreaterOrEqual("0") } else { ParamError::NotLessOrEqual("1000000") });
    }
    if min > max {
        return Err(ParamError::PoolOrder);
    }
    Ok((min, max, age))
}

/// A set of log tags, a bit per tag number (`vsl_mask`).
pub type TagMask = [u64; 4];

/// `default`, or `+Tag,-Tag...` applied to `current`, as Varnish's
/// bit_tweak (a sign is required, tag names are case-insensitive).
fn parse_mask(v: &str, current: &TagMask) -> Result<TagMask, ParamError> {
    use common::log::vsl::Tag;
    if v.trim() == "default" {
        let d = def("vsl_mask").map_or("", |d| d.default);
        return parse_mask(d, &TagMask::default());
    }
    let mut m = *current;
    for tok in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (mask, name) = match (tok.strip_prefix('-'), tok.strip_prefix('+')) {
            (Some(name), _) => (true, name),
            (_, Some(name)) => (false, name),
            _ => return Err(ParamError::MissingSign(tok.to_string())),
        };
        let n = Tag::from_name(name).ok_or_else(|| ParamError::UnknownTag(tok.to_string()))? as usize;
        if mask {
            m[n / 64] |= 1 << (n % 64);
        } else {
            m[n / 64] &= !(1 << (n % 64));
        }
    }
    Ok(m)
}

/// As param.show shows a mask: `-Tag,-Tag` in tag order.
fn show_mask(m: &TagMask) -> String {
    let on: Vec<String> = common::log::vsl::Tag::ALL
        .iter()
        .filter(|t| m[**t as usize / 64] & (1 << (**t as usize % 64)) != 0)
        .map(|t| format!("-{}", t.name()))
        .collect();
    if on.is_empty() {
        "(all enabled)".into()
    } else {
        on.join(",")
    }
}

/// Check `v` against the definition's type and limits; the number.
pub fn validate(d: &ParamDef, v: &str) -> Result<f64, ParamError> {
    let n = number(d, v)?;
    if !n.is_finite() {
        return Err(ParamError::NotFinite(v.to_string()));
    }
    // Durations past a century are a typo, and would overflow a deadline.
    if d.kind == Kind::Seconds && n > MAX_SECONDS {
        return Err(ParamError::TooLong);
    }
    check_limits(d, n)?;
    Ok(n)
}

/// `n` within the definition's minimum and maximum.
fn check_limits(d: &ParamDef, n: f64) -> Result<(), ParamError> {
    // A pool's limits bound each of its counts.
    let limit = |s| if d.kind == Kind::Pool { parse_uint(s) } else { number(d, s) };
    // In varnishd's words for each kind.
    let decimal = matches!(d.kind, Kind::Seconds | Kind::Float);
    if let Some(min) = d.min {
        if n < limit(min)? {
            return Err(if decimal { ParamError::NotGreaterOrEqual(min) } else { ParamError::BelowMinimum(min) });
        }
    }
    if let Some(max) = d.max {
        if n > limit(max)? {
            return Err(match d.kind {
                _ if decimal => ParamError::NotLessOrEqual(max),
                Kind::Bytes => ParamError::SizeAboveMaximum(max),
                _ => ParamError::AboveMaximum(max),
            });
        }
    }
    Ok(())
}

/// The HTTP/2 parameters (Varnish's h2_*), as numbers.
#[derive(Debug, Clone, Default)]
pub struct H2Params {
    pub header_table_size: u32,
    pub initial_window_size: u32,
    pub max_concurrent_streams: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    pub rapid_reset: Duration,
    pub rapid_reset_limit: u32,
    pub rapid_reset_period: Duration,
    pub rx_window_increment: u32,
    pub rx_window_low_water: u32,
}

/// The h3_* parameters (HTTP/3 over QUIC, cachekit's own).
#[derive(Debug, Clone, Default)]
pub struct H3Params {
    pub zero_rtt: bool,
    pub alt_svc_max_age: u64,
    pub conn_window: u64,
    pub idle_timeout: Duration,
    pub max_concurrent_streams: u32,
    pub max_field_section_size: u64,
    pub retry_above: usize,
    pub send_window: u64,
    pub stream_window: u64,
}

/// Parameter values used by the daemon.
#[derive(Debug, Clone)]
pub struct Params {
    pub auto_restart: bool,
    pub ban_dups: bool,
    pub ban_lurker_age: f64,
    pub ban_lurker_sleep: f64,
    pub backend_idle_timeout: Duration,
    pub backend_local_error_holddown: Duration,
    pub backend_remote_error_holddown: Duration,
    pub between_bytes_timeout: Duration,
    pub cli_limit: usize,
    pub cli_timeout: Duration,
    pub connect_timeout: Duration,
    pub default_grace: f64,
    pub default_keep: f64,
    pub default_ttl: f64,
    pub first_byte_timeout: Duration,
    /// The `feature` bits (see [`FEATURES`]).
    pub feature: u32,
    pub brotli_quality: u32,
    pub gzip_buffer: usize,
    pub gzip_level: u32,
    pub gzip_memlevel: u32,
    /// The h2_* parameters.
    pub h2: H2Params,
    pub h3: H3Params,
    pub http_brotli_support: bool,
    pub http_gzip_support: bool,
    pub http_max_hdr: usize,
    pub http_range_support: bool,
    pub idle_send_timeout: Duration,
    pub http_req_hdr_len: usize,
    pub http_req_size: usize,
    pub http_resp_hdr_len: usize,
    pub http_resp_size: usize,
    pub max_connections: usize,
    /// Client event-loop threads (0: one per CPU).
    pub event_loops: usize,
    /// SO_SNDBUF for client sockets (0: the kernel's autotuning).
    pub send_buffer: usize,
    pub max_esi_depth: u32,
    pub max_restarts: u32,
    pub max_retries: u32,
    pub max_vcl: u32,
    pub max_vcl_handling: u32,
    pub nuke_limit: u32,
    pub pipe_sess_max: u32,
    pub vcl_cooldown: Duration,
    pub pipe_timeout: Duration,
    pub prefer_ipv6: bool,
    pub reqbody_min_rate: u64,
    pub send_timeout: Duration,
    pub shortlived: f64,
    pub stale_if_error: bool,
    pub timeout_idle: Duration,
    pub timeout_req: Duration,
    pub timeout_reqbody: Duration,
    /// Seconds before a live certificate's end when it is counted and
    /// warned about (0: never).
    pub tls_cert_warn: f64,
    pub transit_buffer: u64,
    /// The `vsl_mask` tags (a bit per tag number).
    pub vsl_mask: TagMask,
    pub vsl_reclen: usize,
    pub vsl_space: u64,
    /// The text each parameter was last set to (for param.show).
    texts: Vec<String>,
}

impl Default for Params {
    fn default() -> Params {
        let mut p = Params {
            auto_restart: true,
            ban_dups: true,
            ban_lurker_age: 0.0,
            ban_lurker_sleep: 0.0,
            backend_idle_timeout: Duration::ZERO,
            backend_local_error_holddown: Duration::ZERO,
            backend_remote_error_holddown: Duration::ZERO,
            between_bytes_timeout: Duration::ZERO,
            cli_limit: 0,
            cli_timeout: Duration::ZERO,
            connect_timeout: Duration::ZERO,
            default_grace: 0.0,
            default_keep: 0.0,
            default_ttl: 0.0,
            first_byte_timeout: Duration::ZERO,
            feature: DEFAULT_FEATURES,
            brotli_quality: 0,
            gzip_buffer: 0,
            gzip_level: 0,
            gzip_memlevel: 0,
            h2: H2Params::default(),
            h3: H3Params::default(),
            http_brotli_support: false,
            http_gzip_support: false,
            http_max_hdr: 0,
            http_range_support: true,
            idle_send_timeout: Duration::ZERO,
            http_req_hdr_len: 0,
            http_req_size: 0,
            http_resp_hdr_len: 0,
            http_resp_size: 0,
            max_connections: 0,
            event_loops: 0,
            send_buffer: 0,
            max_esi_depth: 0,
            max_restarts: 0,
            max_retries: 0,
            max_vcl: 0,
            max_vcl_handling: 0,
            nuke_limit: 0,
            pipe_sess_max: 0,
            vcl_cooldown: Duration::ZERO,
            pipe_timeout: Duration::ZERO,
            prefer_ipv6: false,
            reqbody_min_rate: 0,
            send_timeout: Duration::ZERO,
            shortlived: 0.0,
            stale_if_error: true,
            timeout_idle: Duration::ZERO,
            timeout_req: Duration::ZERO,
            timeout_reqbody: Duration::ZERO,
            tls_cert_warn: 0.0,
            transit_buffer: 0,
            vsl_mask: TagMask::default(),
            vsl_reclen: 0,
            vsl_space: 0,
            texts: DEFS.iter().map(|d| d.default.to_string()).collect(),
        };
        // Making a set of defaults does not reset the process's vcc_err_unref,
        // vcc_unsafe_path or vcl_path.
        let err_unref = crate::vcl::xref::err_unref();
        let (unsafe_path, vcl_path) = (crate::vcl::paths::unsafe_path(), crate::vcl::paths::vcl_path());
        for d in DEFS {
            // The table's defaults are valid by construction (a unit test checks).
            let _ = p.set(d.name, d.default);
        }
        crate::vcl::xref::set_err_unref(err_unref);
        crate::vcl::paths::set_unsafe_path(unsafe_path);
        crate::vcl::paths::set_vcl_path(&vcl_path);
        p
    }
}

impl Params {
    /// Set one parameter by name, validating type and limits.
    pub fn set(&mut self, name: &str, v: &str) -> Result<(), ParamError> {
        let (i, d) = DEFS.iter().enumerate().find(|(_, d)| d.name == name).ok_or_else(|| ParamError::Unknown(name.to_string()))?;
        if d.effect == Effect::Unavailable {
            return Err(ParamError::Unavailable(d.name));
        }
        if d.kind == Kind::TagMask {
            self.vsl_mask = parse_mask(v, &self.vsl_mask)?;
            self.texts[i] = show_mask(&self.vsl_mask);
            return Ok(());
        }
        if d.kind == Kind::Text {
            if name == "vcl_path" {
                crate::vcl::paths::set_vcl_path(v);
            }
            self.texts[i] = v.to_string();
            return Ok(());
        }
        if d.kind == Kind::Bits {
            // Relative to the bits set now, as Varnish's +name and -name.
            let set = bits::of(name);
            let b = set.parse(v, set.parse(&self.texts[i], 0)?)?;
            if name == "feature" {
                self.feature = b;
            }
            self.texts[i] = set.show(b);
            return Ok(());
        }
        let n = validate(d, v)?;
        let secs = || Duration::from_secs_f64(n.max(0.0));
        match name {
            "auto_restart" => self.auto_restart = n != 0.0,
            "ban_dups" => self.ban_dups = n != 0.0,
            "ban_lurker_age" => self.ban_lurker_age = n,
            "ban_lurker_sleep" => self.ban_lurker_sleep = n,
            "backend_idle_timeout" => self.backend_idle_timeout = secs(),
            "backend_local_error_holddown" => self.backend_local_error_holddown = secs(),
            "backend_remote_error_holddown" => self.backend_remote_error_holddown = secs(),
            "between_bytes_timeout" => self.between_bytes_timeout = secs(),
            "cli_limit" => self.cli_limit = n as usize,
            "cli_timeout" => self.cli_timeout = secs(),
            "connect_timeout" => self.connect_timeout = secs(),
            "default_grace" => self.default_grace = n,
            "default_keep" => self.default_keep = n,
            "default_ttl" => self.default_ttl = n,
            "first_byte_timeout" => self.first_byte_timeout = secs(),
            "brotli_quality" => self.brotli_quality = n as u32,
            "gzip_buffer" => self.gzip_buffer = n as usize,
            "gzip_level" => self.gzip_level = n as u32,
            "gzip_memlevel" => self.gzip_memlevel = n as u32,
            "http_brotli_support" => self.http_brotli_support = n != 0.0,
            "http_gzip_support" => self.http_gzip_support = n != 0.0,
            "http_max_hdr" => self.http_max_hdr = n as usize,
            "http_range_support" => self.http_range_support = n != 0.0,
            "idle_send_timeout" => self.idle_send_timeout = secs(),
            "http_req_hdr_len" => self.http_req_hdr_len = n as usize,
            "http_req_size" => self.http_req_size = n as usize,
            "http_resp_hdr_len" => self.http_resp_hdr_len = n as usize,
            "http_resp_size" => self.http_resp_size = n as usize,
            "max_connections" => self.max_connections = n as usize,
            "event_loops" => self.event_loops = n as usize,
            "send_buffer" => self.send_buffer = n as usize,
            "max_esi_depth" => self.max_esi_depth = n as u32,
            "max_restarts" => self.max_restarts = n as u32,
            "max_retries" => self.max_retries = n as u32,
            "max_vcl" => self.max_vcl = n.min(u32::MAX as f64) as u32,
            "max_vcl_handling" => self.max_vcl_handling = n as u32,
            "nuke_limit" => self.nuke_limit = n.min(u32::MAX as f64) as u32,
            "pipe_sess_max" => self.pipe_sess_max = n.min(u32::MAX as f64) as u32,
            "vcl_cooldown" => self.vcl_cooldown = secs(),
            "pipe_timeout" => self.pipe_timeout = secs(),
            "prefer_ipv6" => self.prefer_ipv6 = n != 0.0,
            "reqbody_min_rate" => self.reqbody_min_rate = n as u64,
            "send_timeout" => self.send_timeout = secs(),
            "shortlived" => self.shortlived = n,
            "stale_if_error" => self.stale_if_error = n != 0.0,
            "timeout_idle" => self.timeout_idle = secs(),
            "timeout_req" => self.timeout_req = secs(),
            "timeout_reqbody" => self.timeout_reqbody = secs(),
            "tls_cert_warn" => self.tls_cert_warn = n,
            "transit_buffer" => self.transit_buffer = n as u64,
            "vcc_err_unref" => crate::vcl::xref::set_err_unref(n != 0.0),
            "vcc_unsafe_path" => crate::vcl::paths::set_unsafe_path(n != 0.0),
            "vsl_reclen" => self.vsl_reclen = n as usize,
            "vsl_space" => self.vsl_space = n as u64,
            _ if self.set_stream_param(name, n) => {}
            // Accepted and shown, without effect here.
            _ if d.effect == Effect::Inert => {}
            _ => return Err(ParamError::Unknown(name.to_string())),
        }
        self.texts[i] = canonical(d, v, n);
        Ok(())
    }

    /// The HTTP/2 and HTTP/3 parameters (h2_*, h3_*) of [`Params::set`],
    /// `n` validated; false for any other name.
    fn set_stream_param(&mut self, name: &str, n: f64) -> bool {
        let secs = || Duration::from_secs_f64(n.max(0.0));
        match name {
            "h2_header_table_size" => self.h2.header_table_size = n as u32,
            "h2_initial_window_size" => self.h2.initial_window_size = n as u32,
            "h2_max_concurrent_streams" => self.h2.max_concurrent_streams = n.min(u32::MAX as f64) as u32,
            "h2_max_frame_size" => self.h2.max_frame_size = n as u32,
            "h2_max_header_list_size" => self.h2.max_header_list_size = n as u32,
            "h2_rapid_reset" => self.h2.rapid_reset = secs(),
            "h2_rapid_reset_limit" => self.h2.rapid_reset_limit = n.min(u32::MAX as f64) as u32,
            "h2_rapid_reset_period" => self.h2.rapid_reset_period = secs(),
            "h2_rx_window_increment" => self.h2.rx_window_increment = n as u32,
            "h2_rx_window_low_water" => self.h2.rx_window_low_water = n as u32,
            "h3_0rtt" => self.h3.zero_rtt = n != 0.0,
            "h3_alt_svc_max_age" => self.h3.alt_svc_max_age = n as u64,
            "h3_conn_window" => self.h3.conn_window = n as u64,
            "h3_idle_timeout" => self.h3.idle_timeout = secs(),
            "h3_max_concurrent_streams" => self.h3.max_concurrent_streams = n as u32,
            "h3_max_field_section_size" => self.h3.max_field_section_size = n as u64,
            "h3_retry_above" => self.h3.retry_above = n as usize,
            "h3_send_window" => self.h3.send_window = n as u64,
            "h3_stream_window" => self.h3.stream_window = n as u64,
            _ => return false,
        }
        true
    }

    /// The ESI parser's feature bits.
    pub fn esi_features(&self) -> crate::esi::Features {
        let on = |name| self.has_feature(name);
        crate::esi::Features {
            disable_xml_check: on("esi_disable_xml_check"),
            ignore_https: on("esi_ignore_https"),
            ignore_other_elements: on("esi_ignore_other_elements"),
            remove_bom: on("esi_remove_bom"),
        }
    }

    /// Is the `feature` bit `name` set?
    pub fn has_feature(&self, name: &str) -> bool {
        self.feature & bits::of("feature").bit(name) != 0
    }

    /// Feature rfc9111 (RFC mode, issue 36): read on every request, so a
    /// mask rather than has_feature's search by name.
    pub fn rfc9111(&self) -> bool {
        self.feature & bits::RFC9111 != 0
    }

    /// Feature http2 (checked on every HTTP/1 request, for h2c).
    pub fn http2(&self) -> bool {
        self.feature & bits::HTTP2 != 0
    }

    /// Feature https_scheme (checked on every absolute-form request).
    pub fn https_scheme(&self) -> bool {
        self.feature & bits::HTTPS_SCHEME != 0
    }

    /// Feature http3: QUIC connections are accepted, Alt-Svc sent.
    pub fn http3(&self) -> bool {
        self.feature & bits::HTTP3 != 0
    }

    /// What the gzip and Brotli coders are set to.
    pub fn coding(&self) -> crate::gzip::code::Settings {
        crate::gzip::code::Settings {
            level: self.gzip_level,
            memlevel: self.gzip_memlevel,
            buffer: self.gzip_buffer,
            brotli_quality: self.brotli_quality,
        }
    }

    /// The current value of `name`, as param.show prints it.
    pub fn get(&self, name: &str) -> Option<&str> {
        DEFS.iter().position(|d| d.name == name).map(|i| self.texts[i].as_str())
    }

    /// Every (definition, current value) pair, in order.
    pub fn all(&self) -> impl Iterator<Item = (&'static ParamDef, &str)> {
        DEFS.iter().zip(self.texts.iter().map(String::as_str))
    }
}

/// How a value is shown: seconds with 3 decimals, booleans on/off, sizes
/// and counts as given.
fn canonical(d: &ParamDef, v: &str, n: f64) -> String {
    match d.kind {
        Kind::Seconds => format!("{n:.3}"),
        Kind::Bool => (if n != 0.0 { "on" } else { "off" }).to_string(),
        Kind::Bits => bits::of(d.name).show(n as u32),
        Kind::Float => format!("{n}"),
        Kind::Pool => parse_pool(d, v).map(|(min, max, age)| format!("{min},{max},{age}")).unwrap_or_default(),
        Kind::TagMask => parse_mask(v, &TagMask::default()).map(|m| show_mask(&m)).unwrap_or_default(),
        Kind::Bytes => show_bytes(n as u64),
        Kind::Uint => v.trim().to_string(),
        Kind::Text => v.to_string(),
    }
}

/// A size as Varnish's fmt_bytes shows it: the largest unit that keeps
/// it whole (`64k`, `80M`), two decimals where a quarter unit is left
/// (`0.25G`), bytes when the low byte is not zero (`255b`).
fn show_bytes(mut t: u64) -> String {
    if t == 0 || t & 0xff != 0 {
        return format!("{t}b");
    }
    for unit in ['k', 'M', 'G', 'T', 'P', 'E'] {
        if t & 0x300 != 0 {
            return format!("{:.2}{unit}", t as f64 / 1024.0);
        }
        t /= 1024;
        if t & 0xff != 0 {
            return format!("{t}{unit}");
        }
    }
    format!("{t}E")
}

/// clap value parser for `-p name=value`: checks the name and the value.
pub fn parse_param_arg(s: &str) -> Result<(String, String), ParamError> {
    let (k, v) = s.split_once('=').ok_or_else(|| ParamError::NotNameValue(s.to_string()))?;
    Params::default().set(k, v)?;
    Ok((k.to_string(), v.to_string()))
}

/// clap value parser for `-r name`: a parameter's name.
pub fn parse_param_name(s: &str) -> Result<String, ParamError> {
    def(s.trim()).map(|d| d.name.to_string()).ok_or_else(|| ParamError::Unknown(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_typed() {
        let p = Params::default();
        for d in DEFS.iter().filter(|d| d.effect != Effect::Unavailable) {
            assert!(validate(d, d.default).is_ok(), "{}", d.name);
            assert_eq!(p.get(d.name), Some(canonical(d, d.default, validate(d, d.default).unwrap()).as_str()));
        }
        assert_eq!(p.timeout_idle, Duration::from_secs(5));
        assert_eq!(p.http_req_size, 32 * 1024);
        assert_eq!(p.vsl_space, 80 << 20);
        assert!(p.auto_restart);
        let mut names: Vec<_> = names().collect();
        let sorted = {
            let mut s = names.clone();
            s.sort();
            s
        };
        assert_eq!(names, sorted, "param.show lists in name order");
        names.dedup();
        assert_eq!(names.len(), DEFS.len());
    }

    #[test]
    fn feature_bits_as_varnish_sets_them() {
        let mut p = Params::default();
        assert_eq!(p.get("feature"), Some("+validate_headers"));
        p.set("feature", "+esi_ignore_https,-validate_headers").unwrap();
        assert_eq!(p.get("feature"), Some("+esi_ignore_https"));
        assert!(p.esi_features().ignore_https && !p.esi_features().remove_bom);
        p.set("feature", "+esi_remove_bom").unwrap();
        assert_eq!(p.get("feature"), Some("+esi_ignore_https,+esi_remove_bom"));
        p.set("feature", "none").unwrap();
        assert_eq!(p.get("feature"), Some("none"));
        p.set("feature", "default").unwrap();
        assert_eq!(p.get("feature"), Some("+validate_headers"));
        assert_eq!(p.set("feature", "+bogus").unwrap_err().to_string(), "Unknown feature bit (+bogus)");
        assert_eq!(p.set("feature", "http2").unwrap_err().to_string(), "Missing '+' or '-' (http2)");
        assert_eq!(p.set("debug", "default").unwrap_err().to_string(), "Missing '+' or '-' (default)");
        assert_eq!(p.get("feature"), Some("+validate_headers"), "a refused value changes nothing");
    }

    #[test]
    fn rfc9111_is_its_feature_bit() {
        let mut p = Params::default();
        assert!(!p.rfc9111());
        p.set("feature", "+rfc9111").unwrap();
        assert!(p.rfc9111() && p.has_feature("rfc9111"));
        assert_eq!(bits::of("feature").bit("rfc9111"), bits::RFC9111);
        for (name, bit) in [("http2", bits::HTTP2), ("https_scheme", bits::HTTPS_SCHEME), ("http3", bits::HTTP3)] {
            assert_eq!(bits::of("feature").bit(name), bit, "{name}");
        }
        p.set("feature", "+http2,+https_scheme").unwrap();
        assert!(p.http2() && p.https_scheme());
    }

    #[test]
    fn sizes_and_validation() {
        assert_eq!(parse_size("80M"), Ok(80 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("lots").is_err());
        let mut p = Params::default();
        p.set("timeout_idle", "1.5").unwrap();
        assert_eq!(p.timeout_idle, Duration::from_millis(1500));
        assert_eq!(p.get("timeout_idle"), Some("1.500"));
        assert_eq!(p.set("http_max_hdr", "8").map_err(|e| e.to_string()), Err("Must be at least 32".into()));
        assert_eq!(p.set("http_max_hdr", "70000").map_err(|e| e.to_string()), Err("Must be no more than 65535".into()));
        assert!(p.set("nope", "1").unwrap_err().to_string().contains("Unknown parameter"));
        assert!(p.set("auto_restart", "maybe").is_err());
        p.set("auto_restart", "off").unwrap();
        assert_eq!(p.get("auto_restart"), Some("off"));
        assert!(parse_param_arg("timeout_idle").is_err());
        assert!(p.set("timeout_idle", "NaN").is_err());
        // Durations that would overflow a deadline (a panic in tokio).
        assert!(p.set("send_timeout", "1e30").is_err());
        assert!(p.set("timeout_reqbody", "inf").is_err());
        assert!(p.set("pipe_timeout", "2999999999").is_ok());
    }

    #[test]
    fn sizes_show_as_varnish_shows_them() {
        for (n, shown) in [(0, "0b"), (255, "255b"), (256, "0.25k"), (768, "0.75k"), (1024, "1k"), (65536, "64k"), (65535, "65535b")] {
            assert_eq!(show_bytes(n), shown, "{n}");
        }
        assert_eq!(show_bytes(268435456), "0.25G");
        assert_eq!(show_bytes(80 << 20), "80M");
        let mut p = Params::default();
        p.set("http_req_size", "65536").unwrap();
        assert_eq!(p.get("http_req_size"), Some("64k"));
        p.set("workspace_client", "131072b").unwrap();
        assert_eq!(p.get("workspace_client"), Some("128k"));
    }

    #[test]
    fn inert_parameters_as_varnish_takes_them() {
        let mut p = Params::default();
        p.set("thread_pools", "4").unwrap();
        assert_eq!(p.get("thread_pools"), Some("4"));
        assert_eq!(p.set("thread_pools", "33").unwrap_err().to_string(), "Must be no more than 32");
        p.set("thread_pool_max", "unlimited").unwrap();
        assert_eq!(p.get("thread_pool_max"), Some("unlimited"));
        p.set("pool_req", "1, 2, 3.5").unwrap();
        assert_eq!(p.get("pool_req"), Some("1,2,3.5"));
        assert_eq!(p.set("pool_req", "1,2").unwrap_err(), ParamError::PoolFields);
        assert_eq!(p.set("pool_req", "3,2,1").unwrap_err(), ParamError::PoolOrder);
        p.set("debug", "+syncvsl,+vtc_mode").unwrap();
        p.set("debug", "-syncvsl").unwrap();
        assert_eq!(p.get("debug"), Some("+vtc_mode"));
        assert_eq!(p.set("debug", "+bogus").unwrap_err().to_string(), "Unknown debug bit (+bogus)");
        p.set("experimental", "+drop_pools").unwrap();
        assert_eq!(p.get("feature"), Some("+validate_headers"), "other bit sets stay as they were");
        p.set("acceptor_sleep_decay", "0.5").unwrap();
        assert_eq!(p.get("acceptor_sleep_decay"), Some("0.5"));
        assert!(p.set("acceptor_sleep_decay", "1.5").is_err());
        p.set("cc_command", "exec cc -o %o %s").unwrap();
        p.set("workspace_client", "128k").unwrap();
        assert_eq!(p.set("workspace_client", "1k").unwrap_err().to_string(), "Must be at least 9k");
        // As varnishd on Linux: known, but not available.
        assert_eq!(p.set("accept_filter", "on").unwrap_err().to_string(), "parameter \"accept_filter\" is not available on this platform.");
        assert_eq!(p.get("accept_filter"), Some("-"));
    }

    #[test]
    fn vsl_mask_as_varnish_tweaks_it() {
        let mut p = Params::default();
        assert!(p.get("vsl_mask").unwrap().starts_with("-Debug,"));
        p.set("vsl_mask", "+VCL_trace").unwrap();
        assert!(!p.get("vsl_mask").unwrap().contains("VCL_trace"));
        p.set("vsl_mask", "-WorkThread,-ttl").unwrap();
        assert!(p.get("vsl_mask").unwrap().contains("-TTL"));
        assert_eq!(p.set("vsl_mask", "FooBar").unwrap_err().to_string(), "Missing '+' or '-' (FooBar)");
        assert_eq!(p.set("vsl_mask", "-FooBar").unwrap_err().to_string(), "Unknown VSL tag (-FooBar)");
        assert!(p.set("vsl_mask", "é").is_err());
        p.set("vsl_mask", "default").unwrap();
        assert_eq!(p.get("vsl_mask"), Params::default().get("vsl_mask"));
    }
}
