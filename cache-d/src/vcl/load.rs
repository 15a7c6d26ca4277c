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
    // No label exists yet: a return (vcl(LABEL)) names none.
    let compiled = match unknown_label(&prog, &[]) {
        Some(e) => Err(e),
        None => crate::vcl::compile::compile(&prog),
    };
    let compiled = compiled.map_err(|e| StartError::Config(format!("VCL compilation failed:\n{}", e.render(&prog.files))))?;
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

/// The labels a program's `return (vcl(LABEL))` names, each once, with
/// where it is first named (the manager checks them against its labels
/// and keeps them as the program's dependencies).
pub fn labels_used(p: &crate::vcl::ast::Program) -> Vec<(String, crate::vcl::ast::Pos)> {
    use crate::vcl::ast::{Expr, Item, Stmt};
    let mut out: Vec<(String, crate::vcl::ast::Pos)> = Vec::new();
    for item in &p.items {
        let Item::Sub { body, .. } = item else { continue };
        super::check::walk(body, &mut |s| {
            if let Stmt::Return { action, args, .. } = s {
                if let (true, [Expr::Name(l, pos)]) = (action == "vcl", args.as_slice()) {
                    if !out.iter().any(|(x, _)| x == l) {
                        out.push((l.clone(), *pos));
                    }
                }
            }
        });
    }
    out
}

/// The first label `p` names that is not one of `labels`: Varnish's
/// compiler knows labels only (not programs) as `return (vcl())`'s names.
pub fn unknown_label(p: &crate::vcl::ast::Program, labels: &[&str]) -> Option<crate::vcl::diag::VclError> {
    let (l, pos) = labels_used(p).into_iter().find(|(l, _)| !labels.contains(&l.as_str()))?;
    Some(crate::vcl::diag::VclError { msg: format!("Symbol not found: '{l}'"), pos })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_named_by_return_vcl() {
        let src = "vcl 4.1;\nbackend b none;\nsub vcl_recv {\n if (req.url == \"/a\") { return (vcl(la)); }\n return (vcl(lb));\n}\nsub x { return (vcl(la)); }\n";
        let p = crate::vcl::parse_source("t", src).unwrap();
        let names: Vec<String> = labels_used(&p).into_iter().map(|(l, _)| l).collect();
        assert_eq!(names, ["la", "lb"]);
        assert!(unknown_label(&p, &["la", "lb"]).is_none());
        assert_eq!(unknown_label(&p, &["la"]).unwrap().msg, "Symbol not found: 'lb'");
    }
}
