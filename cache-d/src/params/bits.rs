//! The bit-set parameters (`feature`, `debug`, `experimental`): their
//! names as Varnish 7.1 has them, `+name,-name` edits and how they show.

use super::def::ParamError;

/// Varnish 7.1's feature bits, in param.show order, then cachekit's own:
/// rfc9111 (caching as RFC 9111/9110, 9213 and 5861 say, where Varnish's
/// defaults differ: cache-vcl(7), RFC MODE).
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
    "rfc9111",
    "http3",
];

/// The rfc9111 feature's bit, for the per-request check
/// ([`crate::params::Params::rfc9111`]): a mask, not a search by name.
pub const RFC9111: u32 = feature_bit("rfc9111");
/// The http3 feature's bit (read per response for Alt-Svc).
pub const HTTP3: u32 = feature_bit("http3");
/// Bits read on every request (a mask each, not a search by name).
pub const HTTP2: u32 = feature_bit("http2");
pub const HTTPS_SCHEME: u32 = feature_bit("https_scheme");

/// A feature's bit, found at compile time.
const fn feature_bit(name: &str) -> u32 {
    let mut i = 0;
    while i < FEATURES.len() {
        let (a, b) = (FEATURES[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return 1 << i;
            }
        }
        i += 1;
    }
    panic!("not a feature")
}

/// Varnish 7.1's debug bits (accepted; none acts in cache-d).
const DEBUG: &[&str] = &[
    "req_state",
    "workspace",
    "waitinglist",
    "syncvsl",
    "hashedge",
    "vclrel",
    "lurker",
    "esi_chop",
    "flush_head",
    "vtc_mode",
    "witness",
    "vsm_keep",
    "slow_acceptor",
    "h2_nocheck",
    "vmod_so_keep",
    "processors",
    "protocol",
    "vcl_keep",
    "lck",
];

/// Varnish 7.1's experimental bits.
const EXPERIMENTAL: &[&str] = &["drop_pools"];

/// `feature`'s default: +validate_headers.
pub const DEFAULT_FEATURES: u32 = 1 << 11;

/// One bit-set parameter: its bit names, the word its errors use and the
/// bits `default` stands for.
pub struct BitSet {
    names: &'static [&'static str],
    what: &'static str,
    default: u32,
}

/// The bits of parameter `param` (`feature` for any other name).
pub fn of(param: &str) -> BitSet {
    match param {
        "debug" => BitSet { names: DEBUG, what: "debug bit", default: 0 },
        "experimental" => BitSet { names: EXPERIMENTAL, what: "experimental bit", default: 0 },
        _ => BitSet { names: FEATURES, what: "feature bit", default: DEFAULT_FEATURES },
    }
}

impl BitSet {
    /// The bit of `name`, 0 if there is none.
    pub fn bit(&self, name: &str) -> u32 {
        self.names.iter().position(|f| f.eq_ignore_ascii_case(name)).map_or(0, |i| 1 << i)
    }

    /// `+a,-b`, `none` or `default`, applied to `current`.
    pub fn parse(&self, v: &str, current: u32) -> Result<u32, ParamError> {
        let mut bits = current;
        for tok in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            // As varnishd: `default` where the default is not none, and a
            // sign on every name.
            match tok {
                "none" => bits = 0,
                "default" if self.default != 0 => bits = self.default,
                _ => {
                    let (on, name) = match tok.as_bytes()[0] {
                        b'-' => (false, &tok[1..]),
                        b'+' => (true, &tok[1..]),
                        _ => return Err(ParamError::MissingSign(tok.to_string())),
                    };
                    let b = self.bit(name);
                    if b == 0 {
                        return Err(ParamError::UnknownBit(self.what, tok.to_string()));
                    }
                    bits = if on { bits | b } else { bits & !b };
                }
            }
        }
        Ok(bits)
    }

    /// As param.show shows bits: `+a,+b`, or `none`.
    pub fn show(&self, bits: u32) -> String {
        let on: Vec<String> = self.names.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, f)| format!("+{f}")).collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}
