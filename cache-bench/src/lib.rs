//! cache-bench: the load generator (closed and open loop, HDR histograms,
//! CSV series, history, thresholds), its distributed agents, plots, and
//! the built-in test origin.

pub mod checks;
pub mod cli;
pub mod dist;
pub mod engine;
pub mod local;
pub mod origin;
pub mod plan;
pub mod plot;
pub mod report;
pub mod run;
pub mod search;
pub mod server;
pub mod stats;
pub mod tls;

use cli::{Args, Command};

/// Run a command; the exit status on success (0 pass, 1 a check failed).
pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Command::Origin(o) => origin::run(&o.listen).map(|_| 0),
        Command::Run(r) => run::run(&r),
        Command::Agent(a) => {
            let secret = dist::read_secret(Some(&a.secret_file))?;
            dist::agent(&a.listen, &secret, &a.out_dir, a.once)
        }
        Command::Merge(m) => dist::merge(&m.files, m.json, m.csv.as_deref()),
        Command::Plot(p) => plot::plot(&p.input, &p.output, plot::parse_size(&p.size)?, p.title.as_deref()).map(|_| 0),
    }
}
