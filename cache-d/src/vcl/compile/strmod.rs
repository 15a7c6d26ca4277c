//! `import str;`: varnish-modules 0.20's vmod_str, string functions on
//! bytes (a length is bytes, take() and reverse() cut bytes), with the
//! vmod's answers for NULL (unset) arguments: -1 for count(), false for
//! the tests, NULL for the rest.

use super::program::*;
use super::var::in_order;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::Task;

/// A STRING argument as the vmod sees it: None for NULL (unset).
fn bytes(v: Val) -> Option<Vec<u8>> {
    match v {
        Val::None => None,
        Val::Str(s) => Some(s.into_bytes()),
        v => Some(v.text().into_bytes()),
    }
}

/// A result: NULL, or the bytes as a string.
fn string(b: Option<&[u8]>) -> Val {
    b.map_or(Val::None, |b| Val::Str(String::from_utf8_lossy(b).into_owned()))
}

/// str.take(s, n, offset): `n` bytes from `offset`, as vmod_str's
/// take(): a negative offset counts from the end (so does offset 0 with
/// a negative n), a negative n takes the bytes left of the offset, and
/// what falls outside the string is clipped.
pub(super) fn take(s: &[u8], n: i64, o: i64) -> &[u8] {
    let l = s.len() as i128;
    let (mut n, mut o) = (i128::from(n), i128::from(o));
    if o < 0 || (o == 0 && n < 0) {
        o += l;
    }
    if n < 0 {
        n = -n;
        o -= n;
    }
    if o + n < 0 || o > l || n == 0 {
        return b"";
    }
    if o < 0 {
        n += o;
        o = 0;
    }
    if o + n > l {
        n = l - o;
    }
    &s[o as usize..(o + n) as usize]
}

/// str.split(s, n, sep): the n-th token of `s` (from the end when n is
/// negative) between bytes of `sep`, None if there is no such token; as
/// vmod_str's split(), whose walk from the end drops the first byte of a
/// token that starts the string ("abc", -1 gives "bc").
pub(super) fn split<'s>(s: &'s [u8], n: i64, sep: &[u8]) -> Option<&'s [u8]> {
    if n == 0 || (n < 0 && s.is_empty()) {
        return None;
    }
    let len = s.len() as i64;
    let at = |k: i64| if (0..len).contains(&k) { s[k as usize] } else { 0 };
    let isin = |c: u8| c != 0 && sep.contains(&c);
    let inc: i64 = if n < 0 { -1 } else { 1 };
    let (mut n, mut e) = (n, if inc < 0 { len } else { -1 });
    let mut nomore = false;
    let b = loop {
        let mut b = e + inc;
        while isin(at(b)) {
            if inc < 0 && b == 0 {
                return None;
            }
            b += inc;
        }
        // Past the end there is no token (the vmod reads beyond the
        // string's NUL there).
        if b >= len {
            return None;
        }
        e = b + inc;
        while !isin(at(e)) {
            if (inc > 0 && at(e) == 0) || (inc < 0 && e <= 0) {
                nomore = true;
                break;
            }
            e += inc;
        }
        n -= inc;
        if n == 0 {
            break b;
        }
        if nomore {
            return None;
        }
    };
    let (from, to) = if inc > 0 { (b, e) } else { (e + 1, b + 1) };
    let clip = |k: i64| k.clamp(0, len) as usize;
    Some(&s[clip(from)..clip(to).max(clip(from))])
}

/// Each function's parameters, by vmod_str's names, and their defaults.
fn params(f: &str) -> Option<(&'static [&'static str], Vec<Option<Expr>>)> {
    let lit = |s: &str| Some(Expr::Str(s.into(), Pos::default()));
    Some(match f {
        "count" | "reverse" => (&["s"], vec![]),
        "startswith" | "endswith" | "contains" => (&["s1", "s2"], vec![]),
        "take" => (&["s", "n", "offset"], vec![None, None, Some(Expr::Int(0, Pos::default()))]),
        "split" => (&["S", "n", "sep"], vec![None, None, lit(" \t")]),
        _ => return None,
    })
}

/// A function of vmod_str; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("str.")?;
    let Some((ps, defaults)) = params(f) else { return Some(err(format!("Symbol not found: '{name}'"), pos)) };
    let compiled = in_order(name, ps, &defaults, args, names, pos).and_then(|a| a.iter().map(|a| sc.expr(a)).collect());
    Some(compiled.map(|a: Vec<ExprFn>| build(f, a)))
}

/// The closure for function `f` of its compiled arguments.
fn build(f: &str, a: Vec<ExprFn>) -> ExprFn {
    let mut a = a.into_iter();
    let Some(x) = a.next() else { return Box::new(|_, _| Val::None) };
    let (y, z) = (a.next(), a.next());
    let int = |f: &Option<ExprFn>, t: &mut Task<'_>, c: &Compiled| f.as_ref().and_then(|f| f(t, c).num()).unwrap_or(0.0) as i64;
    match (f, y) {
        ("count", _) => Box::new(move |t, c| Val::Int(bytes(x(t, c)).map_or(-1, |s| s.len() as i64))),
        ("reverse", _) => Box::new(move |t, c| {
            string(
                bytes(x(t, c))
                    .map(|mut s| {
                        s.reverse();
                        s
                    })
                    .as_deref(),
            )
        }),
        ("take", y) => Box::new(move |t, c| {
            let s = bytes(x(t, c));
            let (n, o) = (int(&y, t, c), int(&z, t, c));
            string(s.as_deref().map(|s| take(s, n, o)))
        }),
        ("split", y) => Box::new(move |t, c| {
            let s = bytes(x(t, c));
            let n = int(&y, t, c);
            let sep = z.as_ref().and_then(|z| bytes(z(t, c)));
            match (s, sep) {
                (Some(s), Some(sep)) => string(split(&s, n, &sep)),
                _ => Val::None,
            }
        }),
        (f, Some(y)) => {
            let test: fn(&[u8], &[u8]) -> bool = match f {
                "startswith" => |a, b| a.starts_with(b),
                "endswith" => |a, b| a.ends_with(b),
                _ => |a, b| b.is_empty() || a.windows(b.len()).any(|w| w == b),
            };
            Box::new(move |t, c| match (bytes(x(t, c)), bytes(y(t, c))) {
                (Some(a), Some(b)) => Val::Bool(test(&a, &b)),
                _ => Val::Bool(false),
            })
        }
        _ => Box::new(|_, _| Val::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_as_the_vmod() {
        let s = b"abcde";
        assert_eq!(take(s, 3, 0), b"abc");
        assert_eq!(take(s, 7, 0), b"abcde");
        assert_eq!(take(s, 0, 0), b"");
        assert_eq!(take(s, -3, 0), b"cde");
        assert_eq!(take(s, -7, 0), b"abcde");
        assert_eq!(take(s, 3, -4), b"bcd");
        assert_eq!(take(s, 5, -3), b"cde");
        assert_eq!(take(s, 5, -7), b"abc");
        assert_eq!(take(s, 5, -15), b"");
        assert_eq!(take(s, i64::MIN, i64::MIN), b"");
        assert_eq!(take(s, i64::MAX, i64::MAX), b"");
    }

    #[test]
    fn split_as_the_vmod() {
        let s = b".-.abc..def.-ghi..";
        let sp = |n| split(s, n, b".-");
        assert_eq!(sp(1), Some(&b"abc"[..]));
        assert_eq!(sp(3), Some(&b"ghi"[..]));
        assert_eq!(sp(7), None);
        assert_eq!(sp(-3), Some(&b"abc"[..]));
        assert_eq!(sp(-4), None);
        assert_eq!(split(b"abc def", 2, b" "), Some(&b"def"[..]));
        assert_eq!(split(b"abc def", -2, b" "), Some(&b"bc"[..]));
        assert_eq!(split(b"", 1, b" "), None);
        assert_eq!(split(b"", -1, b" "), None);
        assert_eq!(split(b"a", -1, b" "), Some(&b"a"[..]));
        assert_eq!(split(b"abc.", 2, b"."), None);
    }
}
