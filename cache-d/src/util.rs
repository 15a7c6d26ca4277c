//! Small helpers: wall-clock seconds for log timestamps, HTTP dates, and the
//! host name used in Via.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the epoch, as Varnish's timestamps show them.
pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

pub use common::httpdate::format as http_date;

/// This machine's host name, for Via.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cachekit".to_string())
}
