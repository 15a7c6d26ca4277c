use clap::Parser;

fn main() {
    let args = cache_ncsa::cli::Args::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Err(e) = cache_ncsa::run(args, &mut out) {
        eprintln!("cache-ncsa: {e}");
        std::process::exit(2);
    }
}
