use clap::Parser;

fn main() {
    let args = cache_bench::cli::Args::parse();
    match cache_bench::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("cache-bench: {e:#}");
            std::process::exit(2);
        }
    }
}
