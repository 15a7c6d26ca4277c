//! `import accept;`: varnish-modules 0.20's vmod_accept. A rule object
//! (`new rule = accept.rule("text/plain")`) holds a fallback and the
//! values it accepts; `rule.filter(req.http.Accept)` gives the accepted
//! value with the highest q in the header (its first one on a tie), in the
//! rule's spelling, else the fallback, with the vmod's parser (see
//! [`filter`]). Rules are the program's, kept on [`Compiled`] as (fallback,
//! values) and shared by every task.

use super::program::*;
use super::var::in_order;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};

/// A token of an Accept header, as the vmod's tokenizer cuts them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok {
    Str,
    Eos,
    Comma,
    Semi,
    Eq,
    Ows,
}

/// The byte at `i` (0 past the end, as C's terminating NUL).
fn at(s: &[u8], i: usize) -> u8 {
    s.get(i).copied().unwrap_or(0)
}

/// C's isspace() in the C locale.
fn space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// The token at `i`: its kind and where the next one starts.
fn next(s: &[u8], i: usize) -> (Tok, usize) {
    let c = at(s, i);
    if space(c) {
        let mut e = i;
        while space(at(s, e)) {
            e += 1;
        }
        return (Tok::Ows, e);
    }
    match c {
        0 => return (Tok::Eos, i),
        b',' => return (Tok::Comma, i + 1),
        b';' => return (Tok::Semi, i + 1),
        b'=' => return (Tok::Eq, i + 1),
        _ => {}
    }
    let mut e = i;
    while !matches!(at(s, e), 0 | b',' | b';' | b'=') && !space(at(s, e)) {
        e += 1;
    }
    (Tok::Str, e)
}

/// The next token, skipping one run of white space.
fn next_after_ows(s: &[u8], i: usize) -> (Tok, usize, usize) {
    match next(s, i) {
        (Tok::Ows, e) => {
            let (t, e2) = next(s, e);
            (t, e, e2)
        }
        (t, e) => (t, i, e),
    }
}

/// The length of the number C's strtod() reads at the start of `s`
/// (digits, a '.', digits, an exponent), and its value.
fn strtod(s: &[u8]) -> (usize, f64) {
    let digits = |from: usize| (from..).take_while(|&i| at(s, i).is_ascii_digit()).count();
    let mut n = digits(0);
    if at(s, n) == b'.' {
        n += 1 + digits(n + 1);
    }
    if matches!(at(s, n), b'e' | b'E') {
        let sign = usize::from(matches!(at(s, n + 1), b'+' | b'-'));
        let d = digits(n + 1 + sign);
        if d > 0 {
            n += 1 + sign + d;
        }
    }
    let v = std::str::from_utf8(&s[..n]).ok().and_then(|t| t.parse().ok()).unwrap_or(0.0);
    (n, v)
}

/// An entry of the header: where its value is, its weight, and where
/// the next entry starts.
struct Entry {
    value: (usize, usize),
    q: f64,
    next: usize,
}

/// One entry of the header from `i`: Ok(None) at the end, Err(()) for
/// what the vmod's parser refuses. Only a first parameter named `q` is
/// the weight, a number from 0 to 1 starting with 0 or 1.
fn entry(s: &[u8], i: usize) -> Result<Option<Entry>, ()> {
    let (t, b, mut nx) = next_after_ows(s, i);
    if t == Tok::Eos {
        return Ok(None);
    }
    if t != Tok::Str {
        return Err(());
    }
    let (span, mut q, mut first) = ((b, nx), 1.0, true);
    loop {
        let (t, _, e) = next_after_ows(s, nx);
        nx = e;
        match t {
            Tok::Eos | Tok::Comma => return Ok(Some(Entry { value: span, q, next: nx })),
            Tok::Semi => {}
            _ => return Err(()),
        }
        let (t, name, e) = next_after_ows(s, nx);
        if t != Tok::Str {
            return Err(());
        }
        let is_q = first && &s[name..e] == b"q";
        let (t, value) = next(s, e);
        if t != Tok::Eq {
            return Err(());
        }
        let (t, e) = next(s, value);
        if t != Tok::Str {
            return Err(());
        }
        nx = e;
        if is_q {
            // The number must start with 0 or 1 (no NAN, INF or hex),
            // and the entry goes on where strtod() stopped.
            let num = &s[value..];
            if !matches!(at(num, 0), b'0' | b'1') || matches!(at(num, 1), b'x' | b'X') {
                return Err(());
            }
            let (len, v) = strtod(num);
            if !(0.0..=1.0).contains(&v) {
                return Err(());
            }
            q = v;
            nx = value + len;
        }
        first = false;
    }
}

/// rule.filter(): the rule's value for the header's accepted entry with
/// the highest q (the first of equals; q=0 is never chosen), compared
/// case-insensitively; the fallback when none is accepted, when the
/// header is unset, or when the parser meets an error (even after a
/// match).
pub(super) fn filter(fallback: &str, values: &[String], header: Option<&[u8]>) -> String {
    let Some(s) = header else { return fallback.to_string() };
    let (mut best, mut maxq) = (fallback, 0.0);
    let mut i = 0;
    loop {
        match entry(s, i) {
            Err(()) => return fallback.to_string(),
            Ok(None) => return best.to_string(),
            Ok(Some(Entry { value: (b, e), q, next: nx })) => {
                let v = &s[b..e];
                if let Some(m) = values.iter().find(|m| m.as_bytes().eq_ignore_ascii_case(v)) {
                    if q > maxq {
                        (best, maxq) = (m, q);
                    }
                }
                i = nx;
            }
        }
    }
}

/// `new rule = accept.rule(string)`: a rule with that fallback (unset:
/// "") and no values yet.
pub(super) fn object_new(obj: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    let fallback = sc.expr(&in_order("accept.rule", &["string"], &[], args, names, pos)?[0])?;
    let obj = obj.to_string();
    Ok(Box::new(move |t, c| {
        let fb = fallback(t, c).text();
        c.accept_rules.lock().unwrap_or_else(|e| e.into_inner()).insert(obj.clone(), (fb, Vec::new()));
        Flow::Next
    }))
}

/// rule.add(string), rule.remove(string), rule.filter(string).
pub(super) fn method(
    obj: &str,
    method: &str,
    args: &[Expr],
    names: &[Option<String>],
    pos: Pos,
    sc: &Scope<'_>,
) -> Result<ExprFn, VclError> {
    if !matches!(method, "add" | "remove" | "filter") {
        return err(format!("Symbol not found: '{obj}.{method}' (a rule has .add(), .remove() and .filter())"), pos);
    }
    let x = sc.expr(&in_order(method, &["string"], &[], args, names, pos)?[0])?;
    let (obj, method) = (obj.to_string(), method.to_string());
    Ok(Box::new(move |t, c| {
        let v = match x(t, c) {
            Val::None => None,
            v => Some(v.text()),
        };
        let mut rules = c.accept_rules.lock().unwrap_or_else(|e| e.into_inner());
        let Some((fallback, values)) = rules.get_mut(&obj) else { return Val::None };
        let known = |v: &str| values.iter().position(|m| m.eq_ignore_ascii_case(v));
        match (method.as_str(), v) {
            ("filter", v) => return Val::Str(filter(fallback, values, v.as_deref().map(str::as_bytes))),
            // An empty or unset value is not added, nor removed.
            (_, None) => {}
            (_, Some(v)) if v.is_empty() => {}
            ("add", Some(v)) => {
                if known(&v).is_none() {
                    values.push(v);
                }
            }
            (_, Some(v)) => {
                if let Some(i) = known(&v) {
                    values.remove(i);
                }
            }
        }
        Val::None
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(values: &[&str], h: &str) -> String {
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        filter("text/plain", &values, Some(h.as_bytes()))
    }

    #[test]
    fn the_best_accepted_value_or_the_fallback() {
        let v = ["text/html", "application/json"];
        assert_eq!(f(&v, "text/html"), "text/html");
        assert_eq!(f(&v, "image/png, APPLICATION/JSON"), "application/json");
        assert_eq!(f(&v, "text/html;q=0.5, application/json"), "application/json");
        assert_eq!(f(&v, "text/html;q=0.5, application/json;q=0.5"), "text/html");
        assert_eq!(f(&v, "text/html;q=0"), "text/plain");
        assert_eq!(f(&v, "image/png"), "text/plain");
        assert_eq!(f(&v, ""), "text/plain");
        assert_eq!(filter("fb", &[], None), "fb");
    }

    #[test]
    fn the_vmods_parser() {
        let v = ["a", "b"];
        // Only a first parameter named q weighs.
        assert_eq!(f(&v, "a;level=1;q=0.1, b;q=0.5"), "a");
        assert_eq!(f(&v, "a ; q=0.1 , b"), "b");
        // Errors give the fallback, even after a match.
        assert_eq!(f(&v, "a, ,b"), "text/plain");
        assert_eq!(f(&v, "a;q=2"), "text/plain");
        assert_eq!(f(&v, "a;q=.5"), "text/plain");
        assert_eq!(f(&v, "a;q = 0.5"), "text/plain");
        assert_eq!(f(&v, "a;q=0.5x"), "text/plain");
        assert_eq!(f(&v, "a;q=0x1"), "text/plain");
        assert_eq!(f(&v, "b;q=1e-1, a;q=0.2"), "a");
        assert_eq!(strtod(b"0.5,"), (3, 0.5));
        assert_eq!(strtod(b"1e"), (1, 1.0));
    }
}
