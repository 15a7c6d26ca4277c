use clap::Parser;

fn main() {
    let args = cache_adm::cli::Args::parse();
    let code = cache_adm::run(args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    std::process::exit(code);
}
