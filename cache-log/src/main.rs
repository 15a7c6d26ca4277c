use clap::Parser;

fn main() {
    let args = cache_log::cli::Args::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Err(e) = cache_log::run(args, &mut out) {
        eprintln!("cache-log: {e}");
        std::process::exit(2);
    }
}
