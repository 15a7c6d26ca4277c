//! RFC mode's lifetimes (issue 36, feature rfc9111): the ttl, grace and keep
//! a response gets as RFC 9111 §4.2 and §5 compute them for a shared cache,
//! with CDN-Cache-Control (RFC 9213), Surrogate-Control (Edge Architecture
//! 1.0) and stale-while-revalidate / stale-if-error (RFC 5861), and whether
//! its status lets it be stored at all. The default mode's computation,
//! Varnish's, is [`super::ttl::compute`]; this one returns the same
//! [`Lifetime`]. Sans-io: `now` is an argument.

use std::borrow::Cow;

use super::ttl::{Defaults, Life, Lifetime};

/// The largest delta-seconds a cache needs to tell apart: 2^31 (RFC 9111
/// §1.2.2); larger values count as this.
const DELTA_MAX: f64 = 2_147_483_648.0;

/// A heuristic lifetime is this fraction of the time since Last-Modified
/// (RFC 9111 §4.2.2's "typical setting").
const HEURISTIC_FRACTION: f64 = 0.1;

/// ... and at most a day: RFC 7234 made a cache warn (Warning 113) when it
/// served a heuristically fresh response more than a day old; RFC 9111
/// dropped Warning, so the cap keeps that promise without the header, and a
/// year-old Last-Modified does not pin a response for five weeks.
const HEURISTIC_MAX: f64 = 86_400.0;

/// A delta-seconds argument: its value (at most [`DELTA_MAX`]), or there
/// but not 1*DIGIT (a decimal, a sign, a suffix, no value at all).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Delta {
    Secs(f64),
    Invalid,
}

impl Delta {
    fn parse(v: Option<&[u8]>) -> Delta {
        match v {
            Some(v) if !v.is_empty() && v.iter().all(u8::is_ascii_digit) => {
                Delta::Secs(v.iter().fold(0f64, |n, &b| (n * 10.0 + f64::from(b - b'0')).min(DELTA_MAX)))
            }
            _ => Delta::Invalid,
        }
    }

    /// Seconds; an invalid value counts as 0 (RFC 9111 §4.2.1 encourages
    /// caches to take invalid freshness information as stale).
    fn secs(self) -> f64 {
        match self {
            Delta::Secs(s) => s,
            Delta::Invalid => 0.0,
        }
    }
}

/// Which field a directive list comes from.
#[derive(Clone, Copy, PartialEq)]
enum Field {
    CacheControl,
    /// RFC 9213; the same directives as Cache-Control.
    Cdn,
    /// Edge Architecture 1.0: `max-age=N[+M][;target]`, `no-store`.
    Surrogate,
}

/// The directives of one field that decide freshness, storing and stale
/// use. Repeated directives: the first counts (RFC 9111 §4.2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Directives {
    max_age: Option<Delta>,
    /// Surrogate-Control: `max_age` came from a targeted directive, which
    /// wins over an untargeted one.
    targeted: bool,
    s_maxage: Option<Delta>,
    no_store: bool,
    private: bool,
    /// Unqualified `no-cache` (the qualified form only limits fields).
    no_cache: bool,
    /// `no-cache="field, ..."`.
    no_cache_fields: bool,
    /// must-revalidate or proxy-revalidate.
    revalidate: bool,
    /// must-revalidate alone (it makes an Authorization response
    /// shareable, RFC 9111 §3.5; proxy-revalidate does not).
    must_revalidate: bool,
    public: bool,
    must_understand: bool,
    swr: Option<Delta>,
    sie: Option<Delta>,
    /// Any directive at all (an empty field is as if absent, RFC 9213 §2.1).
    any: bool,
}

impl Directives {
    /// The directives of every `name` line, in order.
    fn of<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>, name: &str, field: Field) -> Directives {
        let mut d = Directives::default();
        for (_, v) in headers.filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())) {
            for member in members(v) {
                d.add(member, field);
            }
        }
        d
    }

    fn add(&mut self, member: &[u8], field: Field) {
        let (name, value) = match member.iter().position(|&b| b == b'=') {
            Some(i) => (&member[..i], Some(unquote(&member[i + 1..]))),
            None => (member, None),
        };
        let value = value.as_deref();
        self.any = true;
        let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
        if is("max-age") && field == Field::Surrogate {
            // `max-age=60+30;edge`: the freshness before `+` and `;`; a
            // targeted one wins (cache-d sends no Surrogate-Capability yet,
            // so a target cannot name it: every target counts as its own).
            let v = value.unwrap_or_default();
            let targeted = v.contains(&b';');
            let secs = v.split(|&b| b == b';' || b == b'+').next();
            if self.max_age.is_none() || (targeted && !self.targeted) {
                (self.max_age, self.targeted) = (Some(Delta::parse(secs)), targeted);
            }
        } else if is("max-age") {
            self.max_age.get_or_insert(Delta::parse(value));
        } else if is("s-maxage") && field != Field::Surrogate {
            self.s_maxage.get_or_insert(Delta::parse(value));
        } else if is("stale-while-revalidate") {
            self.swr.get_or_insert(Delta::parse(value));
        } else if is("stale-if-error") {
            self.sie.get_or_insert(Delta::parse(value));
        } else {
            let flag = if is("no-store") {
                &mut self.no_store
            } else if is("private") {
                &mut self.private
            } else if is("no-cache") && value.is_none() {
                &mut self.no_cache
            } else if is("no-cache") {
                &mut self.no_cache_fields
            } else if is("must-revalidate") {
                self.revalidate = true;
                &mut self.must_revalidate
            } else if is("proxy-revalidate") {
                &mut self.revalidate
            } else if is("public") {
                &mut self.public
            } else if is("must-understand") {
                &mut self.must_understand
            } else {
                return;
            };
            *flag = true;
        }
    }

    /// The explicit lifetime these directives give a shared cache:
    /// s-maxage over max-age (RFC 9111 §4.2.1).
    fn lifetime(&self) -> Option<Delta> {
        self.s_maxage.or(self.max_age)
    }

    /// Must not be served stale (RFC 9111 §4.2.4, §5.2.2.2, §5.2.2.8,
    /// §5.2.2.10: s-maxage implies proxy-revalidate; no-cache never
    /// serves without validation).
    fn forbids_stale(&self) -> bool {
        self.revalidate || self.s_maxage.is_some() || self.no_cache
    }
}

/// The members of a comma-separated list, without the optional whitespace
/// around them; commas inside quoted strings do not separate.
fn members(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    let (mut quoted, mut escaped, mut start, mut i) = (false, false, 0, 0);
    std::iter::from_fn(move || {
        while start <= v.len() {
            let end = loop {
                match v.get(i) {
                    None => break v.len(),
                    Some(_) if escaped => escaped = false,
                    Some(b'\\') if quoted => escaped = true,
                    Some(b'"') => quoted = !quoted,
                    Some(b',') if !quoted => break i,
                    Some(_) => {}
                }
                i += 1;
            };
            let member = v[start..end].trim_ascii();
            (start, i) = (end + 1, end + 1);
            if !member.is_empty() {
                return Some(member);
            }
        }
        None
    })
}

/// A directive's argument: a quoted-string's contents (RFC 9111 §5.2:
/// recipients accept both forms), or the token as it is. A quote that
/// does not close leaves the value as it is (then invalid as a number).
/// Borrowed unless the quoted string has escapes.
fn unquote(v: &[u8]) -> Cow<'_, [u8]> {
    match v {
        [b'"', inner @ .., b'"'] if v.len() >= 2 && inner.contains(&b'\\') => {
            let mut out = Vec::with_capacity(inner.len());
            let mut escaped = false;
            for &b in inner {
                if b == b'\\' && !escaped {
                    escaped = true;
                } else {
                    out.push(b);
                    escaped = false;
                }
            }
            Cow::Owned(out)
        }
        [b'"', inner @ .., b'"'] if v.len() >= 2 => Cow::Borrowed(inner),
        _ => Cow::Borrowed(v),
    }
}

/// The directives that govern a response for us: CDN-Cache-Control when it
/// has any (RFC 9213 §2.1: then Cache-Control and Expires are ignored),
/// else Surrogate-Control when it says max-age or no-store (its other
/// members are ESI capabilities), else Cache-Control with Expires. The
/// second value: Expires counts.
fn governing<'a, I>(headers: I) -> (Directives, bool)
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let cdn = Directives::of(headers.clone(), "cdn-cache-control", Field::Cdn);
    if cdn.any && cdn_valid(headers.clone()) {
        return (cdn, false);
    }
    let sc = Directives::of(headers.clone(), "surrogate-control", Field::Surrogate);
    if sc.max_age.is_some() || sc.no_store {
        return (sc, false);
    }
    (Directives::of(headers, "cache-control", Field::CacheControl), true)
}

/// What the built-in policy decides storing on in RFC mode
/// (vcl/builtin_rfc.rs): the directives of the field that governs, as
/// [`governing`] chooses it.
#[derive(Debug, Default, PartialEq)]
pub struct Storing {
    pub no_store: bool,
    /// `no-cache`, with or without field names.
    pub no_cache: bool,
    /// `private`, with or without field names.
    pub private: bool,
    /// `public`, `must-revalidate` or `s-maxage`: shareable although the
    /// request had Authorization (RFC 9111 §3.5).
    pub shareable: bool,
    pub must_understand: bool,
    pub max_age: bool,
    /// The origin said for how long, or that anyone may, store it:
    /// `max-age`, `s-maxage`, `public`, or (under Cache-Control) Expires.
    pub explicit: bool,
    /// Any directive at all.
    pub any: bool,
}

/// The storing directives of the field that governs a shared cache.
pub fn storing<'a, I>(headers: I) -> Storing
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let (d, with_expires) = governing(headers.clone());
    let expires = with_expires && headers.clone().any(|(n, _)| n.eq_ignore_ascii_case(b"expires"));
    Storing {
        no_store: d.no_store,
        no_cache: d.no_cache || d.no_cache_fields,
        private: d.private,
        shareable: d.public || d.must_revalidate || d.s_maxage.is_some(),
        must_understand: d.must_understand,
        max_age: d.max_age.is_some(),
        explicit: d.max_age.is_some() || d.s_maxage.is_some() || d.public || expires,
        any: d.any,
    }
}

/// RFC 9213 §2.1: CDN-Cache-Control is a Structured Field Dictionary (RFC
/// 8941 §3.2), its lines one list. One that does not parse as one, or
/// whose max-age, s-maxage, stale-while-revalidate or stale-if-error is
/// not an Integer, is ignored whole, and the other fields govern.
fn cdn_valid<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> bool {
    let lines: Vec<&[u8]> = headers.filter(|(n, _)| n.eq_ignore_ascii_case(b"cdn-cache-control")).map(|(_, v)| v).collect();
    let mut p = sf::Parser { b: &lines.join(&b", "[..]), i: 0 };
    p.dictionary(&["max-age", "s-maxage", "stale-while-revalidate", "stale-if-error"])
}

/// Just enough of RFC 8941 to tell whether a Dictionary parses.
mod sf;

/// A field that should have one value: absent, its value, or invalid
/// (unparsable, or more than one).
#[derive(Clone, Copy, Debug, PartialEq)]
enum One {
    Absent,
    At(f64),
    Invalid,
}

/// The one value of field `name`, read by `read`.
fn one<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>, name: &str, read: impl Fn(&[u8]) -> Option<f64>) -> One {
    let mut lines = headers.filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()));
    match (lines.next(), lines.next()) {
        (None, _) => One::Absent,
        (Some(_), Some(_)) => One::Invalid,
        (Some((_, v)), None) => read(v.trim_ascii()).map_or(One::Invalid, One::At),
    }
}

/// Age as RFC 9111 §5.1 has a cache read it: of a list (several members,
/// or several lines, which are the same list), the first member counts;
/// a first member that is not delta-seconds (`abc`, `-7200`, `7200.0`)
/// makes the cache ignore the field, and the age then comes from Date
/// alone. Parameters (`7200;foo=bar`) are left off first: the number
/// before them is the sender's age, and counting it errs toward stale.
/// (http-cache-tests 0.4.5 wanted invalid and listed values stale; its
/// newer version, like the RFC, wants them ignored or the first member.)
fn age_value<'a>(mut headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Option<f64> {
    let (_, v) = headers.find(|(n, _)| n.eq_ignore_ascii_case(b"age"))?;
    let first = v.split(|&b| b == b',').next().and_then(|m| m.split(|&b| b == b';').next());
    match Delta::parse(first.map(<[u8]>::trim_ascii)) {
        Delta::Secs(s) => Some(s),
        Delta::Invalid => None,
    }
}

/// Statuses whose caching RFC 9110 defines (for must-understand): the
/// final statuses it registers.
pub fn understood(status: u16) -> bool {
    matches!(status, 200..=206 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505)
}

/// Heuristically cacheable by default (RFC 9110 §15.1).
fn heuristic_status(status: u16) -> bool {
    matches!(status, 200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501)
}

/// Compute the lifetime of a response with `status` and `headers` received
/// at `now`, as RFC 9111 has a shared cache compute it:
/// - storable unless no-store or private (or must-understand with a status
///   RFC 9110 does not define; with one it does, no-store is ignored);
/// - ttl: the explicit lifetime (s-maxage, max-age, Expires − Date) for any
///   status; without one, for a heuristically cacheable status or a
///   `public` response, 10% of Date − Last-Modified (at most a day), or
///   `default_ttl` without Last-Modified; other statuses are not stored;
/// - t_origin: now − current age (the larger of Age, read as §5.1 says,
///   and now − Date when the origin's clock is behind ours by more than
///   `clock_skew`);
/// - invalid freshness information (max-age, Expires) and unqualified
///   no-cache: stale on arrival (ttl 0, kept for revalidation);
/// - grace: stale-while-revalidate, else `default_grace`; none under
///   must-revalidate, proxy-revalidate, s-maxage or no-cache;
/// - keep: `default_keep`, at least stale-if-error's window.
pub fn compute<'a, I>(status: u16, headers: I, now: f64, d: &Defaults) -> Lifetime
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let (dir, with_expires) = governing(headers.clone());
    let date = match one(headers.clone(), "date", |v| http_date(v, now)) {
        One::At(t) => Some(t),
        _ => None,
    };
    let expires = if with_expires { one(headers.clone(), "expires", |v| http_date(v, now)) } else { One::Absent };
    let age = age_value(headers.clone());
    let date_v = date.unwrap_or(now);
    // §4.2.3: current age from Age and from Date; a Date behind our clock
    // by no more than clock_skew is its one-second resolution or transit.
    let apparent = Some(now - date_v).filter(|&a| a > d.clock_skew).unwrap_or(0.0);
    let initial_age = age.map_or(apparent, |a| a.max(apparent));
    let mut l = Lifetime {
        t_origin: now - initial_age,
        ttl: -1.0,
        grace: d.grace,
        keep: d.keep,
        date: date.unwrap_or(0.0),
        expires: if let One::At(e) = expires { e } else { 0.0 },
        max_age: -1.0,
    };
    let storable = if dir.must_understand { understood(status) } else { !dir.no_store };
    if !storable || dir.private {
        return l;
    }
    l.ttl = match (dir.lifetime(), expires) {
        (Some(delta), _) => {
            l.max_age = delta.secs();
            l.max_age
        }
        (None, One::At(e)) => (e - date_v).max(0.0),
        (None, One::Invalid) => 0.0,
        (None, One::Absent) if heuristic_status(status) || dir.public => heuristic(headers, date_v, now).unwrap_or(d.ttl),
        (None, One::Absent) => return l,
    };
    if dir.no_cache {
        l.ttl = l.ttl.min(0.0);
    }
    if let Some(Delta::Secs(g)) = dir.swr {
        l.grace = g;
    }
    if let Some(Delta::Secs(k)) = dir.sie {
        l.keep = l.keep.max(k);
    }
    if dir.forbids_stale() {
        l.grace = 0.0;
    }
    l
}

/// RFC 9111 §4.2.2: 10% of the time from Last-Modified to Date, at most
/// [`HEURISTIC_MAX`]; None without a usable Last-Modified.
fn heuristic<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>, date: f64, now: f64) -> Option<f64> {
    match one(headers, "last-modified", |v| http_date(v, now)) {
        One::At(lm) if lm <= date => Some(((date - lm) * HEURISTIC_FRACTION).min(HEURISTIC_MAX)),
        _ => None,
    }
}

/// RFC mode: may the stale object `life`, stored with `headers`, be
/// delivered at `now` because its refresh failed (closed, timed out or
/// answered 5xx)? Only as the response allowed it (RFC 9111 §4.2.4: a
/// cache serves stale only when explicitly permitted): stale-if-error=N
/// (RFC 5861 §4), for N seconds after it went stale; never under
/// must-revalidate, proxy-revalidate, s-maxage or no-cache.
pub fn stale_on_error<'a, I>(headers: I, life: Life, now: f64) -> bool
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let (dir, _) = governing(headers);
    match dir.sie {
        Some(Delta::Secs(n)) if !dir.forbids_stale() => life.t_origin + life.ttl.max(0.0) + n > now,
        _ => false,
    }
}

/// An HTTP-date (RFC 9110 §5.6.7) in any of its three forms: IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37
/// GMT`) and asctime (`Sun Nov  6 08:49:37 1994`), as seconds since the
/// epoch. Exactly those shapes — single spaces, two-digit fields, a
/// four-digit year except in RFC 850, GMT — but names in any case, and the
/// weekday not checked against the date (it is redundant). Anything else
/// is not a date: an Expires that is not one makes a response stale.
pub fn http_date(s: &[u8], now: f64) -> Option<f64> {
    let mut c = Cursor { b: s.trim_ascii(), i: 0 };
    let (year, month, day, secs) = match c.b.get(3) {
        Some(b',') => {
            c.name(&WEEKDAYS)?;
            c.lit(b", ")?;
            let day = c.num(2)?;
            c.lit(b" ")?;
            let month = c.name(&MONTHS)?;
            c.lit(b" ")?;
            let year = c.num(4)?;
            c.lit(b" ")?;
            let secs = c.time()?;
            c.lit(b" GMT")?;
            (year, month, day, secs)
        }
        Some(b' ') => {
            c.name(&WEEKDAYS)?;
            c.lit(b" ")?;
            let month = c.name(&MONTHS)?;
            c.lit(b" ")?;
            // The day of the month is two characters, space-padded.
            let day = if c.b.get(c.i) == Some(&b' ') { c.lit(b" ").and_then(|_| c.num(1))? } else { c.num(2)? };
            c.lit(b" ")?;
            let secs = c.time()?;
            c.lit(b" ")?;
            (c.num(4)?, month, day, secs)
        }
        _ => {
            let wd = c.name(&WEEKDAYS)?;
            c.lit(&WEEKDAY_TAILS[wd as usize].as_bytes()[3..])?;
            c.lit(b", ")?;
            let day = c.num(2)?;
            c.lit(b"-")?;
            let month = c.name(&MONTHS)?;
            c.lit(b"-")?;
            let yy = c.num(2)?;
            c.lit(b" ")?;
            let secs = c.time()?;
            c.lit(b" GMT")?;
            (two_digit_year(yy, now), month, day, secs)
        }
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month as usize];
    if c.i != c.b.len() || day < 1 || day > days_in {
        return None;
    }
    Some((common::httpdate::days_from_civil(year, month + 1, day) * 86_400 + secs) as f64)
}

/// RFC 9110 §5.6.7: a two-digit year more than 50 years after `now`'s
/// is the most recent past year with those digits.
fn two_digit_year(yy: i64, now: f64) -> i64 {
    let this_year = common::httpdate::civil((now / 86_400.0).floor() as i64).0;
    let year = this_year - this_year % 100 + yy;
    if year > this_year + 50 {
        year - 100
    } else {
        year
    }
}

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const WEEKDAY_TAILS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// A date's reader: each step takes exactly what it expects or fails.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    /// `s` here, letters in any case.
    fn lit(&mut self, s: &[u8]) -> Option<()> {
        let got = self.b.get(self.i..self.i + s.len())?;
        got.eq_ignore_ascii_case(s).then(|| self.i += s.len())
    }
    /// Exactly `n` digits.
    fn num(&mut self, n: usize) -> Option<i64> {
        let got = self.b.get(self.i..self.i + n)?;
        got.iter().all(u8::is_ascii_digit).then(|| {
            self.i += n;
            got.iter().fold(0, |v, &b| v * 10 + i64::from(b - b'0'))
        })
    }
    /// One of three-letter `names`, in any case: its index.
    fn name(&mut self, names: &[&str]) -> Option<i64> {
        let got = self.b.get(self.i..self.i + 3)?;
        let at = names.iter().position(|n| n.as_bytes().eq_ignore_ascii_case(got))?;
        self.i += 3;
        Some(at as i64)
    }
    /// `08:49:37` as seconds into the day (a leap second 60 allowed).
    fn time(&mut self) -> Option<i64> {
        let h = self.num(2)?;
        self.lit(b":")?;
        let m = self.num(2)?;
        self.lit(b":")?;
        let s = self.num(2)?;
        (h < 24 && m < 60 && s <= 60).then_some(h * 3600 + m * 60 + s)
    }
}

pub mod language;
pub use language::language_selects;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ttl::testing::{date, headers, D, NOW};

    fn life(status: u16, hdrs: &[(&str, &str)]) -> Lifetime {
        compute(status, headers(hdrs).iter().copied(), NOW, &D)
    }

    /// Fresh at `now`, as the suite's "cached" asks.
    fn fresh(hdrs: &[(&str, &str)]) -> bool {
        life(200, hdrs).fresh(NOW)
    }

    #[test]
    fn an_invalid_cdn_cache_control_is_ignored_whole() {
        let cc_no_store = ("Cache-Control", "no-store");
        assert_eq!(life(200, &[("CDN-Cache-Control", "max-age=10000"), cc_no_store]).ttl, 10000.0);
        assert_eq!(
            life(200, &[("CDN-Cache-Control", "max-age=10000, stale-if-error=60;x=\"y\", foo=(a b), bar=?1"), cc_no_store]).ttl,
            10000.0
        );
        for bad in ["max-age=10000, &&&&&", "max-age=\"10000\"", "max-age=10000,", "Max-Age=10", "max-age=1.5", "max-age"] {
            assert_eq!(life(200, &[("CDN-Cache-Control", bad), cc_no_store]).ttl, -1.0, "{bad}");
            assert_eq!(life(200, &[("CDN-Cache-Control", bad), ("Cache-Control", "max-age=5")]).ttl, 5.0, "{bad}");
        }
    }

    #[test]
    fn age_as_rfc_9111_reads_it() {
        let ma = ("Cache-Control", "max-age=3600");
        // §5.1: an invalid first member: the field is ignored (fresh).
        for v in ["abc", "-7200", "7200.0", ""] {
            assert!(fresh(&[ma, ("Age", v)]), "{v}");
        }
        // Parameters are left off: 7200 counts.
        assert!(!fresh(&[ma, ("Age", "7200;foo=bar")]) && !fresh(&[ma, ("Age", "7200 ; foo=111")]));
        // A list, on one line or several: its first member counts.
        assert!(fresh(&[ma, ("Age", "0,7200")]) && fresh(&[ma, ("Age", "0, 0")]));
        assert!(!fresh(&[ma, ("Age", "7200,0")]) && !fresh(&[ma, ("Age", "3600, 3600")]));
        assert!(fresh(&[ma, ("Age", "0"), ("Age", "7200")]));
        assert!(!fresh(&[ma, ("Age", "7200"), ("Age", "0")]));
        assert_eq!(life(200, &[ma, ("Age", "100")]).t_origin, NOW - 100.0);
        let l = life(200, &[ma, ("Age", "abc")]);
        assert_eq!((l.t_origin, l.ttl), (NOW, 3600.0));
        // Larger than 2^31 counts as 2^31.
        assert_eq!(life(200, &[ma, ("Age", "99999999999")]).t_origin, NOW - DELTA_MAX);
    }

    #[test]
    fn cache_control_parsing() {
        assert_eq!(life(200, &[("Cache-Control", "max-age=003600")]).ttl, 3600.0);
        assert_eq!(life(200, &[("Cache-Control", "MaX-aGe=60, foobar")]).ttl, 60.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=\"60\"")]).ttl, 60.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=\"6\\0\"")]).ttl, 60.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=99999999999")]).ttl, DELTA_MAX);
        // Invalid values are stale (RFC 9111 §4.2.1), not absent.
        for v in ["max-age='3600'", "max-age=3600.0", "max-age=-1", "max-age=3600a", "max-age= 3600", "max-age"] {
            assert_eq!(life(200, &[("Cache-Control", v)]).ttl, 0.0, "{v}");
        }
        // Space before `=`: another directive's name, so no max-age: default.
        assert_eq!(life(200, &[("Cache-Control", "max-age =3600")]).ttl, 120.0);
        // A quoted extension hides what looks like a directive, commas too.
        let l = life(200, &[("Cache-Control", "ext=\"max-age=3600, s-maxage=9\", max-age=1")]);
        assert_eq!(l.ttl, 1.0);
        // The first of repeated directives counts, across lines.
        assert_eq!(life(200, &[("Cache-Control", "max-age=1"), ("Cache-Control", "max-age=1800")]).ttl, 1.0);
        // s-maxage over max-age, in any order or line.
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600"), ("Cache-Control", "s-maxage=1")]).ttl, 1.0);
        assert_eq!(life(200, &[("Cache-Control", "s-maxage=3600, max-age=1")]).ttl, 3600.0);
    }

    #[test]
    fn expires_and_date() {
        let d = date(NOW);
        assert_eq!(life(200, &[("Date", &d), ("Expires", &date(NOW + 300.0))]).ttl, 300.0);
        // Expires − Date even when Date is close to now (freshness-expires-age-fast-date).
        let l = life(200, &[("Date", &date(NOW + 10.0)), ("Expires", &date(NOW + 20.0)), ("Age", "15")]);
        assert_eq!(l.ttl, 10.0);
        assert!(!l.fresh(NOW));
        // A Date behind our clock by more than the skew ages the response.
        assert!(!fresh(&[("Date", &date(NOW - 7200.0)), ("Cache-Control", "max-age=3600")]));
        assert!(fresh(&[("Date", &date(NOW - 5.0)), ("Cache-Control", "max-age=60")]));
        // An invalid Date counts as now.
        assert_eq!(life(200, &[("Date", "foo"), ("Expires", &date(NOW + 10.0))]).ttl, 10.0);
        // An invalid Expires, or two, is stale (RFC 9111 §5.3).
        for e in ["0", "Thu, 18 Aug 2050 02:01:18 UTC", "Thu 18 Aug 2050 02:01:18 GMT", "Thu, 18 Aug 50 02:01:18 GMT"] {
            assert_eq!(life(200, &[("Date", &d), ("Expires", e)]).ttl, 0.0, "{e}");
        }
        let two = [("Date", d.as_str()), ("Expires", "Thu, 18 Aug 2050 02:01:18 GMT"), ("Expires", "Thu, 18 Aug 2050 02:01:19 GMT")];
        assert_eq!(life(200, &two).ttl, 0.0);
        // max-age beats Expires, even an invalid one.
        assert_eq!(life(200, &[("Cache-Control", "max-age=60"), ("Expires", "0")]).ttl, 60.0);
    }

    #[test]
    fn http_dates() {
        let t = 784_111_777.0; // Sun, 06 Nov 1994 08:49:37 GMT
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            " SUN, 06 NOV 1994 08:49:37 gmt ",
        ] {
            assert_eq!(http_date(s.as_bytes(), NOW), Some(t), "{s}");
        }
        // The weekday is not checked; names are.
        assert_eq!(http_date(b"Mon, 06 Nov 1994 08:49:37 GMT", NOW), Some(t));
        assert_eq!(http_date(b"Thu, 18 Aug 2050 02:01:18 GMT", NOW), Some(2_544_400_878.0));
        assert_eq!(http_date(b"Thursday, 18-Aug-50 02:01:18 GMT", NOW), Some(2_544_400_878.0));
        assert_eq!(http_date(b"Sat, 01 Jan 1900 00:00:00 GMT", NOW), Some(-2_208_988_800.0));
        // A two-digit year more than 50 years ahead of now (2023) is the past one.
        assert_eq!(http_date(b"Saturday, 01-Jan-77 00:00:00 GMT", NOW), Some(220_924_800.0));
        for s in [
            "Thu, 18  Aug  2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 AEST",
            "Thu, 31 Feb 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 24:00:00 GMT",
            "Tue 19 Jan 2038 14:14:08 GMT",
            "Xyz, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 GMT x",
            "",
        ] {
            assert_eq!(http_date(s.as_bytes(), NOW), None, "{s}");
        }
    }

    #[test]
    fn targeted_fields_take_precedence() {
        // CDN-Cache-Control over Cache-Control and Expires (RFC 9213 §2.1).
        let l = life(200, &[("Cache-Control", "max-age=10"), ("CDN-Cache-Control", "max-age=600"), ("Expires", "0")]);
        assert_eq!(l.ttl, 600.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=600"), ("CDN-Cache-Control", "no-store")]).ttl, -1.0);
        assert_eq!(life(200, &[("Cache-Control", "no-store"), ("CDN-Cache-Control", "s-maxage=60")]).ttl, 60.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=600"), ("CDN-Cache-Control", "private")]).ttl, -1.0);
        // An empty CDN-Cache-Control is as if absent.
        assert_eq!(life(200, &[("Cache-Control", "max-age=10"), ("CDN-Cache-Control", " ")]).ttl, 10.0);
        // Surrogate-Control over Cache-Control; targeted over untargeted.
        assert_eq!(life(200, &[("Cache-Control", "no-store"), ("Surrogate-Control", "max-age=10000;edge")]).ttl, 10000.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600"), ("Surrogate-Control", "max-age=1")]).ttl, 1.0);
        assert_eq!(life(200, &[("Surrogate-Control", "max-age=60, max-age=600;edge")]).ttl, 600.0);
        assert_eq!(life(200, &[("Surrogate-Control", "max-age=60+30")]).ttl, 60.0);
        assert_eq!(life(200, &[("Surrogate-Control", "max-age=0"), ("Expires", &date(NOW + 10000.0))]).ttl, 0.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=600"), ("Surrogate-Control", "no-store")]).ttl, -1.0);
        // Surrogate-Control without a caching directive leaves Cache-Control in charge.
        assert_eq!(life(200, &[("Cache-Control", "max-age=600"), ("Surrogate-Control", "content=\"ESI/1.0\"")]).ttl, 600.0);
    }

    #[test]
    fn statuses_and_heuristics() {
        let d = date(NOW);
        let lm = date(NOW - 86_400.0);
        let exp = date(NOW + 100.0);
        // Explicit freshness: any final status.
        for s in [200, 299, 303, 308, 400, 499, 500, 502, 503, 504, 599] {
            assert_eq!(life(s, &[("Date", &d), ("Expires", &exp)]).ttl, 100.0, "{s}");
        }
        // Heuristic: 10% of Date − Last-Modified for the heuristically cacheable ones.
        for s in [200, 203, 204, 404, 405, 410, 414, 501] {
            assert_eq!(life(s, &[("Date", &d), ("Last-Modified", &lm)]).ttl, 8640.0, "{s}");
        }
        // ... not for others, unless public.
        for s in [201, 202, 403, 502, 503, 504, 599] {
            assert_eq!(life(s, &[("Date", &d), ("Last-Modified", &lm)]).ttl, -1.0, "{s}");
        }
        assert_eq!(life(599, &[("Date", &d), ("Last-Modified", &lm), ("Cache-Control", "public")]).ttl, 8640.0);
        // At most a day; default_ttl without Last-Modified.
        assert_eq!(life(200, &[("Date", &d), ("Last-Modified", &date(NOW - 3e7))]).ttl, HEURISTIC_MAX);
        assert_eq!(life(200, &[("Date", &d)]).ttl, 120.0);
        assert_eq!(life(200, &[("Date", &d), ("Last-Modified", &date(NOW + 60.0))]).ttl, 120.0);
        // must-understand: a status we do not know is not stored; one we
        // know ignores no-store.
        assert_eq!(life(599, &[("Cache-Control", "max-age=3600, must-understand, no-store")]).ttl, -1.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600, must-understand, no-store")]).ttl, 3600.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600, no-store")]).ttl, -1.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=3600, private")]).ttl, -1.0);
    }

    #[test]
    fn grace_and_keep() {
        let l = life(200, &[("Cache-Control", "max-age=10, stale-while-revalidate=30, stale-if-error=600")]);
        assert_eq!((l.ttl, l.grace, l.keep), (10.0, 30.0, 600.0));
        // Never served stale: grace 0 (keep stays, for revalidation).
        for cc in ["max-age=10, must-revalidate", "max-age=10, proxy-revalidate", "s-maxage=10", "max-age=10, no-cache"] {
            let cc = format!("{cc}, stale-while-revalidate=30");
            assert_eq!(life(200, &[("Cache-Control", &cc)]).grace, 0.0, "{cc}");
        }
        // no-cache: stored, stale on arrival.
        assert_eq!(life(200, &[("Cache-Control", "max-age=10, no-cache")]).ttl, 0.0);
        assert_eq!(life(200, &[("Cache-Control", "max-age=10, no-cache=\"Set-Cookie\"")]).ttl, 10.0);
        // An invalid stale-while-revalidate leaves default_grace.
        assert_eq!(life(200, &[("Cache-Control", "max-age=10, stale-while-revalidate=x")]).grace, 10.0);
    }

    #[test]
    fn stale_on_error_only_as_allowed() {
        let on = |cc: &str, at: f64| {
            let h = [(b"Cache-Control".as_slice(), cc.as_bytes())];
            let l = compute(200, h.iter().copied(), NOW, &D).life();
            stale_on_error(h.iter().copied(), l, at)
        };
        assert!(on("max-age=2, stale-if-error=60", NOW + 30.0));
        assert!(!on("max-age=2, stale-if-error=60", NOW + 63.0));
        assert!(!on("max-age=2", NOW + 3.0));
        for cc in ["must-revalidate", "proxy-revalidate", "no-cache", "s-maxage=2"] {
            assert!(!on(&format!("max-age=2, stale-if-error=60, {cc}"), NOW + 3.0), "{cc}");
        }
    }
}
