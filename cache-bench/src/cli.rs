//! Command line of cache-bench.

use clap::{Parser, Subcommand};

/// cache-bench: load generator and test origin for HTTP caches.
#[derive(Parser, Debug)]
#[command(name = "cache-bench", version, about, long_about = None)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the built-in test origin server.
    ///
    /// Paths: /size/N answers N bytes; /__stats answers the request count
    /// as JSON; anything else answers a short text. Query parameters:
    /// delay_ms=N (wait before answering), max_age=N (Cache-Control),
    /// cache_control=VALUE (sent as is), status=N, chunked=1 (chunked
    /// encoding), abort_after=N (drop the connection after N body bytes),
    /// stall_ms=N (pause after the first 16 KiB of the body), vary=NAMES
    /// (send a Vary header), header=NAME:VALUE (send that header).
    Origin(OriginArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct OriginArgs {
    /// Address to listen on (port 0 picks a free port; the bound address is
    /// printed on stdout as "listening on ADDR").
    #[arg(long, short = 'l', value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    pub listen: String,
}
