use clap::Parser;

fn main() {
    let mut args = cache_log::cli::Args::parse();
    args.selection = cache_log::selection_order(&std::env::args().collect::<Vec<_>>());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Err(e) = cache_log::run(args, &mut out) {
        eprintln!("cache-log: {e}");
        std::process::exit(2);
    }
}
