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

    /// Show counters matching GLOB (tried in order with -f and -X, the
    /// first match decides). Repeatable.
    #[arg(short = 'I', value_name = "GLOB", allow_hyphen_values = true)]
    pub include: Vec<String>,

    /// Hide counters matching GLOB (tried in order with -f and -I, the
    /// first match decides). Repeatable.
    #[arg(short = 'X', value_name = "GLOB", allow_hyphen_values = true)]
    pub exclude: Vec<String>,

    /// -f, -I and -X as (shown, glob), in command-line order (filled by
    /// `parse_ordered`; else -f, -I, -X in turn).
    #[arg(skip)]
    pub patterns: Vec<(bool, String)>,

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

impl Args {
    /// Parse the command line, keeping the order of -f, -I and -X (clap
    /// keeps each option apart; varnishstat tries them in order).
    pub fn parse_ordered() -> Args {
        Args::try_parse_ordered(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// `parse_ordered` of a given command line.
    pub fn try_parse_ordered<I: IntoIterator<Item = T>, T: Into<std::ffi::OsString> + Clone>(argv: I) -> Result<Args, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let m = Args::command().try_get_matches_from(argv)?;
        let mut args = Args::from_arg_matches(&m)?;
        let mut all: Vec<(usize, bool, String)> = Vec::new();
        for (id, shown) in [("filter", None), ("include", Some(true)), ("exclude", Some(false))] {
            let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) else { continue };
            for (i, v) in idx.zip(vals) {
                let (shown, glob) = match (shown, v.strip_prefix('^')) {
                    (Some(s), _) => (s, v.clone()),
                    (None, Some(x)) => (false, x.to_string()),
                    (None, None) => (true, v.clone()),
                };
                all.push((i, shown, glob));
            }
        }
        all.sort_by_key(|(i, _, _)| *i);
        args.patterns = all.into_iter().map(|(_, s, g)| (s, g)).collect();
        Ok(args)
    }

    /// The counter patterns, in the order they are tried.
    pub fn patterns(&self) -> Vec<(bool, String)> {
        if !self.patterns.is_empty() {
            return self.patterns.clone();
        }
        let f = self.filter.iter().map(|p| match p.strip_prefix('^') {
            Some(x) => (false, x.to_string()),
            None => (true, p.clone()),
        });
        f.chain(self.include.iter().map(|p| (true, p.clone()))).chain(self.exclude.iter().map(|p| (false, p.clone()))).collect()
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    common::log::follow::seconds(s, 0.1, 3600.0).map_err(|_| format!("\"{s}\" is not an interval between 0.1 and 3600 seconds"))
}
