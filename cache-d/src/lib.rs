//! cache-d: the caching reverse proxy daemon (varnishd). A manager
//! process (`mgt/`: admin socket, parameters, the child's life) starts a
//! child (`child/`) that accepts connections (`acceptor`), runs each
//! request through the client-side state machine (`req/`) and the
//! backend-side one (`fetch/`) over HTTP/1 (`http1/`), with backends
//! (`backend/`), the cache (`cache/`) and the VCL policy (`vcl/`). The
//! README's Layout section lists the steps of both state machines.

pub mod acceptor;
pub mod backend;
pub mod cache;
pub mod child;
pub mod cli;
pub mod error;
pub mod esi;
pub mod fetch;
pub mod gzip;
pub mod h2;
pub mod h3;
pub mod http1;
pub mod listen;
pub mod mgt;
pub mod params;
pub mod req;
pub mod shared;
pub mod tls;
pub mod util;
pub mod vcl;

use crate::cli::Args;
use crate::error::StartError;

/// Everything `main` needs: the manager, or (with the internal `--child`)
/// the child it starts.
pub fn run(args: Args) -> Result<(), StartError> {
    let stores = cache::spec::resolve(&args.storage).map_err(StartError::Config)?;
    cache::spec::set_names(&stores);
    if !args.check && !args.child {
        for s in &stores {
            if let Some((path, size, persistent, wipe)) = s.kind.disk() {
                cache::disk::check(&s.name, path, size, persistent, wipe).map_err(StartError::Config)?;
            }
        }
        if let Some(note) = cache::spec::placement_note(&stores) {
            eprintln!("cache-d: {note}");
        }
    }
    if args.check {
        vcl::load::load_policy(&args)?;
        println!("VCL compiled.");
        return Ok(());
    }
    if args.child {
        child::run(args)
    } else {
        mgt::run(args)
    }
}
