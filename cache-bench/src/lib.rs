//! cache-bench: the built-in test origin (and, with its own issue, the load
//! generator, coordinator and agents).

pub mod cli;
pub mod origin;

use cli::{Args, Command};

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Origin(o) => origin::run(&o.listen),
    }
}
