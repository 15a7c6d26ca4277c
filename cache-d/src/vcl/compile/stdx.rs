//! vmod_std's string, file, environment, rounding and connection helpers
//! that the others leave out: std.round, std.strstr, std.fnmatch,
//! std.file_exists, std.getenv, std.strftime, std.bytes, std.timestamp
//! and std.set_ip_tos, each with vmod_std's rules (see each function).

use super::program::*;
use super::vmod::one_arg;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};
use crate::vcl::model::Task;

/// Bytes as Varnish's VNUM_2bytes reads them: a number (up to fifteen
/// integer digits, up to three decimals), optional spaces, then a unit
/// (k, m, g, t, p: powers of 1024, an optional b after it; b alone; or
/// none), then nothing but spaces. A fraction of a byte is refused.
pub(super) fn parse_bytes(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let mut i = 0;
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    if int_digits > 15 {
        return None;
    }
    let mut r: f64 = if int_digits > 0 { s[int_start..i].parse().ok()? } else { 0.0 };
    if b.get(i) == Some(&b'.') {
        i += 1;
        let (mut scale, mut n) = (1.0, 0);
        while i < b.len() && b[i].is_ascii_digit() {
            if n == 3 {
                return None;
            }
            scale *= 0.1;
            r += scale * f64::from(b[i] - b'0');
            i += 1;
            n += 1;
        }
        if n == 0 {
            return None;
        }
    } else if int_digits == 0 {
        return None;
    }
    while i < b.len() && matches!(b[i], b' ' | b'\t') {
        i += 1;
    }
    let mut scale = 1.0;
    match b.get(i).map(u8::to_ascii_lowercase) {
        None => {}
        Some(u @ (b'k' | b'm' | b'g' | b't' | b'p')) => {
            scale = 2f64.powi(10 * (1 + [b'k', b'm', b'g', b't', b'p'].iter().position(|&x| x == u).unwrap_or(0) as i32));
            i += 1;
            if matches!(b.get(i), Some(b'b' | b'B')) {
                i += 1;
            }
        }
        Some(b'b') => i += 1,
        Some(_) => return None,
    }
    if scale == 1.0 && r.fract() != 0.0 {
        return None;
    }
    if !b[i..].iter().all(|c| c.is_ascii_whitespace()) {
        return None;
    }
    let v = (r * scale).round();
    (v <= i64::MAX as f64).then_some(v as u64)
}

/// std.strftime's text: `t` in UTC, formatted by the C library's
/// strftime; "" when it gives nothing (as Varnish).
fn strftime(t: f64, fmt: &str) -> String {
    let Ok(cfmt) = std::ffi::CString::new(fmt) else { return String::new() };
    let tt = t as libc::time_t;
    let mut buf = vec![0u8; 4096];
    // SAFETY: tm is plain data gmtime_r fills; strftime writes at most
    // buf.len() bytes and returns how many (0 when they do not fit).
    let n = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::gmtime_r(&tt, &mut tm).is_null() {
            return String::new();
        }
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), cfmt.as_ptr(), &tm)
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// fnmatch(3) with vmod_std's flags.
fn fnmatch(pattern: &str, subject: &str, flags: i32) -> bool {
    let (Ok(p), Ok(s)) = (std::ffi::CString::new(pattern), std::ffi::CString::new(subject)) else { return false };
    // SAFETY: both are NUL-terminated strings.
    unsafe { libc::fnmatch(p.as_ptr(), s.as_ptr(), flags) != libc::FNM_NOMATCH }
}

/// std.fnmatch(pattern, subject, pathname = true, noescape = false,
/// period = false); an unset pattern or subject fails the task.
fn std_fnmatch(args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    const PARAMS: [&str; 5] = ["pattern", "subject", "pathname", "noescape", "period"];
    let mut parts: [Option<ExprFn>; 5] = Default::default();
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => PARAMS.iter().position(|p| p == n),
            None => (i < PARAMS.len()).then_some(i),
        };
        let Some(at) = at else { return err(format!("std.fnmatch() has no argument '{}'", n.as_deref().unwrap_or("")), a.pos()) };
        parts[at] = Some(sc.expr(a)?);
    }
    let [Some(pattern), Some(subject), pathname, noescape, period] = parts else {
        return err("std.fnmatch() takes a pattern and a subject", pos);
    };
    Ok(Box::new(move |t, c| {
        let flag = |f: &Option<ExprFn>, default: bool, bit: i32, t: &mut _| {
            if f.as_ref().map_or(default, |f| f(t, c).truthy()) {
                bit
            } else {
                0
            }
        };
        let flags = flag(&pathname, true, libc::FNM_PATHNAME, t)
            | flag(&noescape, false, libc::FNM_NOESCAPE, t)
            | flag(&period, false, libc::FNM_PERIOD, t);
        let (p, s) = (pattern(t, c), subject(t, c));
        match (p, s) {
            (Val::None, _) => {
                fail(t, "std.fnmatch(): pattern is NULL".into());
                Val::Bool(false)
            }
            (_, Val::None) => {
                fail(t, "std.fnmatch(): subject is NULL".into());
                Val::Bool(false)
            }
            (p, s) => Val::Bool(fnmatch(&p.text(), &s.text(), flags)),
        }
    }))
}

/// std.bytes(s, fallback, real, integer): exactly one of s, real and
/// integer (named); the first that converts, else the fallback, else the
/// task fails.
fn std_bytes(args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    const PARAMS: [&str; 4] = ["s", "fallback", "real", "integer"];
    let mut parts: [Option<ExprFn>; 4] = Default::default();
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => PARAMS.iter().position(|p| p == n),
            None => (i < PARAMS.len()).then_some(i),
        };
        let Some(at) = at else { return err(format!("std.bytes() has no argument '{}'", n.as_deref().unwrap_or("")), a.pos()) };
        parts[at] = Some(sc.expr(a)?);
    }
    let [s, fallback, real, integer] = parts;
    if usize::from(s.is_some()) + usize::from(real.is_some()) + usize::from(integer.is_some()) != 1 {
        return err("std.bytes(): Only one of s, real or integer may be given", pos);
    }
    Ok(Box::new(move |t, c| {
        if let Some(s) = &s {
            if let Some(n) = parse_bytes(&s(t, c).text()) {
                return Val::Bytes(n);
            }
        }
        if let Some(r) = real.as_ref().and_then(|r| r(t, c).num()) {
            if r >= 0.0 && r.trunc() <= i64::MAX as f64 {
                return Val::Bytes(r.trunc() as u64);
            }
        }
        if let Some(Val::Int(i)) = integer.as_ref().map(|i| i(t, c)) {
            if i >= 0 {
                return Val::Bytes(i as u64);
            }
        }
        match &fallback {
            Some(f) => f(t, c),
            None => {
                fail(t, "std.bytes: conversion failed".into());
                Val::Bytes(0)
            }
        }
    }))
}

/// std.integer, std.real, std.duration and std.time given a typed value
/// by name (`std.integer(real = 1.5)`, `std.time(integer = 0)`): exactly
/// one value (else the task fails: "std.integer: too many arguments");
/// INT from a REAL, DURATION or TIME truncated, within VCL's range; a
/// value that does not convert gives the fallback, else fails the task.
fn typed_conversion(name: &str, args: &[Expr], names: &[Option<String>], sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let f = name.trim_start_matches("std.").to_string();
    let allowed: &[&str] = match name {
        "std.integer" => &["s", "fallback", "bool", "bytes", "duration", "real", "time"],
        "std.real" => &["s", "fallback", "integer", "bool", "bytes", "duration", "time"],
        _ => &["s", "fallback", "real", "integer"],
    };
    let mut given: Vec<(String, ExprFn)> = Vec::new();
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let n = n.as_deref().or_else(|| allowed.get(i).copied()).unwrap_or("");
        if !allowed.contains(&n) {
            return err(format!("{name}() has no argument '{n}'"), a.pos());
        }
        given.push((n.to_string(), sc.expr(a)?));
    }
    Ok(Box::new(move |t, c| {
        let values: Vec<(&str, Val)> = given.iter().filter(|(n, _)| n != "fallback").map(|(n, e)| (n.as_str(), e(t, c))).collect();
        if values.len() != 1 {
            let many = if values.len() > 1 { "too many" } else { "not enough" };
            fail(t, format!("std.{f}: {many} arguments"));
            return Val::None;
        }
        let (kind, v) = &values[0];
        let num = match (kind, v) {
            (&"bool", v) => Some(if v.truthy() { 1.0 } else { 0.0 }),
            (&"s", v) => v.text().trim().parse::<f64>().ok(),
            (_, v) => v.num(),
        };
        let out = match (f.as_str(), num) {
            ("integer", Some(r)) => {
                let r = r.trunc();
                (r.abs() <= 999_999_999_999_999.0).then_some(Val::Int(r as i64))
            }
            ("real", Some(r)) => Some(Val::Real(r)),
            ("duration", Some(r)) => Some(Val::Dur(r)),
            ("time", Some(r)) => Some(Val::Time(r)),
            _ => None,
        };
        match (out, given.iter().find(|(n, _)| n == "fallback")) {
            (Some(v), _) => v,
            (None, Some((_, fb))) => fb(t, c),
            (None, None) => {
                fail(t, format!("std.{f}: conversion failed"));
                Val::None
            }
        }
    }))
}

/// The functions of this module; None for a name it does not know.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let one = |n| one_arg(args, name, n, pos, sc);
    let typed = ["bool", "bytes", "duration", "real", "integer", "time"];
    if matches!(name, "std.integer" | "std.real" | "std.duration" | "std.time")
        && names.iter().flatten().any(|n| typed.contains(&n.as_str()))
    {
        return Some(typed_conversion(name, args, names, sc));
    }
    Some(match name {
        "std.fnmatch" => std_fnmatch(args, names, pos, sc),
        "std.bytes" => std_bytes(args, names, pos, sc),
        // round(3): halves away from zero.
        "std.round" => one(1).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| Val::Real(x(t, c).num().unwrap_or(0.0).round()))
        }),
        // The rest of s1 from the first s2 in it; unset when there is
        // none, or either is unset.
        "std.strstr" => one(2).map(|a| -> ExprFn {
            let mut a = a.into_iter();
            let (s1, s2) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| match (s1(t, c), s2(t, c)) {
                (Val::None, _) | (_, Val::None) => Val::None,
                (h, n) => {
                    let (h, n) = (h.text(), n.text());
                    h.find(&n).map_or(Val::None, |i| Val::Str(h[i..].to_string()))
                }
            })
        }),
        // stat(2) succeeds: a file, a directory or anything else.
        "std.file_exists" => one(1).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| Val::Bool(std::fs::metadata(x(t, c).text()).is_ok()))
        }),
        // The environment variable, unset when it is not there (or the
        // name is empty).
        "std.getenv" => one(1).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| {
                let n = x(t, c).text();
                if n.is_empty() || n.contains(['=', '\0']) {
                    return Val::None;
                }
                std::env::var_os(&n).map_or(Val::None, |v| Val::Str(v.to_string_lossy().into_owned()))
            })
        }),
        "std.strftime" => one(2).map(|a| -> ExprFn {
            let mut a = a.into_iter();
            let (when, fmt) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| {
                let when = when(t, c).num().unwrap_or(0.0);
                Val::Str(strftime(when, &fmt(t, c).text()))
            })
        }),
        // A Timestamp record with that label, now (an empty label: none).
        "std.timestamp" => one(1).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| {
                let label = x(t, c).text();
                if let (false, Some(clock), Some((log, vxid, _))) = (label.is_empty(), t.clock.as_deref_mut(), t.log.as_mut()) {
                    clock.stamp(log, *vxid, &label);
                }
                Val::None
            })
        }),
        "std.set_ip_tos" => one(1).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| {
                let tos = x(t, c).num().unwrap_or(0.0) as i32;
                set_ip_tos(t, tos);
                Val::None
            })
        }),
        _ => return None,
    })
}

/// The client connection's IP TOS (IPv6: traffic class) byte; nothing
/// on a Unix socket, as Varnish ignores it there.
fn set_ip_tos(t: &Task<'_>, tos: i32) {
    if t.req.is_none() {
        return;
    }
    let Some(ends) = t.ends.as_ref() else { return };
    let (Some(fd), None) = (ends.fd, ends.path.as_ref()) else { return };
    let (level, opt) = if ends.local.is_ipv4() { (libc::IPPROTO_IP, libc::IP_TOS) } else { (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) };
    crate::util::set_int_sockopt(fd, level, opt, tos);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_parse_as_vnum_2bytes() {
        assert_eq!(parse_bytes("1"), Some(1));
        assert_eq!(parse_bytes("10k"), Some(10240));
        assert_eq!(parse_bytes("10 KB"), Some(10240));
        assert_eq!(parse_bytes("1.5m"), Some(1_572_864));
        assert_eq!(parse_bytes("2b"), Some(2));
        assert_eq!(parse_bytes("1.5"), None);
        assert_eq!(parse_bytes("1.5b"), None);
        assert_eq!(parse_bytes("1x"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("1.2345k"), None);
    }

    #[test]
    fn strftime_formats_utc() {
        assert_eq!(strftime(0.0, "%Y-%m-%d %H:%M:%S"), "1970-01-01 00:00:00");
        assert_eq!(strftime(1e9, "%a, %d %b %Y"), "Sun, 09 Sep 2001");
    }

    #[test]
    fn fnmatch_takes_flags() {
        assert!(fnmatch("/a/*", "/a/b", libc::FNM_PATHNAME));
        assert!(!fnmatch("/a/*", "/a/b/c", libc::FNM_PATHNAME));
        assert!(fnmatch("/a/*", "/a/b/c", 0));
    }
}
