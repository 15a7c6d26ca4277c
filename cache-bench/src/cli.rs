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
    /// Send load and measure: closed loop (-c connections as fast as the
    /// target answers) or open loop at a constant rate (-r, --stages) with
    /// latency measured from each request's due time.
    Run(Box<RunArgs>),
    /// Serve as a load agent for a coordinator (`run --agents`).
    Agent(AgentArgs),
    /// Add up agents' result files into one summary.
    Merge(MergeArgs),
    /// Draw a run's --csv series or a --history file as PNG or SVG.
    Plot(PlotArgs),
    /// Run the built-in test origin server.
    ///
    /// Paths: /size/N answers N bytes; /__stats answers the request count
    /// as JSON; anything else answers a short text. Query parameters:
    /// delay_ms=N (wait before answering), max_age=N (Cache-Control),
    /// cache_control=VALUE (sent as is), status=N, chunked=1 (chunked
    /// encoding), abort_after=N (drop the connection after N body bytes),
    /// stall_ms=N (pause after the first 16 KiB of the body), vary=NAMES
    /// (send a Vary header), header=NAME:VALUE (send that header).
    /// /__pause?ms=N stalls every response for the next N ms (a server
    /// hiccup, for coordinated-omission tests).
    Origin(OriginArgs),
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// The URL to request (http:// only).
    pub url: Option<String>,
    /// A file of URLs, one per line (http_load style; `#` comments; a line
    /// starting with / is a path on URL).
    #[arg(long, value_name = "FILE")]
    pub urls: Option<String>,
    /// How URLs are picked from --urls: seq or random.
    #[arg(long, default_value = "seq", value_name = "seq|random")]
    pub pick: String,
    /// Pick URLs by Zipf popularity with exponent S (1.0: the top 1% of
    /// 1000 URLs draws about 39% of requests).
    #[arg(long, value_name = "S")]
    pub zipf: Option<f64>,
    /// Connections kept open.
    #[arg(short = 'c', long = "connections", default_value_t = 10, value_name = "CONNS")]
    pub connections: usize,
    /// Generator threads (default: one per core, at most one per connection).
    #[arg(short = 't', long, value_name = "THREADS")]
    pub threads: Option<usize>,
    /// How long to run (3s, 500ms, 2m); 10s when neither -d nor -n is given.
    #[arg(short = 'd', long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Stop after this many requests (closed loop).
    #[arg(short = 'n', long = "requests", value_name = "COUNT")]
    pub requests: Option<u64>,
    /// Open loop: send this many requests per second, on schedule.
    #[arg(short = 'r', long, value_name = "RATE")]
    pub rate: Option<f64>,
    /// Open loop: each request leaves at its due time to the microsecond
    /// (a timer file descriptor per connection), where by default the
    /// requests due within one millisecond leave together on the timer's
    /// tick (as wrk2's do). Costs the generator a timer wake-up per request.
    #[arg(long)]
    pub fine_pace: bool,
    /// Open loop in stages, each ramping linearly from the previous rate:
    /// 10s:1000,30s:5000.
    #[arg(long, value_name = "STAGES")]
    pub stages: Option<String>,
    /// Close and reopen each connection after N requests.
    #[arg(long, value_name = "N", conflicts_with = "new_conn")]
    pub requests_per_conn: Option<u64>,
    /// Every request on a new connection (TCP connect, and a full TLS
    /// handshake on https:// — sessions are not resumed — counted in its
    /// latency): the request rate is the handshake rate. For resumed
    /// handshakes, --requests-per-conn 1.
    #[arg(long)]
    pub new_conn: bool,
    /// Speak HTTP/2: prior knowledge on http://, ALPN h2 on https://;
    /// --streams requests in flight on each of the -c connections.
    #[arg(long, conflicts_with = "h3")]
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (https:// URLs, the port's UDP side, ALPN
    /// h3); --streams requests in flight on each of the -c connections.
    #[arg(long)]
    pub h3: bool,
    /// With --h2 or --h3: requests in flight at once on each connection
    /// (h2load's -m).
    #[arg(long, value_name = "N", default_value = "1")]
    pub streams: usize,
    /// Request method.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// A request header (repeatable): -H 'Accept-Encoding: gzip'.
    #[arg(short = 'H', long, value_name = "NAME: VALUE")]
    pub header: Vec<String>,
    /// A request body.
    #[arg(long, value_name = "TEXT")]
    pub body: Option<String>,
    /// A request body from a file.
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<String>,
    /// Host header instead of the URL's.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Count responses with another status as errors (default: 2xx and 3xx pass).
    #[arg(long, value_name = "STATUS")]
    pub expect_status: Option<u16>,
    /// Count responses with another body size as errors.
    #[arg(long, value_name = "BYTES")]
    pub expect_size: Option<u64>,
    /// https: trust the certificates in this PEM file (default: the
    /// system's bundle, SSL_CERT_FILE or /etc/ssl/certs/ca-certificates.crt).
    /// A server certificate that is exactly one of them is taken too, as
    /// curl does (openssl req -x509's self-signed CA:TRUE kind), if it
    /// names the URL's host and is in its validity period.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<String>,
    /// https: accept any certificate (no name or validity check).
    #[arg(long, short = 'k')]
    pub insecure: bool,
    /// Connect to ADDRESS for HOST (the URL's name still goes in SNI and
    /// Host), as curl's --resolve (HOST:PORT:ADDRESS is taken too).
    #[arg(long, value_name = "HOST:ADDRESS")]
    pub resolve: Option<String>,
    /// A request with no complete answer in this time is an error.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub timeout: String,
    /// Write the per-second series (CSV, one row per second).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<String>,
    /// Print the summary as JSON (schema: cache-bench/schema/summary.schema.json).
    #[arg(long)]
    pub json: bool,
    /// Append one row for this run to a history CSV.
    #[arg(long, value_name = "FILE")]
    pub history: Option<String>,
    /// A label for the run (history, result files).
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Fail (exit 1) when this holds: 'p99>20ms', 'rps<50000', 'errors>0' (repeatable).
    #[arg(long = "fail-if", value_name = "EXPR")]
    pub fail_if: Vec<String>,
    /// Fail (exit 1) on a regression against a saved --json summary.
    #[arg(long, value_name = "FILE.json")]
    pub baseline: Option<String>,
    /// How much worse than the baseline is still a pass.
    #[arg(long, default_value = "10%", value_name = "PERCENT")]
    pub tolerance: String,
    /// Find the highest rate that meets a bound, e.g. 'p99<10ms'.
    #[arg(long, value_name = "BOUND")]
    pub max_rate: Option<String>,
    /// Sample the server's counters each second into the CSV and the
    /// summary: a cache-d on this host (-n name or directory), or a remote
    /// cache-stat --listen exporter (http://HOST:PORT/metrics).
    #[arg(long, value_name = "NAME|URL")]
    pub stat: Option<String>,
    /// Run on these agents (HOST:PORT,...), splitting -c and -r among them.
    #[arg(long, value_name = "HOST:PORT,...")]
    pub agents: Option<String>,
    /// The secret shared with the agents.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<String>,
    /// Seed for URL picking.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// No progress line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Address to listen on for the coordinator.
    #[arg(long, short = 'l', value_name = "ADDR:PORT")]
    pub listen: String,
    /// The secret shared with the coordinator.
    #[arg(long, value_name = "FILE")]
    pub secret_file: String,
    /// Where to write each run's result file.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub out_dir: String,
    /// Exit after one run (a Kubernetes Job's pod, a one-off ssh agent).
    #[arg(long)]
    pub once: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct MergeArgs {
    /// Agents' result files.
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the merged per-second series.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct PlotArgs {
    /// A run's --csv file or a --history file.
    pub input: String,
    /// The image to write: .png or .svg.
    #[arg(short = 'o', long, value_name = "OUT")]
    pub output: String,
    /// Image size in pixels.
    #[arg(long, default_value = "1200x600", value_name = "WxH")]
    pub size: String,
    /// Chart title.
    #[arg(long)]
    pub title: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct OriginArgs {
    /// Address to listen on (port 0 picks a free port; the bound address is
    /// printed on stdout as "listening on ADDR").
    #[arg(long, short = 'l', value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    pub listen: String,
}
