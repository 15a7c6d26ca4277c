//! Command line of cache-adm (varnishadm's letters, plus several targets).

use std::path::PathBuf;

use clap::Parser;

/// cache-adm: run admin (CLI) commands on cache-d or varnishd instances.
///
/// With a command, runs it on every target and exits 0 if all answered
/// 200. Without one: an interactive shell (line editing, history, tab
/// completion) on a terminal, else commands from standard input, one a
/// line. Several -n or -T run the same command on each instance; --peers
/// runs it on a whole fleet at once, a line per node.
#[derive(Parser, Debug, Clone)]
#[command(name = "cache-adm", version, about, long_about = None)]
pub struct Args {
    /// Instance directory of a cache-d (its _.admin file names the address
    /// and the secret). Repeatable.
    #[arg(short = 'n', value_name = "DIR")]
    pub name: Vec<String>,

    /// Admin address host:port. Repeatable.
    #[arg(short = 'T', value_name = "HOST:PORT")]
    pub target: Vec<String>,

    /// Secret file for the -T targets.
    #[arg(short = 'S', value_name = "FILE")]
    pub secret: Option<PathBuf>,

    /// Timeout in seconds for connecting and for each answer.
    #[arg(short = 't', value_name = "SECONDS", default_value_t = 5.0, value_parser = common::log::follow::seconds_upto_a_day)]
    pub timeout: f64,

    /// Print each answer's raw status line ("%-3u %-8u") before its body.
    #[arg(short = 'p')]
    pub raw: bool,

    /// Run the command on every node of a fleet, in parallel: a file of
    /// host:port admin addresses (one a line, # comments), or
    /// dns:NAME:PORT (every address NAME resolves to, e.g. a headless
    /// Service). One line per node ("NODE STATUS first-line", "NODE
    /// unreachable: why" or "NODE gone: no longer in DNS (why)"); exit 0
    /// only when every node answered 200, else 1 naming the others. -S
    /// gives the fleet's secret: each node is answered with its node
    /// secret, derived from it and the address reached, and must prove
    /// it holds it (nodes run cache-d --fleet-secret).
    #[arg(long, value_name = "FILE|dns:NAME:PORT", conflicts_with_all = ["name", "target"])]
    pub peers: Option<String>,

    /// With --peers: try nodes that could not be reached again (every half
    /// second) until this long has passed (10s, 500ms, 2m). With dns:,
    /// each try asks DNS again: nodes that appear get the command, nodes
    /// never reached that leave DNS are reported gone, not failed.
    #[arg(long, value_name = "DURATION", requires = "peers", value_parser = duration)]
    pub retry_for: Option<std::time::Duration>,

    /// With --peers: the fleet has N nodes; exit 1 unless at least N
    /// answered (with --retry-for, wait for them: a pod being recreated
    /// is missing from DNS for a while).
    #[arg(long, value_name = "N", requires = "peers", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub expect: Option<u32>,

    /// With --peers dns:: ask this name server (IP or IP:PORT, port 53 by
    /// default; repeatable) instead of the system's resolver, e.g. a
    /// Consul agent's 127.0.0.1:8600.
    #[arg(long, value_name = "IP[:PORT]", requires = "peers", value_parser = nameserver)]
    pub nameserver: Vec<std::net::SocketAddr>,

    /// With --peers: print a JSON list, an object per node (node, ok,
    /// status, answer, error, attempts, gone).
    #[arg(short = 'j', long = "json", requires = "peers")]
    pub json: bool,

    /// Print the node secret of the fleet node whose admin address is
    /// IP:PORT, derived from the fleet's secret given with -S: the -S file
    /// for varnishadm (or cache-adm -T) to reach that node at that address.
    #[arg(long, value_name = "IP:PORT", requires = "secret", conflicts_with_all = ["peers", "name", "target"])]
    pub node_secret: Option<std::net::SocketAddr>,

    /// The command and its arguments, joined with spaces as varnishadm
    /// joins them ('ban req.url ~ ^/a/' and ban 'req.url ~ ^/a/' both
    /// work); quote inside an argument what must stay one word.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `--retry-for`: a duration as every tool takes one, up to a day.
pub fn duration(s: &str) -> Result<std::time::Duration, String> {
    common::args::duration(s, 86_400.0, "a day")
}

/// `--nameserver`: an address, port 53 unless given.
pub fn nameserver(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(ip) = s.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, 53));
    }
    s.parse().map_err(|_| format!("'{s}' is not IP or IP:PORT"))
}

#[cfg(test)]
mod tests {
    use super::{duration, nameserver};
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert!(duration("2d").is_err() && duration("-1s").is_err() && duration("nan").is_err());
    }

    #[test]
    fn nameservers() {
        assert_eq!(nameserver("10.96.0.10").unwrap().to_string(), "10.96.0.10:53");
        assert_eq!(nameserver("127.0.0.1:8600").unwrap().to_string(), "127.0.0.1:8600");
        assert_eq!(nameserver("::1").unwrap().to_string(), "[::1]:53");
        assert_eq!(nameserver("[::1]:5353").unwrap().to_string(), "[::1]:5353");
        assert!(nameserver("ns.example").is_err() && nameserver("1.2.3.4:x").is_err());
    }
}
