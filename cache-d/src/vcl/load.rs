//! Loading the `-f` file at start: parse, compile, and the backend it
//! names (or `-b`'s).

use std::sync::Arc;

use crate::cli::Args;
use crate::error::StartError;
use crate::vcl::policy::Policy;

/// The boot program (none without -f) and the default backend's address
/// (none for a program with only directors).
pub type Loaded = (Option<Arc<dyn Policy>>, Option<String>);

/// Load and compile the `-f` file: the policy and the backend address
/// (from `-b`, else the VCL's first backend; none for a program that
/// declares only directors, e.g. dynamic ones, as Varnish allows).
pub fn load_policy(args: &Args) -> Result<Loaded, StartError> {
    let Some(path) = &args.vcl else {
        let b = args.backend.clone().ok_or_else(|| StartError::Config("give -b or -f".into()))?;
        return Ok((None, Some(b)));
    };
    let prog = crate::vcl::parse_file(path).map_err(|e| StartError::Config(format!("VCL compilation failed:\n{e}")))?;
    let compiled = crate::vcl::compile::compile(&prog)
        .map_err(|e| StartError::Config(format!("VCL compilation failed:\n{}", e.render(&prog.files))))?;
    let backend = match (&args.backend, &compiled.backend) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(b)) => Some(b.clone()),
        (None, None) if compiled.declares_directors || !compiled.backends.is_empty() => None,
        (None, None) => {
            return Err(StartError::Config(format!(
                "{}: no backends or directors found, and no -b was given (at least one is necessary)",
                path.display()
            )))
        }
    };
    let p = crate::vcl::compile::VclPolicy::load("boot", compiled).map_err(StartError::Config)?;
    let p: Arc<dyn Policy> = Arc::new(p);
    Ok((Some(p), backend))
}
