//! A varnish-modules function's arguments as VCC takes them (used by the
//! vsthrottle, bodyaccess, saintmode and tcp modules): by position, then
//! by name, each once, with VCC's words for what it refuses.

use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};

/// The parameter a call's argument fills, in `params`' order (None where
/// it was left out). `required` parameters must be given; a parameter
/// named "" is one the vmod does not name (VCC calls it by its number).
pub(super) fn vcc_args<'e>(
    params: &[&str],
    required: usize,
    args: &'e [Expr],
    names: &[Option<String>],
    pos: Pos,
) -> Result<Vec<Option<&'e Expr>>, VclError> {
    let mut out: Vec<Option<&Expr>> = vec![None; params.len()];
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => match params.iter().position(|p| !p.is_empty() && p == n) {
                Some(at) => at,
                None => return err(format!("Unknown argument '{n}'"), a.pos()),
            },
            None if i < params.len() => i,
            None => return err(extra(a), a.pos()),
        };
        if out[at].replace(a).is_some() {
            return err(format!("Argument '{}' already used", params[at]), a.pos());
        }
    }
    if let Some(missing) = out.iter().take(required).position(Option::is_none) {
        return match params[missing] {
            "" => err(format!("Argument {} missing", missing + 1), pos),
            p => err(format!("Argument '{p}' missing"), pos),
        };
    }
    Ok(out)
}

/// What VCC says of an argument past the last parameter: a name is taken
/// for an argument's (`Unknown argument 'req'`), anything else for the
/// token where `)` should be.
fn extra(a: &Expr) -> String {
    let mut e = a;
    while let Expr::Binary { left, .. } = e {
        e = left;
    }
    let token = match e {
        Expr::Name(n, _) | Expr::Call { name: n, .. } => {
            return format!("Unknown argument '{}'", n.split('.').next().unwrap_or(n));
        }
        Expr::Str(s, _) => format!("\"{s}\""),
        Expr::Int(i, _) => i.to_string(),
        Expr::Real(r, _) | Expr::Duration(r, _) => r.to_string(),
        Expr::Bytes(b, _) => b.to_string(),
        Expr::Not(..) => "!".into(),
        Expr::Neg(..) => "-".into(),
        Expr::Binary { .. } => "(".into(),
    };
    format!("Expected ')' got '{token}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Pos {
        Pos::default()
    }

    #[test]
    fn vcc_words_for_refused_arguments() {
        let p = ["key", "limit", "period", "block"];
        let two = [Expr::Str("k".into(), at()), Expr::Int(1, at())];
        assert_eq!(vcc_args(&p, 3, &two, &[], at()).unwrap_err().msg, "Argument 'period' missing");
        let five = [two[0].clone(), two[1].clone(), Expr::Duration(1.0, at()), Expr::Duration(1.0, at()), Expr::Duration(3.0, at())];
        assert_eq!(vcc_args(&p, 3, &five, &[], at()).unwrap_err().msg, "Expected ')' got '3'");
        let named = [Expr::Str("k".into(), at()), Expr::Str("j".into(), at())];
        let names = [None, Some("key".to_string())];
        assert_eq!(vcc_args(&p, 1, &named, &names, at()).unwrap_err().msg, "Argument 'key' already used");
        let names = [None, Some("foo".to_string())];
        assert_eq!(vcc_args(&p, 1, &named, &names, at()).unwrap_err().msg, "Unknown argument 'foo'");
        assert_eq!(vcc_args(&[""], 1, &[], &[], at()).unwrap_err().msg, "Argument 1 missing");
        let hdr = [Expr::Name("req.http.x".into(), at())];
        assert_eq!(vcc_args(&[], 0, &hdr, &[], at()).unwrap_err().msg, "Unknown argument 'req'");
        assert!(vcc_args(&p, 3, &five[..4], &[], at()).unwrap().iter().all(Option::is_some));
    }
}
