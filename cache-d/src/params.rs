//! Run-time parameters: one table of definitions (Varnish's names, units,
//! defaults, limits and descriptions) behind `-p name=value` and the admin
//! socket's `param.show`, `param.set` and `param.reset`.

use std::time::Duration;

/// How a parameter's value is written and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Seconds, fractional allowed.
    Seconds,
    /// A size with an optional b/k/M/G suffix.
    Bytes,
    /// A plain count.
    Uint,
    /// on/off (true/false, yes/no, enable/disable).
    Bool,
    /// Named bits (`feature`): `+name`, `-name`, `none`, `default`.
    Bits,
    /// Log tags left out (`vsl_mask`): `-Tag` masks, `+Tag` unmasks.
    TagMask,
    /// Free text (`vcl_path`).
    Text,
}

/// One parameter's definition.
#[derive(Debug)]
pub struct ParamDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub min: Option<&'static str>,
    pub max: Option<&'static str>,
    pub units: &'static str,
    pub description: &'static str,
    /// Takes effect only when the child (re)starts.
    pub restart: bool,
}

macro_rules! defs {
    ($( $name:literal $kind:ident $def:literal $min:expr, $max:expr, $units:literal $restart:literal $desc:literal; )*) => {
        /// Every parameter, in `param.show` order.
        pub static DEFS: &[ParamDef] = &[ $( ParamDef {
            name: $name, kind: Kind::$kind, default: $def, min: $min, max: $max,
            units: $units, description: $desc, restart: $restart,
        }, )* ];
    };
}

defs! {
    "auto_restart" Bool "on" None, None, "bool" false "Automatically restart the child/worker process if it dies.";
    "backend_idle_timeout" Seconds "60.000" Some("1.000"), None, "seconds" false "Timeout before we close unused backend connections.";
    "backend_local_error_holddown" Seconds "10.000" Some("0.000"), None, "seconds" false "When connecting to backends, certain error codes (EADDRNOTAVAIL, EACCESS, EPERM) signal a local resource shortage or configuration issue for which retrying connection attempts may worsen the situation; new connections are not tried for this long.";
    "backend_remote_error_holddown" Seconds "0.250" Some("0.000"), None, "seconds" false "When connecting to backends, certain error codes (ECONNREFUSED, ENETUNREACH) signal fundamental connection issues such as the backend not accepting connections or routing problems; new connections are not tried for this long.";
    "ban_dups" Bool "on" None, None, "bool" false "Eliminate older identical bans when a new ban is added.";
    "ban_lurker_age" Seconds "60.000" Some("0.000"), None, "seconds" false "The ban lurker will ignore bans until they are this old.";
    "ban_lurker_sleep" Seconds "0.010" Some("0.000"), None, "seconds" false "How long the ban lurker sleeps between passes (0 disables it).";
    "between_bytes_timeout" Seconds "60.000" Some("0.000"), None, "seconds" false "We only wait for this many seconds between bytes received from the backend before giving up the fetch.";
    "brotli_quality" Uint "5" Some("0"), Some("11"), "" false "Brotli quality of the copies beresp.do_brotli makes: 0 is fastest, 11 smallest and far slower (cachekit's own).";
    "cli_limit" Bytes "48k" Some("128b"), Some("99999999b"), "bytes" false "Maximum size of CLI response.  If the response exceeds this limit, the response code will be 201 instead of 200 and the last line will indicate the truncation.";
    "cli_timeout" Seconds "60.000" Some("0.000"), None, "seconds" false "Timeout for the child's replies to CLI requests from the manager.";
    "connect_timeout" Seconds "3.500" Some("0.000"), None, "seconds" false "Default connection timeout for backend connections.";
    "default_grace" Seconds "10.000" Some("0.000"), None, "seconds" false "Default grace period: how long an object is served after its TTL while a fresh one is fetched.";
    "default_keep" Seconds "0.000" Some("0.000"), None, "seconds" false "Default keep period: how long an expired object is kept for conditional revalidation.";
    "default_ttl" Seconds "120.000" Some("0.000"), None, "seconds" false "The TTL assigned to objects if neither the backend nor the policy assigns one.";
    "feature" Bits "+validate_headers" None, None, "" false "Enable/Disable various minor features: +name or -name (comma-separated), none, default. Known: http2, short_panic, no_coredump, https_scheme, http_date_postel, esi_ignore_https, esi_disable_xml_check, esi_ignore_other_elements, esi_remove_bom, esi_include_onerror, wait_silo, validate_headers, busy_stats_rate (http2 — off by default, as in Varnish —, validate_headers and the esi_* ones take effect; the others are accepted for Varnish's command lines).";
    "fetch_chunksize" Bytes "16k" Some("4k"), None, "bytes" false "The default chunksize used by fetcher (accepted for Varnish's command lines: cachekit stores a body in the pieces it reads).";
    "first_byte_timeout" Seconds "60.000" Some("0.000"), None, "seconds" false "Default timeout for receiving the first byte from the backend.";
    "gzip_buffer" Bytes "32k" Some("2k"), None, "bytes" false "Size of malloc buffer used for gzip processing. These buffers are used for in-transit data, for instance gunzip'ed data being sent to a client. Making this space too small results in more overhead, writes to sockets etc, making it too big is probably just a waste of memory.";
    "gzip_level" Uint "6" Some("0"), Some("9"), "" false "Gzip compression level: 0=debug, 1=fast, 9=best";
    "gzip_memlevel" Uint "8" Some("1"), Some("9"), "" false "Gzip memory level 1=slow/least, 9=fast/most compression. Memory impact is 1=1k, 2=2k, ... 9=256k.";
    "h2_header_table_size" Bytes "4k" Some("0b"), Some("4294967295b"), "bytes" false "HTTP2 header table size: the size of the HPACK dynamic table the client may use when encoding headers for us (bounded: a client cannot make us keep more).";
    "h2_initial_window_size" Bytes "65535b" Some("65535b"), Some("2147483647b"), "bytes" false "HTTP2 initial flow control window size: how much of a request body a client may send on a stream before we read it.";
    "h2_max_concurrent_streams" Uint "100" Some("0"), None, "streams" false "HTTP2 Maximum number of concurrent streams: the requests a client may have in progress at once on one HTTP2 connection. Streams the client resets still count until their request's work is done, so a client cannot start more work than this by resetting (CVE-2023-44487).";
    "h2_max_frame_size" Bytes "16k" Some("16k"), Some("16777215b"), "bytes" false "HTTP2 maximum per frame payload size we are willing to accept.";
    "h2_max_header_list_size" Bytes "2147483647b" Some("0b"), Some("4294967295b"), "bytes" false "HTTP2 maximum size of an uncompressed header list; a request's headers are also bounded by http_req_size (the smaller applies), so an HPACK-compressed header block cannot expand beyond it.";
    "h2_rapid_reset" Seconds "1.000" Some("0.000"), None, "seconds" false "The upper threshold for how soon after its HEADERS a client's reset of a stream counts as suspect and is subjected to the rate limit of h2_rapid_reset_limit and h2_rapid_reset_period (as Varnish 7.5).";
    "h2_rapid_reset_limit" Uint "100" Some("0"), None, "" false "HTTP2 RST allowance: the most suspect stream resets (see h2_rapid_reset) and refused streams a client may cause per h2_rapid_reset_period before its connection is closed with GOAWAY ENHANCE_YOUR_CALM (SessClose RAPID_RESET, MAIN.sc_rapid_reset). 0 disables the limit.";
    "h2_rapid_reset_period" Seconds "60.000" Some("1.000"), None, "seconds" false "HTTP2 sliding window duration for h2_rapid_reset_limit.";
    "h2_rx_window_increment" Bytes "1M" Some("1M"), Some("1G"), "bytes" false "HTTP2 Receive Window Increments: accepted for Varnish's command lines. cachekit returns credit as request body bytes are consumed, so a stream's window refills to h2_initial_window_size and the connection's to h2_rx_window_low_water.";
    "h2_rx_window_low_water" Bytes "10M" Some("65535b"), Some("1G"), "bytes" false "HTTP2 Receive Window low water mark: the connection-wide window for request bodies we keep open (ie: POST, PUT etc.).";
    "http_brotli_support" Bool "off" None, None, "bool" false "Enable Brotli copies (cachekit's own): Accept-Encoding keeps br for clients that take it (br, gzip), beresp.do_brotli stores a Brotli copy next to the object, and clients that sent br get it. Off by default so that VCL sees Accept-Encoding exactly as Varnish washes it.";
    "http_gzip_support" Bool "on" None, None, "bool" false "Enable gzip support. When enabled Varnish request compressed objects from the backend and store them compressed. If a client does not support gzip encoding Varnish will uncompress compressed objects on demand. Varnish will also rewrite the Accept-Encoding header of clients indicating support for gzip to: Accept-Encoding: gzip. Clients that do not support gzip will have their Accept-Encoding header removed. When gzip support is disabled the variables beresp.do_gzip and beresp.do_gunzip have no effect in VCL.";
    "http_max_hdr" Uint "64" Some("32"), Some("65535"), "header lines" false "Maximum number of HTTP header lines we allow in a request or response.";
    "http_range_support" Bool "on" None, None, "bool" false "Enable support for HTTP Range headers.";
    "http_req_hdr_len" Bytes "8k" Some("40b"), None, "bytes" false "Maximum length of any HTTP client request header we will allow.";
    "http_req_size" Bytes "32k" Some("256b"), None, "bytes" false "Maximum number of bytes of HTTP client request we will deal with.";
    "http_resp_hdr_len" Bytes "8k" Some("40b"), None, "bytes" false "Maximum length of any HTTP backend response header we will allow.";
    "http_resp_size" Bytes "32k" Some("256b"), None, "bytes" false "Maximum number of bytes of HTTP backend response we will deal with.";
    "idle_send_timeout" Seconds "60.000" Some("0.000"), None, "seconds" false "Send timeout for individual pieces of data on client connections: a write that cannot proceed for this long closes the connection.";
    "max_connections" Uint "10000" Some("1"), Some("16777216"), "connections" true "Most client connections served at once; more are closed at once and counted in MAIN.sess_dropped (cachekit's own).";
    "max_esi_depth" Uint "5" Some("0"), None, "levels" false "Maximum depth of esi:include processing.";
    "max_restarts" Uint "4" Some("0"), None, "restarts" false "Upper limit on how many times a request can restart.";
    "max_retries" Uint "4" Some("0"), None, "retries" false "Upper limit on how many times a backend fetch can retry.";
    "max_vcl" Uint "100" Some("0"), None, "" false "Threshold of loaded VCL programs.  (VCL labels are not counted.)  Parameter max_vcl_handling determines behaviour.";
    "max_vcl_handling" Uint "1" Some("0"), Some("2"), "" false "Behaviour when attempting to exceed max_vcl loaded VCL: 0 - ignore max_vcl, 1 - issue a warning, 2 - refuse loading VCLs.";
    "nuke_limit" Uint "50" Some("0"), None, "allocations" false "Maximum number of objects we attempt to nuke in order to make space for a object body (per allocation; then the allocation fails and MAIN.n_lru_limited counts it: a body streamed to its clients is delivered unkept, one read whole first (do_stream off, ESI) fails the fetch).";
    "pipe_sess_max" Uint "0" Some("0"), None, "connections" false "Maximum number of sessions dedicated to pipe transactions (0: no limit).";
    "pipe_timeout" Seconds "60.000" Some("0.000"), None, "seconds" false "Idle timeout for PIPE sessions. If nothing has been received in either direction for this many seconds, the session is closed (0: never).";
    "prefer_ipv6" Bool "off" None, None, "bool" false "Prefer IPv6 address when connecting to backends which have both IPv4 and IPv6 addresses (accepted for Varnish's command lines: cachekit tries the addresses in the order the resolver gives them).";
    "reqbody_min_rate" Bytes "500b" Some("1b"), None, "bytes/second" false "After timeout_reqbody, a request body must keep arriving at this rate on average: its deadline is timeout_reqbody plus one second per this many bytes received (cachekit's own, as Apache's mod_reqtimeout MinRate).";
    "send_timeout" Seconds "600.000" Some("0.000"), None, "seconds" false "Total timeout for sending a response to the client.";
    "shortlived" Seconds "10.000" Some("0.000"), None, "seconds" false "Objects created with (ttl+grace+keep) shorter than this are counted as short-lived.";
    "stale_if_error" Bool "on" None, None, "bool" false "Deliver a stale object (still within grace or keep) instead of an error when its refresh fails: backend down, sick, timed out or answering 5xx (cachekit's own).";
    "timeout_idle" Seconds "5.000" Some("0.000"), Some("3600.000"), "seconds" false "Idle timeout for client connections: how long to wait for the first byte of a request.";
    "timeout_req" Seconds "2.000" Some("0.000"), Some("3600.000"), "seconds" false "Max time to receive a client's request head, from its first byte to the empty line that ends it (Varnish 4's timeout_req); slower heads are closed (SessClose RX_TIMEOUT).";
    "timeout_reqbody" Seconds "20.000" Some("0.000"), Some("86400.000"), "seconds" false "Time a request body may take before reqbody_min_rate applies; a body slower than that is cut (SessClose RX_BODY) (cachekit's own).";
    "transit_buffer" Bytes "1M" Some("64k"), None, "bytes" false "How far a fetch may read ahead of the slowest client for a body that is not kept: an uncacheable object, or one its store cannot hold (Varnish 7.3's parameter). The bytes every client has been sent are let go, so such a body costs this much memory however large it is and however slowly it is read. Varnish's default, 0b, buffers the whole body; cachekit's is bounded.";
    "vcc_err_unref" Bool "on" None, None, "bool" false "Unreferenced VCL objects result in error.";
    "vcc_unsafe_path" Bool "on" None, None, "bool" false "Allow '/' in vmod & include paths. Allow 'import ... from ...'.";
    "vcl_cooldown" Seconds "600.000" Some("1.000"), None, "seconds" false "How long a VCL is kept warm after being replaced as the active VCL (an auto VCL unused that long shows cold in vcl.list; cachekit keeps its program loaded until vcl.discard).";
    "vcl_path" Text "/etc/varnish:/usr/share/varnish/vcl" None, None, "" false "Directory (or colon separated list of directories) from which relative VCL filenames (vcl.load and include) are to be found.";
    "vsl_mask" TagMask "-Debug,-ExpKill,-H2RxBody,-H2RxHdr,-H2TxBody,-H2TxHdr,-Hash,-ObjHeader,-ObjProtocol,-ObjReason,-ObjStatus,-VCL_trace,-VdpAcct,-VfpAcct,-WorkThread" None, None, "" false "Mask individual VSL messages from being logged: default, or +Tag / -Tag to unmask / mask; records with a masked tag are not written.";
    "vsl_reclen" Bytes "255b" Some("16b"), Some("4084b"), "bytes" false "Maximum number of bytes in a log record.";
    "vsl_space" Bytes "80M" Some("64k"), Some("4G"), "bytes" true "The amount of space to allocate for the log ring.";
}

/// The definition of `name`.
pub fn def(name: &str) -> Option<&'static ParamDef> {
    DEFS.iter().find(|d| d.name == name)
}

/// Names accepted by `-p`.
pub fn names() -> impl Iterator<Item = &'static str> {
    DEFS.iter().map(|d| d.name)
}

/// Why a parameter value was refused (the texts are what param.set
/// answers).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("Unknown parameter \"{0}\".")]
    Unknown(String),
    #[error("\"{0}\" is not a size (use e.g. 512k, 80M)")]
    NotASize(String),
    #[error("size \"{0}\" is out of range")]
    SizeOutOfRange(String),
    #[error("\"{0}\" is not a boolean (use on or off)")]
    NotABoolean(String),
    #[error("\"{0}\" is not a number of seconds")]
    NotSeconds(String),
    #[error("\"{0}\" is not a whole number")]
    NotAWholeNumber(String),
    #[error("\"{0}\" is not a finite number")]
    NotFinite(String),
    #[error("Must be no more than {MAX_SECONDS:.0} seconds")]
    TooLong,
    #[error("Must be at least {0}")]
    BelowMinimum(&'static str),
    #[error("Must be no more than {0}")]
    AboveMaximum(&'static str),
    #[error("Unknown feature bit ({0})")]
    UnknownBit(String),
    #[error("\"{0}\" is not of the form name=value")]
    NotNameValue(String),
    #[error("Missing '+' or '-' ({0})")]
    MissingSign(String),
    #[error("Unknown VSL tag ({0})")]
    UnknownTag(String),
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
        Kind::Seconds => v.trim().parse::<f64>().map_err(|_| ParamError::NotSeconds(v.to_string())),
        Kind::Bytes => parse_size(v).map(|n| n as f64),
        Kind::Uint => v.trim().parse::<u64>().map(|n| n as f64).map_err(|_| ParamError::NotAWholeNumber(v.to_string())),
        Kind::Bool => parse_bool(v).map(|b| b as u8 as f64),
        Kind::Bits => parse_bits(v, DEFAULT_FEATURES, DEFAULT_FEATURES).map(|b| b as f64),
        Kind::TagMask => parse_mask(v, &TagMask::default()).map(|_| 0.0),
        Kind::Text => Ok(0.0),
    }
}

/// Varnish 7.1's feature bits, in param.show order.
pub const FEATURES: &[&str] = &[
    "http2",
    "short_panic",
    "no_coredump",
    "https_scheme",
    "http_date_postel",
    "esi_ignore_https",
    "esi_disable_xml_check",
    "esi_ignore_other_elements",
    "esi_remove_bom",
    "esi_include_onerror",
    "wait_silo",
    "validate_headers",
    "busy_stats_rate",
];

fn feature(name: &str) -> u32 {
    FEATURES.iter().position(|f| *f == name).map_or(0, |i| 1 << i)
}

const DEFAULT_FEATURES: u32 = 1 << 11;

/// `+a,-b`, `none` or `default`, applied to `current`.
fn parse_bits(v: &str, current: u32, default: u32) -> Result<u32, ParamError> {
    let mut bits = current;
    for tok in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match tok {
            "none" => bits = 0,
            "default" => bits = default,
            _ => {
                let (on, name) = match tok.as_bytes()[0] {
                    b'-' => (false, &tok[1..]),
                    b'+' => (true, &tok[1..]),
                    _ => (true, tok),
                };
                let b = feature(name);
                if b == 0 {
                    return Err(ParamError::UnknownBit(tok.to_string()));
                }
                bits = if on { bits | b } else { bits & !b };
            }
        }
    }
    Ok(bits)
}

/// As param.show shows bits: `+a,+b`, or `none`.
fn show_bits(bits: u32) -> String {
    let on: Vec<String> = FEATURES.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, f)| format!("+{f}")).collect();
    if on.is_empty() {
        "none".into()
    } else {
        on.join(",")
    }
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

/// The longest duration any parameter takes (about a century).
pub const MAX_SECONDS: f64 = 3.0e9;

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
    if let Some(min) = d.min {
        if n < number(d, min)? {
            return Err(ParamError::BelowMinimum(min));
        }
    }
    if let Some(max) = d.max {
        if n > number(d, max)? {
            return Err(ParamError::AboveMaximum(max));
        }
    }
    Ok(n)
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
        if d.kind == Kind::TagMask {
            self.vsl_mask = parse_mask(v, &self.vsl_mask)?;
            self.texts[i] = show_mask(&self.vsl_mask);
            return Ok(());
        }
        if d.kind == Kind::Text {
            // vcl_path, the only one.
            crate::vcl::paths::set_vcl_path(v);
            self.texts[i] = v.to_string();
            return Ok(());
        }
        if d.kind == Kind::Bits {
            // Relative to the bits set now, as Varnish's +name and -name.
            self.feature = parse_bits(v, self.feature, DEFAULT_FEATURES)?;
            self.texts[i] = show_bits(self.feature);
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
            "max_esi_depth" => self.max_esi_depth = n as u32,
            "max_restarts" => self.max_restarts = n as u32,
            "max_retries" => self.max_retries = n as u32,
            "max_vcl" => self.max_vcl = n.min(u32::MAX as f64) as u32,
            "max_vcl_handling" => self.max_vcl_handling = n as u32,
            "nuke_limit" => self.nuke_limit = n.min(u32::MAX as f64) as u32,
            "pipe_sess_max" => self.pipe_sess_max = n.min(u32::MAX as f64) as u32,
            "vcl_cooldown" => self.vcl_cooldown = secs(),
            "fetch_chunksize" => {}
            "pipe_timeout" => self.pipe_timeout = secs(),
            "prefer_ipv6" => self.prefer_ipv6 = n != 0.0,
            "reqbody_min_rate" => self.reqbody_min_rate = n as u64,
            "send_timeout" => self.send_timeout = secs(),
            "shortlived" => self.shortlived = n,
            "stale_if_error" => self.stale_if_error = n != 0.0,
            "timeout_idle" => self.timeout_idle = secs(),
            "timeout_req" => self.timeout_req = secs(),
            "timeout_reqbody" => self.timeout_reqbody = secs(),
            "transit_buffer" => self.transit_buffer = n as u64,
            "vcc_err_unref" => crate::vcl::xref::set_err_unref(n != 0.0),
            "vcc_unsafe_path" => crate::vcl::paths::set_unsafe_path(n != 0.0),
            "vsl_reclen" => self.vsl_reclen = n as usize,
            "vsl_space" => self.vsl_space = n as u64,
            _ => return Err(ParamError::Unknown(name.to_string())),
        }
        self.texts[i] = canonical(d, v, n);
        Ok(())
    }

    /// The ESI parser's feature bits.
    pub fn esi_features(&self) -> crate::esi::Features {
        let on = |name| self.feature & feature(name) != 0;
        crate::esi::Features {
            disable_xml_check: on("esi_disable_xml_check"),
            ignore_https: on("esi_ignore_https"),
            ignore_other_elements: on("esi_ignore_other_elements"),
            remove_bom: on("esi_remove_bom"),
        }
    }

    /// Is the `feature` bit `name` set?
    pub fn has_feature(&self, name: &str) -> bool {
        self.feature & feature(name) != 0
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
        Kind::Bits => show_bits(n as u32),
        Kind::TagMask => parse_mask(v, &TagMask::default()).map(|m| show_mask(&m)).unwrap_or_default(),
        Kind::Bytes | Kind::Uint => v.trim().to_string(),
        Kind::Text => v.to_string(),
    }
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
        for d in DEFS {
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
        assert_eq!(p.get("feature"), Some("+validate_headers"), "a refused value changes nothing");
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
