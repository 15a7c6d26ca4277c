//! Command line of cache-adm (varnishadm's letters, plus several targets).

use std::path::PathBuf;

use clap::Parser;

/// cache-adm: run admin (CLI) commands on cache-d or varnishd instances.
///
/// With a command, runs it on every target and exits 0 if all answered
/// 200. Without one: an interactive shell (line editing, history, tab
/// completion) on a terminal, else commands from standard input, one a
/// line. Several -n or -T run the same command on each instance.
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

    /// The command and its arguments, joined with spaces as varnishadm
    /// joins them ('ban req.url ~ ^/a/' and ban 'req.url ~ ^/a/' both
    /// work); quote inside an argument what must stay one word.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}
