//! `import cookie;`: Varnish 7.1's bundled vmod_cookie. A task's cookie
//! jar (its PRIV_TASK: the client request's, or the backend fetch's) is
//! an ordered list of (name, value) kept on [`Req`] or [`Bereq`]; the
//! functions parse a Cookie header into it, filter it, read it and print
//! it back, with vmod_cookie's rules (see [`parse`]).
//!
//! [`Req`]: crate::vcl::model::Req
//! [`Bereq`]: crate::vcl::model::Bereq

use super::program::*;
use super::re::regex_arg;
use super::vmod::one_arg;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::Task;

/// A task's jar: the client request's where there is one (vcl_pipe too),
/// else the fetch's, else (vcl_init, vcl_fini) the call's own.
fn jar<'a>(t: &'a mut Task<'_>) -> Option<&'a mut Vec<(String, String)>> {
    match (t.req.as_deref_mut(), t.bereq.as_deref_mut()) {
        (Some(r), _) => Some(&mut r.cookies),
        (None, Some(b)) => Some(&mut b.cookies),
        (None, None) => Some(&mut t.cookies),
    }
}

/// Add a cookie, or change the value of the one of that name where it
/// stands; an empty name or value is ignored (vmod_cookie's set()).
pub(crate) fn set(jar: &mut Vec<(String, String)>, name: &str, value: &str) {
    if name.is_empty() || value.is_empty() {
        return;
    }
    match jar.iter_mut().find(|(n, _)| n == name) {
        Some(c) => c.1 = value.to_string(),
        None => jar.push((name.to_string(), value.to_string())),
    }
}

/// A Cookie header into the jar, as vmod_cookie reads one: white space
/// before a name is skipped, the name runs to the next `=` (whatever it
/// holds, `;` included), the value to the next `;` (its spaces kept);
/// the text left without an `=` is dropped. An empty header leaves the
/// jar as it was; any other empties it first.
pub(crate) fn parse(jar: &mut Vec<(String, String)>, header: &str) {
    if header.is_empty() {
        return;
    }
    jar.clear();
    let mut p = header;
    loop {
        p = p.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
        let Some((name, rest)) = p.split_once('=') else { break };
        let (value, rest) = match rest.split_once(';') {
            Some((v, r)) => (v, Some(r)),
            None => (rest, None),
        };
        set(jar, name, value);
        match rest {
            Some(r) if !r.is_empty() => p = r,
            _ => break,
        }
    }
}

/// The jar as a Cookie header: `a=1; b=2;` (each cookie ends with `;`),
/// "" when it is empty.
pub(crate) fn to_string(jar: &[(String, String)]) -> String {
    let mut out = String::new();
    for (n, v) in jar {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(n);
        out.push('=');
        out.push_str(v);
        out.push(';');
    }
    out
}

/// The names of a comma-separated list (white space before each name
/// skipped, empty ones dropped), as keep() and filter() read theirs.
pub(crate) fn names(list: &str) -> Vec<&str> {
    list.split(',').map(|n| n.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r'])).filter(|n| !n.is_empty()).collect()
}

/// Each function's parameters, by the names vmod_cookie gives them.
fn params(f: &str) -> &'static [&'static str] {
    match f {
        "parse" => &["cookieheader"],
        "set" => &["cookiename", "value"],
        "delete" | "get" | "isset" => &["cookiename"],
        "keep" | "filter" => &["filterstring"],
        "keep_re" | "filter_re" | "get_re" => &["expression"],
        "format_date" | "format_rfc1123" => &["now", "timedelta"],
        _ => &[],
    }
}

/// The arguments in the parameters' order (`cookie.set(value = "1",
/// cookiename = "a")`, as VCC takes named arguments).
fn in_order(f: &str, args: &[Expr], names: &[Option<String>]) -> Result<Vec<Expr>, VclError> {
    let ps = params(f);
    let mut out: Vec<Option<Expr>> = vec![None; ps.len().max(args.len())];
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => match ps.iter().position(|p| p == n) {
                Some(at) => at,
                None => return err(format!("Unknown argument '{n}'"), a.pos()),
            },
            None => i,
        };
        if out[at].replace(a.clone()).is_some() {
            return err(format!("Argument '{}' already used", ps.get(at).unwrap_or(&"")), a.pos());
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// A function of vmod_cookie; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("cookie.")?;
    let args = match in_order(f, args, names) {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    let args = args.as_slice();
    Some(match f {
        "clean" | "get_string" => one_arg(args, name, 0, pos, sc).map(|_| -> ExprFn {
            if f == "clean" {
                Box::new(|t, _| {
                    jar(t).map(Vec::clear);
                    Val::None
                })
            } else {
                Box::new(|t, _| Val::Str(jar(t).map(|j| to_string(j)).unwrap_or_default()))
            }
        }),
        "parse" | "delete" | "keep" | "filter" | "get" | "isset" => string_arg(f, args, name, pos, sc),
        "keep_re" | "filter_re" | "get_re" => regex_fn(f, args, name, pos),
        "set" => one_arg(args, name, 2, pos, sc).map(|a| -> ExprFn {
            let mut a = a.into_iter();
            let (n, v) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| {
                let (n, v) = (n(t, c).text(), v(t, c).text());
                if let Some(j) = jar(t) {
                    set(j, &n, &v);
                }
                Val::None
            })
        }),
        "format_date" | "format_rfc1123" => one_arg(args, name, 2, pos, sc).map(|a| -> ExprFn {
            let mut a = a.into_iter();
            let (when, delta) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| {
                let (when, delta) = (when(t, c).num().unwrap_or(0.0), delta(t, c).num().unwrap_or(0.0));
                Val::Str(Val::Time(when + delta).text())
            })
        }),
        _ => err(format!("Symbol not found: '{name}'"), pos),
    })
}

/// The functions that take one STRING (a name, a list, a header).
fn string_arg(f: &str, args: &[Expr], name: &str, pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let x = one_arg(args, name, 1, pos, sc)?.remove(0);
    Ok(match f {
        "parse" => Box::new(move |t, c| {
            let h = x(t, c).text();
            if let Some(j) = jar(t) {
                parse(j, &h);
            }
            Val::None
        }),
        "delete" => Box::new(move |t, c| {
            let n = x(t, c).text();
            if let Some(j) = jar(t) {
                if let Some(i) = j.iter().position(|(k, _)| *k == n) {
                    j.remove(i);
                }
            }
            Val::None
        }),
        "keep" | "filter" => {
            let keep = f == "keep";
            Box::new(move |t, c| {
                let list = x(t, c).text();
                let listed = names(&list);
                if let Some(j) = jar(t) {
                    j.retain(|(n, _)| listed.contains(&n.as_str()) == keep);
                }
                Val::None
            })
        }
        "get" => Box::new(move |t, c| {
            let n = x(t, c).text();
            let v = jar(t).and_then(|j| j.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()));
            v.map_or(Val::None, Val::Str)
        }),
        _ => Box::new(move |t, c| {
            let n = x(t, c).text();
            Val::Bool(!n.is_empty() && jar(t).is_some_and(|j| j.iter().any(|(k, _)| *k == n)))
        }),
    })
}

/// The functions that take a REGEX (a literal), matched against names.
fn regex_fn(f: &str, args: &[Expr], name: &str, pos: Pos) -> Result<ExprFn, VclError> {
    let [arg] = args else { return err(format!("{name}() takes 1 argument(s), not {}", args.len()), pos) };
    let re = regex_arg(arg)?;
    Ok(match f {
        "get_re" => Box::new(move |t, _| {
            let v = jar(t).and_then(|j| j.iter().find(|(k, _)| re.is_match(k)).map(|(_, v)| v.clone()));
            v.map_or(Val::None, Val::Str)
        }),
        _ => {
            let keep = f == "keep_re";
            Box::new(move |t, _| {
                if let Some(j) = jar(t) {
                    j.retain(|(n, _)| re.is_match(n) == keep);
                }
                Val::None
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(h: &str) -> Vec<(String, String)> {
        let mut j = Vec::new();
        parse(&mut j, h);
        j
    }

    #[test]
    fn a_header_parses_as_vmod_cookie_reads_it() {
        assert_eq!(to_string(&parsed("a=1; b=2")), "a=1; b=2;");
        assert_eq!(to_string(&parsed("  a=1;b = 2 ;")), "a=1; b = 2 ;");
        // A name runs to the next '=', a value to the next ';'.
        assert_eq!(to_string(&parsed("flag; a=b=c")), "flag; a=b=c;");
        assert_eq!(to_string(&parsed("a=1;;b=2")), "a=1; ;b=2;");
        // Empty names and values are dropped; a repeated name keeps its
        // place and takes the last value.
        assert_eq!(to_string(&parsed("=x; a=; b=1; c=2; b=3")), "b=3; c=2;");
        assert_eq!(to_string(&parsed("novalue")), "");
    }

    #[test]
    fn an_empty_header_keeps_the_jar() {
        let mut j = parsed("a=1");
        parse(&mut j, "");
        assert_eq!(to_string(&j), "a=1;");
        parse(&mut j, "b=2");
        assert_eq!(to_string(&j), "b=2;");
    }

    #[test]
    fn lists_split_on_commas() {
        assert_eq!(names(" a, b ,,c"), ["a", "b ", "c"]);
        assert!(names("").is_empty());
    }
}
