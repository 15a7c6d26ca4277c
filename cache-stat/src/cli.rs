//! Command line of cache-stat (varnishstat's letters).

use clap::Parser;

/// cache-stat: show the counters of a cache-d instance.
///
/// On a terminal, an interactive screen (press ? for its keys); with
/// stdout not a terminal, the -1 listing again every interval.
#[derive(Parser, Debug, Clone)]
#[command(name = "cache-stat", version, about, long_about = None)]
pub struct Args {
    /// Print every counter once and exit: name, value, per-second average
    /// (counters) and description.
    #[arg(short = '1')]
    pub once: bool,

    /// Print the counters once as JSON and exit.
    #[arg(short = 'j')]
    pub json: bool,

    /// List counter names and descriptions and exit.
    #[arg(short = 'l')]
    pub list: bool,

    /// Counter name glob (fnmatch; `*` also crosses dots). A leading `^`
    /// excludes. Repeatable; the first pattern that matches decides.
    #[arg(short = 'f', value_name = "GLOB", allow_hyphen_values = true)]
    pub filter: Vec<String>,

    #[command(flatten)]
    pub instance: common::args::Instance,

    /// Seconds to wait for cache-d to appear ("off" waits forever). The
    /// interactive and repeating modes always wait, and follow restarts.
    #[arg(short = 't', value_name = "SECONDS|off", default_value = "5")]
    pub wait: String,

    /// Refresh interval in seconds (interactive and repeating modes).
    #[arg(short = 'w', value_name = "SECONDS", default_value = "1", value_parser = parse_interval)]
    pub interval: f64,

    /// Print the counters once in Prometheus text format and exit.
    #[arg(long)]
    pub prometheus: bool,

    /// Serve the counters in Prometheus text format at
    /// http://ADDR/metrics until killed.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    common::log::follow::seconds(s, 0.1, 3600.0).map_err(|_| format!("\"{s}\" is not an interval between 0.1 and 3600 seconds"))
}
