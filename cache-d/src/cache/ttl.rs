//! Object lifetimes from response headers (Varnish's core TTL computation,
//! RFC 9111 §4.2), sans-io: `now` is an argument.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The lifetime parameters that apply when headers say nothing.
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    /// Date headers within this many seconds of `now` count as our clock.
    pub clock_skew: f64,
    /// Feature http_date_postel: Date and Expires may have a one-digit day.
    pub postel: bool,
}

impl Defaults {
    /// The parameters default_ttl, default_grace, default_keep and feature
    /// http_date_postel; clock_skew at Varnish's default, 10 s (the
    /// parameter has no effect in cache-d).
    pub fn new(ttl: f64, grace: f64, keep: f64, postel: bool) -> Defaults {
        Defaults { ttl, grace, keep, clock_skew: 10.0, postel }
    }
}

/// Result of the computation, plus what the `TTL RFC` log record shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lifetime {
    /// When the object was created at the origin: now − Age.
    pub t_origin: f64,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    pub date: f64,
    pub expires: f64,
    pub max_age: f64,
}

/// What an object keeps of its lifetime: when it was made at the origin,
/// and its ttl, grace and keep (32 bytes; the Date, Expires and max-age
/// it was computed from are only logged, at fetch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Life {
    pub t_origin: f64,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
}

impl From<Lifetime> for Life {
    fn from(l: Lifetime) -> Life {
        Life { t_origin: l.t_origin, ttl: l.ttl, grace: l.grace, keep: l.keep }
    }
}

impl Lifetime {
    /// What an object keeps of it.
    pub fn life(&self) -> Life {
        Life::from(*self)
    }
    pub fn ttl_left(&self, now: f64) -> f64 {
        self.life().ttl_left(now)
    }
    pub fn expires_at(&self) -> f64 {
        self.life().expires_at()
    }
    pub fn fresh(&self, now: f64) -> bool {
        self.life().fresh(now)
    }
    pub fn in_grace(&self, now: f64) -> bool {
        self.life().in_grace(now)
    }
    pub fn in_keep(&self, now: f64) -> bool {
        self.life().in_keep(now)
    }
}

impl Life {
    /// Seconds of freshness left at `now` (negative when stale).
    pub fn ttl_left(&self, now: f64) -> f64 {
        self.t_origin + self.ttl - now
    }
    /// Fresh at `now`?
    pub fn fresh(&self, now: f64) -> bool {
        self.ttl_left(now) > 0.0
    }
    /// Stale but within grace at `now`?
    pub fn in_grace(&self, now: f64) -> bool {
        !self.fresh(now) && self.ttl_left(now) + self.grace > 0.0
    }
    /// Past grace but within keep (good for revalidation only)?
    pub fn in_keep(&self, now: f64) -> bool {
        self.ttl_left(now) + self.grace <= 0.0 && self.ttl_left(now) + self.grace + self.keep > 0.0
    }
    /// When the object can be dropped: after ttl, grace and keep.
    pub fn expires_at(&self) -> f64 {
        self.t_origin + self.ttl.max(0.0) + self.grace.max(0.0) + self.keep.max(0.0)
    }
}

/// What a request accepts of an object's ttl and grace: req.ttl and
/// req.grace (None: all of it; a negative bound counts as 0, as Varnish
/// sets them). The lookup judges objects with them, as Varnish's EXP_Ttl
/// and EXP_Ttl_grace do, so that a request that refuses a stale object
/// waits for the fetch already under way for it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bounds {
    pub ttl: Option<f64>,
    pub grace: Option<f64>,
}

/// `v`, no more than `bound`.
fn capped(v: f64, bound: Option<f64>) -> f64 {
    bound.map_or(v, |b| v.min(b.max(0.0)))
}

impl Life {
    /// Fresh at `now` for a request with these bounds (an object older
    /// than req.ttl is not, though not stale either).
    pub fn fresh_for(&self, b: Bounds, now: f64) -> bool {
        self.t_origin + capped(self.ttl, b.ttl) > now
    }
    /// Stale at `now`, and within the grace a request with these bounds
    /// accepts.
    pub fn in_grace_for(&self, b: Bounds, now: f64) -> bool {
        !self.fresh(now) && self.t_origin + capped(self.ttl, b.ttl) + capped(self.grace, b.grace) > now
    }
}

/// A [`Life`] as a stored object keeps it: grace and keep in single
/// precision (24 bytes instead of 32; whole seconds up to 16.7 million
/// and the usual fractions come back exact, others within 1e-7 of
/// themselves), and the ttl changeable in place (a soft purge ends it
/// while grace and keep stay).
#[derive(Debug)]
pub struct StoredLife {
    t_origin: f64,
    /// The ttl's f64 bits, grace's and keep's f32 bits.
    ttl: AtomicU64,
    grace: AtomicU32,
    keep: AtomicU32,
}

impl From<Life> for StoredLife {
    fn from(l: Life) -> StoredLife {
        StoredLife {
            t_origin: l.t_origin,
            ttl: l.ttl.to_bits().into(),
            grace: (l.grace as f32).to_bits().into(),
            keep: (l.keep as f32).to_bits().into(),
        }
    }
}

impl StoredLife {
    pub fn get(&self) -> Life {
        let ttl = f64::from_bits(self.ttl.load(Ordering::Acquire));
        let (grace, keep) = (f32::from_bits(self.grace.load(Ordering::Acquire)), f32::from_bits(self.keep.load(Ordering::Acquire)));
        Life { t_origin: self.t_origin, ttl, grace: grace as f64, keep: keep as f64 }
    }

    /// A soft purge: the ttl ends `ttl` seconds after `now` (never later
    /// than it would have), grace and keep become the given ones (None:
    /// unchanged) — xkey.softpurge and purge.soft().
    pub fn rearm(&self, now: f64, ttl: f64, grace: Option<f64>, keep: Option<f64>) {
        let ttl = (now + ttl.max(0.0) - self.t_origin).max(0.0);
        let _ = self.ttl.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| (ttl < f64::from_bits(old)).then_some(ttl.to_bits()));
        if let Some(g) = grace {
            self.grace.store((g.max(0.0) as f32).to_bits(), Ordering::Release);
        }
        if let Some(k) = keep {
            self.keep.store((k.max(0.0) as f32).to_bits(), Ordering::Release);
        }
    }
}

/// A `Cache-Control` directive's value (`max-age=60`), if present.
pub fn cc_value<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>, directive: &str) -> Option<Option<String>> {
    for (n, v) in headers {
        if !n.eq_ignore_ascii_case(b"cache-control") {
            continue;
        }
        for part in v.split(|&b| b == b',') {
            let part = String::from_utf8_lossy(part.trim_ascii());
            let (k, val) = match part.split_once('=') {
                Some((k, val)) => (k.trim(), Some(val.trim().trim_matches('"').to_string())),
                None => (part.as_ref(), None),
            };
            if k.eq_ignore_ascii_case(directive) {
                return Some(val);
            }
        }
    }
    None
}

/// Seconds as Varnish 7.1 reads Age and the delta-seconds of max-age,
/// s-maxage and stale-while-revalidate (`rfc2616_time` in
/// cache_rfc2616.c): a leading `-` is 0; otherwise `strtoul`'s number
/// (leading space and a sign allowed, no digits read as 0, at most
/// u32::MAX), kept only when what follows it, after spaces and tabs, is
/// the end, `,` or `.` — so `7200.0`, `7200,0` and `3600.5` are 7200,
/// 7200 and 3600, and `abc`, `7200;foo=bar` and `7200 s` are 0.
pub fn seconds(s: &[u8]) -> f64 {
    if s.first() == Some(&b'-') {
        return 0.0;
    }
    let mut i = s.iter().take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)).count();
    let negative = s.get(i) == Some(&b'-');
    if matches!(s.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    let val = s[i..i + digits].iter().fold(0u64, |v, &b| v.saturating_mul(10).saturating_add(u64::from(b - b'0')));
    // strtoul negates a `-` number as unsigned: anything but 0 is huge.
    let val = if negative && val != 0 { u64::MAX } else { val }.min(u64::from(u32::MAX));
    // With no digits strtoul's end is the start of the string.
    let rest = if digits == 0 { s } else { &s[i + digits..] };
    match rest.iter().find(|b| !matches!(b, b' ' | b'\t')) {
        None | Some(b',' | b'.') => val as f64,
        Some(_) => 0.0,
    }
}

/// A delta-seconds directive's value, read as Varnish reads it
/// ([`seconds`]); a quoted value (`max-age="60"`, which Varnish reads as
/// 0) counts as its contents, as RFC 9111 §5.2 asks recipients to accept.
fn delta(v: &str) -> f64 {
    seconds(v.as_bytes())
}

/// Compute the lifetime of a response with `status` and `headers` received
/// at `now`.
pub fn compute<'a, I>(status: u16, headers: I, now: f64, d: &Defaults) -> Lifetime
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let get = |name: &str| headers.clone().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v);
    let text = |v: &[u8]| String::from_utf8_lossy(v).trim().to_string();
    let age = get("age").map_or(0.0, |v| seconds(text(v).as_bytes()));
    // Dates as Varnish's VTIM_parse reads them; one that does not parse
    // (and the epoch itself) is as if absent.
    let date = get("date").and_then(|v| common::httpdate::parse_vtim(&text(v), d.postel)).unwrap_or(0.0);
    // A present but invalid Expires means "already expired" (RFC 9111 §5.3).
    // An Expires that does not parse (as Varnish's VTIM_parse reads dates:
    // exact names, the weekday matching) is ignored, as Varnish ignores it
    // (c0109). One before 1970 is negative, not absent: expired.
    let expires = get("expires").and_then(|v| common::httpdate::parse_vtim(&text(v), d.postel)).unwrap_or(0.0);
    let mut l = Lifetime { t_origin: now - age, ttl: d.ttl, grace: d.grace, keep: d.keep, date, expires, max_age: -1.0 };
    match status {
        302 | 307 => l.ttl = -1.0,
        200 | 203 | 204 | 300 | 301 | 304 | 404 | 410 | 414 => {}
        _ => {
            l.ttl = -1.0;
            return l;
        }
    }
    // As Varnish: s-maxage if present, else max-age; a directive without
    // a value (`max-age` alone) leaves the lifetime to Expires or the default.
    if let Some(Some(v)) = cc_value(headers.clone(), "s-maxage").or_else(|| cc_value(headers.clone(), "max-age")) {
        l.max_age = delta(&v);
        l.ttl = l.max_age;
    } else if expires != 0.0 {
        l.ttl = if expires < date {
            0.0
        } else if date == 0.0 || (date - now).abs() < d.clock_skew {
            (expires - now).max(0.0)
        } else {
            expires - date
        };
    }
    // RFC 5861's stale-while-revalidate sets the grace of a cacheable response.
    if let (true, Some(Some(v))) = (l.ttl >= 0.0, cc_value(headers.clone(), "stale-while-revalidate")) {
        l.grace = delta(&v);
    }
    l
}

/// What the lifetime tests of this module and of cache::rfc share.
#[cfg(test)]
pub(crate) mod testing {
    use super::Defaults;

    pub const D: Defaults = Defaults { ttl: 120.0, grace: 10.0, keep: 0.0, clock_skew: 10.0, postel: false };
    pub const NOW: f64 = 1_700_000_000.0;

    /// Header pairs as `compute` takes them.
    pub fn headers<'a>(hdrs: &[(&'a str, &'a str)]) -> Vec<(&'a [u8], &'a [u8])> {
        hdrs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect()
    }

    pub fn date(t: f64) -> String {
        common::httpdate::format(t)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{date, headers, D, NOW};
    use super::*;

    fn life(status: u16, hdrs: &[(&str, &str)]) -> Lifetime {
        compute(status, headers(hdrs).iter().copied(), NOW, &D)
    }

    #[test]
    fn max_age_and_s_maxage() {
        assert_eq!(life(200, &[("Cache-Control", "max-age=60")]).ttl, 60.0);
        // s-maxage wins for a shared cache (RFC 9111 §5.2.2.10).
        assert_eq!(life(200, &[("Cache-Control", "max-age=60, s-maxage=300")]).ttl, 300.0);
        assert_eq!(life(200, &[("cache-control", "public, MAX-AGE=\"90\"")]).ttl, 90.0);
        // An invalid max-age is stale (RFC 9111 §1.2.2).
        assert_eq!(life(200, &[("Cache-Control", "max-age=soon")]).ttl, 0.0);
        // max-age beats Expires (§5.3).
        let l = life(200, &[("Cache-Control", "max-age=60"), ("Expires", &date(NOW + 3600.0))]);
        assert_eq!(l.ttl, 60.0);
    }

    #[test]
    fn seconds_as_varnish_reads_them() {
        // rfc2616_time: the leading number when the end, `,` or `.` follows.
        for (v, n) in [("7200", 7200.0), ("7200.0", 7200.0), ("7200,0", 7200.0), ("3600.5", 3600.0), ("60 ", 60.0), ("+5", 5.0)] {
            assert_eq!(seconds(v.as_bytes()), n, "{v}");
        }
        for v in ["abc", "-7200", "7200;foo=bar", "7200 s", "", "0x10", " -1x"] {
            assert_eq!(seconds(v.as_bytes()), 0.0, "{v}");
        }
        // Large values stop at u32::MAX; strtoul's negation of a number
        // after a space is huge too.
        assert_eq!(seconds(b"99999999999999999999999"), u32::MAX as f64);
        assert_eq!(seconds(b" -1"), u32::MAX as f64);
        assert_eq!(seconds(b" -0"), 0.0);
    }

    #[test]
    fn delta_seconds_and_age_as_varnish() {
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600.0")]).ttl, 3600.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600.5, public")]).ttl, 3600.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600;x")]).ttl, 0.0);
        // A directive without a value leaves the lifetime to Expires or
        // the default, and a bare s-maxage hides max-age, as in Varnish.
        assert_eq!(life(200, &[("Cache-Control", "max-age")]).ttl, 120.0);
        assert_eq!(life(200, &[("Cache-Control", "s-maxage, max-age=60")]).ttl, 120.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age"), ("Expires", &date(NOW + 50.0))]).ttl, 50.0);
        // stale-while-revalidate: grace of a cacheable response only.
        assert_eq!(life(200, &[("Cache-Control", "max-age=1, stale-while-revalidate=5.9")]).grace, 5.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=1, stale-while-revalidate")]).grace, 10.0);
        assert_eq!(life(302, &[("Cache-Control", "stale-while-revalidate=30")]).grace, 10.0);
        // Age: the first line's leading number (age-parse-float, -suffix).
        for (v, a) in [("7200.0", 7200.0), ("7200,0", 7200.0), ("0, 7200", 0.0), ("abc", 0.0), ("-7200", 0.0)] {
            assert_eq!(life(200, &[("Age", v)]).t_origin, NOW - a, "{v}");
        }
        assert_eq!(life(200, &[("Age", "0"), ("Age", "7200")]).t_origin, NOW);
    }

    #[test]
    fn age_moves_the_origin_time() {
        // §4.2.3: current_age includes Age; the object expires max-age after origin.
        let l = life(200, &[("Cache-Control", "max-age=60"), ("Age", "50")]);
        assert_eq!(l.t_origin, NOW - 50.0);
        assert_eq!(l.ttl_left(NOW), 10.0);
        assert!(l.fresh(NOW + 9.0) && !l.fresh(NOW + 10.0));
        let old = life(200, &[("Cache-Control", "max-age=60"), ("Age", "100")]);
        assert!(!old.fresh(NOW));
    }

    #[test]
    fn expires_and_date() {
        // Date agrees with our clock: Expires − now.
        let l = life(200, &[("Date", &date(NOW)), ("Expires", &date(NOW + 300.0))]);
        assert_eq!(l.ttl_left(NOW), 300.0);
        // Origin clock 1000 s ahead: the difference Expires − Date counts.
        let l = life(200, &[("Date", &date(NOW + 1000.0)), ("Expires", &date(NOW + 1300.0))]);
        assert_eq!(l.ttl_left(NOW), 300.0);
        // Expires before Date: already expired.
        let l = life(200, &[("Date", &date(NOW)), ("Expires", &date(NOW - 10.0))]);
        assert_eq!(l.ttl, 0.0);
        // An invalid Expires (e.g. "0", or a wrong-case name) is ignored,
        // as Varnish ignores it (RFC 9111 §5.3 would say expired): the
        // default TTL applies (tests/conformance/c0109-expires-invalid.vtc).
        assert_eq!(life(200, &[("Expires", "0")]).ttl, life(200, &[]).ttl);
        assert_eq!(life(200, &[("Expires", "wed, 21 Oct 2015 07:28:00 GMT")]).ttl, life(200, &[]).ttl);
        // Dates read as VTIM_parse reads them: an Expires before 1970 is
        // expired, one that is not a date (a UTC zone) ignored; a Date
        // that is not one counts as absent.
        assert_eq!(life(200, &[("Expires", "Mon, 01 Jan 1900 00:00:00 GMT")]).ttl, 0.0);
        assert_eq!(life(200, &[("Expires", "Thu, 18 Aug 2050 02:01:18 UTC")]).ttl, 120.0);
        assert_eq!(life(200, &[("Date", "sun, 06 Nov 1994 08:49:37 GMT"), ("Expires", &date(NOW + 50.0))]).ttl_left(NOW), 50.0);
        // Expires without Date.
        assert_eq!(life(200, &[("Expires", &date(NOW + 50.0))]).ttl_left(NOW), 50.0);
        // Age counts against an Expires lifetime too (§4.2.3: current_age).
        let l = life(200, &[("Date", &date(NOW)), ("Expires", &date(NOW + 300.0)), ("Age", "50")]);
        assert_eq!(l.ttl_left(NOW), 250.0);
    }

    #[test]
    fn defaults_and_statuses() {
        assert_eq!(life(200, &[]).ttl, 120.0);
        assert_eq!(life(404, &[]).ttl, 120.0);
        // 302/307 are cacheable only with explicit freshness.
        assert_eq!(life(302, &[]).ttl, -1.0);
        assert_eq!(life(307, &[("Cache-Control", "max-age=30")]).ttl, 30.0);
        // Statuses outside the list are not cached, whatever the headers say.
        assert_eq!(life(500, &[("Cache-Control", "max-age=30")]).ttl, -1.0);
        assert_eq!(life(206, &[]).ttl, -1.0);
    }

    #[test]
    fn grace_and_keep_windows() {
        let l = life(200, &[("Cache-Control", "max-age=10, stale-while-revalidate=30")]);
        assert_eq!(l.grace, 30.0);
        assert!(l.fresh(NOW + 5.0));
        assert!(l.in_grace(NOW + 15.0));
        assert!(!l.in_grace(NOW + 45.0));
        let k = Lifetime { keep: 100.0, ..l };
        assert!(k.in_keep(NOW + 45.0) && !k.in_keep(NOW + 150.0));
        assert_eq!(k.expires_at(), NOW + 140.0);
    }

    #[test]
    fn request_bounds_narrow_ttl_and_grace() {
        let l = Life { t_origin: NOW, ttl: 10.0, grace: 30.0, keep: 0.0 };
        let none = Bounds::default();
        assert!(l.fresh_for(none, NOW + 5.0) && !l.in_grace_for(none, NOW + 5.0));
        assert!(l.in_grace_for(none, NOW + 15.0));
        // req.ttl 2s: older than that is not fresh for the request, but
        // not stale either until the object's own ttl ends.
        let ttl = Bounds { ttl: Some(2.0), grace: None };
        assert!(!l.fresh_for(ttl, NOW + 5.0) && !l.in_grace_for(ttl, NOW + 5.0));
        assert!(l.in_grace_for(ttl, NOW + 15.0) && !l.in_grace_for(ttl, NOW + 35.0));
        // req.grace 0 (or negative, which counts as 0): no grace at all.
        for g in [0.0, -1.0] {
            let grace = Bounds { ttl: None, grace: Some(g) };
            assert!(l.fresh_for(grace, NOW + 5.0) && !l.in_grace_for(grace, NOW + 10.5));
        }
        let grace = Bounds { ttl: None, grace: Some(5.0) };
        assert!(l.in_grace_for(grace, NOW + 14.0) && !l.in_grace_for(grace, NOW + 16.0));
    }
}
