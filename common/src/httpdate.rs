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
    // Days from civil (H. Hinnant), the inverse of `format`.
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86400 + t) as f64)
}

/// Parse an HTTP date as Varnish's VTIM_parse does: the same three
/// formats, but names exactly as the RFCs spell them (`Wed`, `Oct`,
/// `GMT`) and the weekday matching the date. What this refuses, Varnish
/// ignores (an Expires it cannot parse is as if absent).
pub fn parse_strict(s: &str) -> Option<f64> {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const LONG: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let s = s.trim();
    let (day, rest_ok) = match s.split_once(", ") {
        Some((w, rest)) => {
            let f: Vec<&str> = rest.split([' ', '-']).filter(|x| !x.is_empty()).collect();
            let names_ok = f.len() == 5 && f[4] == "GMT" && MONTHS.contains(&f[1]);
            (DAYS.iter().position(|d| *d == w).or_else(|| LONG.iter().position(|d| *d == w)), names_ok)
        }
        None => {
            let f: Vec<&str> = s.split(' ').filter(|x| !x.is_empty()).collect();
            let names_ok = f.len() == 5 && MONTHS.contains(&f[1]);
            (f.first().and_then(|w| DAYS.iter().position(|d| d == w)), names_ok)
        }
    };
    let (day, t) = (day?, parse(s)?);
    if !rest_ok {
        return None;
    }
    // 1970-01-01 was a Thursday.
    let weekday = ((t / 86400.0).floor() as i64 + 4).rem_euclid(7) as usize;
    (weekday == day).then_some(t)
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
    }
}
