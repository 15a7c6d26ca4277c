//! HTTP dates (IMF-fixdate, RFC 9110 §5.6.7), shared by the daemon's
//! synthetic responses and the test origin.

/// Format seconds since the epoch, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn format(t: f64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = t.max(0.0) as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let (y, m, d) = civil(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The civil date (year, month 1-12, day 1-31) of a day counted from
/// 1970-01-01 (H. Hinnant's algorithm; days before it too).
pub fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_dates() {
        assert_eq!(super::format(784111777.0), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(super::format(0.0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(super::format(1709251199.0), "Thu, 29 Feb 2024 23:59:59 GMT");
    }
}

/// Parse an HTTP date (IMF-fixdate, RFC 850 or asctime, as RFC 9110
/// §5.6.7 asks recipients to accept) into seconds since the epoch.
pub fn parse(s: &str) -> Option<f64> {
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let s = s.trim();
    let month = |m: &str| MONTHS.iter().position(|x| x.eq_ignore_ascii_case(m)).map(|i| i as i64 + 1);
    let hms = |t: &str| -> Option<i64> {
        let mut it = t.split(':').map(|x| x.parse::<i64>().ok());
        let (h, m, sec) = (it.next()??, it.next()??, it.next()??);
        (it.next().is_none() && h < 24 && m < 60 && sec <= 60).then_some(h * 3600 + m * 60 + sec)
    };
    let (d, mo, y, t) = if let Some((_, rest)) = s.split_once(", ") {
        let f: Vec<&str> = rest.split([' ', '-']).filter(|x| !x.is_empty()).collect();
        // IMF-fixdate: 06 Nov 1994 08:49:37 GMT; RFC 850: 06-Nov-94 08:49:37 GMT
        if f.len() != 5 || !f[4].eq_ignore_ascii_case("GMT") {
            return None;
        }
        let mut y: i64 = f[2].parse().ok()?;
        if f[2].len() == 2 {
            y += if y < 70 { 2000 } else { 1900 };
        }
        (f[0].parse::<i64>().ok()?, month(f[1])?, y, hms(f[3])?)
    } else {
        // asctime: Sun Nov  6 08:49:37 1994
        let f: Vec<&str> = s.split(' ').filter(|x| !x.is_empty()).collect();
        if f.len() != 5 {
            return None;
        }
        (f[2].parse::<i64>().ok()?, month(f[1])?, f[4].parse().ok()?, hms(f[3])?)
    };
    if !(1..=31).contains(&d) || !(1970..=9999).contains(&y) {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some((days * 86400 + t) as f64)
}

/// Parse a date exactly as Varnish 7.1's VTIM_parse (lib/libvarnish/vtim.c)
/// does with feature http_date_postel off: IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94
/// 08:49:37 GMT`, a year below 69 in the 2000s), asctime (`Sun Nov  6
/// 08:49:37 1994`) and ISO 8601 (`1994-11-06T08:49:37`); names spelt as
/// the RFCs spell them, single spaces, two-digit fields, a real day of the
/// month, a year from 1899, and the weekday, when there is one, the
/// date's. Spaces around it are skipped; second 60 counts as 59. What this
/// refuses, Varnish ignores (an Expires it cannot parse is as if absent).
pub fn parse_strict(s: &str) -> Option<f64> {
    parse_vtim(s, false)
}

/// [`parse_strict`], and with `postel` (feature http_date_postel) also a
/// one-digit day in an IMF-fixdate (`Fri, 2 Mar 2018 14:26:02 GMT`).
pub fn parse_vtim(s: &str, postel: bool) -> Option<f64> {
    let mut p = Reader { b: s.trim_matches([' ', '\t']).as_bytes(), i: 0 };
    let (weekday, year, month, mday, (hour, min, sec)) = if p.peek().is_ascii_digit() {
        let year = p.digits(4)?;
        p.must(b'-')?;
        let month = p.digits(2)?;
        p.must(b'-')?;
        let mday = p.digits(2)?;
        p.must(b'T')?;
        (None, year, month, mday, p.timestamp()?)
    } else {
        let weekday = p.name(&WEEKDAYS)?;
        let (year, month, mday, hms) = match p.peek() {
            b',' => p.imf_fixdate(postel)?,
            b' ' => p.asctime()?,
            _ => p.rfc850(weekday)?,
        };
        (Some(weekday), year, month, mday, hms)
    };
    if p.i != p.b.len() || sec > 60 || min > 59 || hour > 23 || !(1..=12).contains(&month) || year < 1899 {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    const DAYS_IN_MONTH: [i64; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if mday < 1 || mday > DAYS_IN_MONTH[month as usize - 1] || (month == 2 && mday > 28 && !leap) {
        return None;
    }
    let days = days_from_civil(year, month, mday);
    // 1970-01-01 was a Thursday (Sunday is 0).
    if weekday.is_some_and(|w| (days + 4).rem_euclid(7) != w as i64) {
        return None;
    }
    Some((days * 86400 + hour * 3600 + min * 60 + sec.min(59)) as f64)
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// Days from 1970-01-01 to a civil date, month 1-12 (H. Hinnant), the
/// inverse of [`civil`].
pub fn days_from_civil(y: i64, mo: i64, d: i64) -> i64 {
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A date's fields as one format spells them: year, month, day of the
/// month and (hour, minute, second).
type Fields = (i64, i64, i64, (i64, i64, i64));

/// VTIM_parse's cursor: each step reads exactly what it expects or fails.
struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn peek(&self) -> u8 {
        self.b.get(self.i).copied().unwrap_or(0)
    }
    fn must(&mut self, c: u8) -> Option<()> {
        (self.peek() == c).then(|| self.i += 1)
    }
    fn lit(&mut self, s: &str) -> Option<()> {
        self.b[self.i..].starts_with(s.as_bytes()).then(|| self.i += s.len())
    }
    /// `n` digits, as a number.
    fn digits(&mut self, n: usize) -> Option<i64> {
        (0..n).try_fold(0, |v, _| {
            let c = self.peek();
            c.is_ascii_digit().then(|| {
                self.i += 1;
                v * 10 + i64::from(c - b'0')
            })
        })
    }
    /// One of three-letter `names` (its index), case included.
    fn name(&mut self, names: &[&str]) -> Option<usize> {
        let n = names.iter().position(|n| self.b[self.i..].starts_with(n.as_bytes()))?;
        self.i += 3;
        Some(n)
    }
    fn month(&mut self) -> Option<i64> {
        self.name(&MONTHS).map(|m| m as i64 + 1)
    }
    /// `08:49:37`
    fn timestamp(&mut self) -> Option<(i64, i64, i64)> {
        let h = self.digits(2)?;
        self.must(b':')?;
        let m = self.digits(2)?;
        self.must(b':')?;
        Some((h, m, self.digits(2)?))
    }
    /// `, 06 Nov 1994 08:49:37 GMT` after the weekday (`, 6 Nov` too with `postel`).
    fn imf_fixdate(&mut self, postel: bool) -> Option<Fields> {
        self.lit(", ")?;
        let one = postel && self.peek() != 0 && self.b.get(self.i + 1) == Some(&b' ');
        let mday = self.digits(if one { 1 } else { 2 })?;
        self.must(b' ')?;
        let month = self.month()?;
        self.must(b' ')?;
        let year = self.digits(4)?;
        self.must(b' ')?;
        let hms = self.timestamp()?;
        self.lit(" GMT")?;
        Some((year, month, mday, hms))
    }
    /// ` Nov  6 08:49:37 1994` after the weekday.
    fn asctime(&mut self) -> Option<Fields> {
        self.must(b' ')?;
        let month = self.month()?;
        self.must(b' ')?;
        let mday = if self.peek() == b' ' { self.must(b' ').and_then(|_| self.digits(1))? } else { self.digits(2)? };
        self.must(b' ')?;
        let hms = self.timestamp()?;
        self.must(b' ')?;
        Some((self.digits(4)?, month, mday, hms))
    }
    /// `day, 06-Nov-94 08:49:37 GMT` after `Sun`: the rest of the weekday's name.
    fn rfc850(&mut self, weekday: usize) -> Option<Fields> {
        const MORE: [&str; 7] = ["day", "day", "sday", "nesday", "rsday", "day", "urday"];
        self.lit(MORE[weekday])?;
        self.lit(", ")?;
        let mday = self.digits(2)?;
        self.must(b'-')?;
        let month = self.month()?;
        self.must(b'-')?;
        let year = 1900 + self.digits(2)?;
        self.must(b' ')?;
        let hms = self.timestamp()?;
        self.lit(" GMT")?;
        Some((if year < 1969 { year + 100 } else { year }, month, mday, hms))
    }
}

#[cfg(test)]
mod parse_tests {
    use super::{format, parse};

    #[test]
    fn three_formats() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784111777.0));
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784111777.0));
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), Some(784111777.0));
        assert_eq!(parse("Thu, 29 Feb 2024 23:59:59 GMT"), Some(1709251199.0));
        for t in [0.0, 951782400.0, 1709251199.0, 4102444800.0] {
            assert_eq!(parse(&format(t)), Some(t));
        }
        assert_eq!(parse("yesterday"), None);
        assert_eq!(parse("Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 PST"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn strict_as_varnish() {
        use super::parse_strict;
        assert_eq!(parse_strict("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784111777.0));
        assert_eq!(parse_strict("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784111777.0));
        assert_eq!(parse_strict("Sun Nov  6 08:49:37 1994"), Some(784111777.0));
        // Wrong case, or a weekday that is not the date's: refused.
        assert_eq!(parse_strict("sun, 06 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(parse_strict("Sun, 06 nov 1994 08:49:37 GMT"), None);
        assert_eq!(parse_strict("Sun, 06 Nov 1994 08:49:37 gmt"), None);
        assert_eq!(parse_strict("Mon, 06 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(parse_strict("0"), None);
        assert_eq!(parse_strict(""), None);
    }

    /// What VTIM_parse accepts beyond the RFC's forms, and what it
    /// refuses that a lenient reader takes (the suite's
    /// freshness-expires-invalid-* cases among them).
    #[test]
    fn strict_edges_as_varnish() {
        use super::parse_strict;
        // ISO 8601 without a zone, spaces around, second 60 as 59.
        assert_eq!(parse_strict("1994-11-06T08:49:37"), Some(784111777.0));
        assert_eq!(parse_strict("  Sun, 06 Nov 1994 08:49:37 GMT  "), Some(784111777.0));
        assert_eq!(parse_strict("Sun, 06 Nov 1994 08:49:60 GMT"), Some(784111799.0));
        // RFC 850 years: 69 and up in the 1900s, below in the 2000s.
        assert_eq!(parse_strict("Thursday, 18-Aug-50 02:01:18 GMT"), parse_strict("Thu, 18 Aug 2050 02:01:18 GMT"));
        assert_eq!(parse_strict("Tuesday, 30-Dec-69 00:00:00 GMT"), Some(-2.0 * 86400.0));
        // Before 1970 is negative; before 1899 refused.
        assert_eq!(parse_strict("Mon, 01 Jan 1900 00:00:00 GMT"), Some(-2208988800.0));
        assert_eq!(parse_strict("Sat, 31 Dec 1898 00:00:00 GMT"), None);
        assert_eq!(parse_strict("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0.0));
        for bad in [
            "Thu, 18 Aug 2050 02:01:18 UTC",
            "Thu, 18 Aug 2050 02:01:18 AEST",
            "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT",
            "Thu, 18  Aug  2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
            "Thu, 8 Aug 2050 02:01:18 GMT",
            "Thursday, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 GMT x",
            "THU, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18 AUG 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 gMT",
            "Tue 19 Jan 2038 14:14:08 GMT",
            "Sat, 31 Feb 2024 00:00:00 GMT",
            "Wed, 29 Feb 2023 00:00:00 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:00 GMT",
            "1994-11-06T08:49:37Z",
            "1994-11-06 08:49:37",
            "Sun Nov 6 08:49:37 1994",
        ] {
            assert_eq!(parse_strict(bad), None, "{bad}");
        }
        assert_eq!(parse_strict("Thu, 29 Feb 2024 23:59:59 GMT"), Some(1709251199.0));
        assert_eq!(parse_strict("Sun Nov 06 08:49:37 1994"), Some(784111777.0));
        // http_date_postel: a one-digit day in an IMF-fixdate.
        assert_eq!(parse_strict("Fri, 2 Mar 2018 14:26:02 GMT"), None);
        assert_eq!(super::parse_vtim("Fri, 2 Mar 2018 14:26:02 GMT", true), parse_strict("Fri, 02 Mar 2018 14:26:02 GMT"));
        assert_eq!(super::parse_vtim("Fri, 02 Mar 2018 14:26:02 GMT", true), parse_strict("Fri, 02 Mar 2018 14:26:02 GMT"));
    }
}
