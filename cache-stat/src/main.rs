fn main() {
    let args = cache_stat::cli::Args::parse_ordered();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Err(e) = cache_stat::run(args, &mut out) {
        eprintln!("cache-stat: {e}");
        std::process::exit(2);
    }
}
