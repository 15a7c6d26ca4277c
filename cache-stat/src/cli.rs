//! Command line of cache-stat (varnishstat's letters).

use clap::Parser;

/// cache-stat: show the counters of a cache-d instance.
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

    /// Instance directory (as for cache-d -n).
    #[arg(short = 'n', value_name = "DIR")]
    pub name: Option<String>,

    /// Seconds to wait for cache-d to appear ("off" waits forever).
    #[arg(short = 't', value_name = "SECONDS|off", default_value = "5")]
    pub wait: String,
}
