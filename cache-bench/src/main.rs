use clap::Parser;

fn main() {
    let args = cache_bench::cli::Args::parse();
    if let Err(e) = cache_bench::run(args) {
        eprintln!("cache-bench: {e:#}");
        std::process::exit(2);
    }
}
