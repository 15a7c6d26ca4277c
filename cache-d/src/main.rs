use clap::Parser;

fn main() {
    let args = cache_d::cli::Args::parse();
    if let Err(e) = cache_d::run(args) {
        eprintln!("cache-d: {e}");
        std::process::exit(2);
    }
}
