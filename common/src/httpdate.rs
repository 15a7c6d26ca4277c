//! HTTP dates (IMF-fixdate, RFC 9110 §5.6.7), shared by the daemon's
//! synthetic responses and the test origin.

/// Format seconds since the epoch, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn format(t: f64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = t.max(0.0) as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
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

#[cfg(test)]
mod tests {
    #[test]
    fn http_dates() {
        assert_eq!(super::format(784111777.0), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(super::format(0.0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(super::format(1709251199.0), "Thu, 29 Feb 2024 23:59:59 GMT");
    }
}
