//! vmod functions past the basic ones: vmod_blob's encode, vmod_std's
//! conversions, random numbers, file reading, address parsing and
//! rollback, and directors.lookup. A BLOB is carried as the text Varnish
//! prints for one: its base64 between colons (`:AAEC:`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::program::*;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Base64 of `b`, with the standard alphabet and padding.
pub(super) fn base64(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes of standard base64 (padding optional); None if it is not.
pub(super) fn unbase64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// A function's arguments, compiled, when there are `n` of them.
pub(super) fn one_arg(args: &[Expr], name: &str, n: usize, pos: Pos, sc: &Scope<'_>) -> Result<Vec<ExprFn>, VclError> {
    if args.len() != n {
        return err(format!("{name}() takes {n} argument(s), not {}", args.len()), pos);
    }
    args.iter().map(|a| sc.expr(a)).collect()
}

/// A BLOB value: its bytes as Varnish prints a blob.
pub(super) fn blob(b: &[u8]) -> Val {
    Val::Str(format!(":{}:", base64(b)))
}

/// The bytes of a BLOB value (a string that is not one: its own bytes).
pub(super) fn blob_bytes(v: &Val) -> Vec<u8> {
    let s = v.text();
    match s.strip_prefix(':').and_then(|x| x.strip_suffix(':')).and_then(unbase64) {
        Some(b) => b,
        None => s.into_bytes(),
    }
}

/// An enum argument (`HEX`, `LOWER`): a bare name from `allowed`.
pub(super) fn enum_arg(e: &Expr, allowed: &[&str], what: &str) -> Result<String, VclError> {
    match e {
        Expr::Name(n, _) if allowed.contains(&n.as_str()) => Ok(n.clone()),
        other => err(format!("{what} must be one of {}", allowed.join(", ")), other.pos()),
    }
}

/// blob.encode(encoding=IDENTITY, case=DEFAULT, blob): a BLOB as text.
fn blob_encode(args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    const ENCODINGS: [&str; 7] = ["IDENTITY", "BASE64", "BASE64URL", "BASE64URLNOPAD", "BASE64CF", "HEX", "URL"];
    let (mut enc, mut case, mut arg) = ("IDENTITY".to_string(), "DEFAULT".to_string(), None);
    for (i, (a, n)) in args.iter().zip(names).enumerate() {
        match n.as_deref().or_else(|| ["encoding", "case", "blob"].get(i).copied()) {
            Some("encoding") => enc = enum_arg(a, &ENCODINGS, "encoding")?,
            Some("case") => case = enum_arg(a, &["LOWER", "UPPER", "DEFAULT"], "case")?,
            Some("blob") => arg = Some(sc.expr(a)?),
            _ => return err("blob.encode() takes encoding, case and blob", a.pos()),
        }
    }
    let Some(arg) = arg else { return err("blob.encode() needs blob=", pos) };
    Ok(Box::new(move |t, c| match encode_as(&enc, &case, &blob_bytes(&arg(t, c))) {
        Ok(s) => Val::Str(s),
        Err(why) => {
            fail(t, why);
            Val::None
        }
    }))
}

/// Bytes as text in one of vmod_blob's encodings; a case other than
/// DEFAULT is for HEX and URL only (else vmod_blob's error).
pub(super) fn encode_as(enc: &str, case: &str, b: &[u8]) -> Result<String, String> {
    if case != "DEFAULT" && !matches!(enc, "HEX" | "URL") {
        return Err(format!("vmod blob error: case {case} is illegal with encoding {enc}"));
    }
    let hex: &[u8; 16] = if case == "UPPER" { b"0123456789ABCDEF" } else { b"0123456789abcdef" };
    Ok(match enc {
        "HEX" => b.iter().flat_map(|x| [hex[usize::from(x >> 4)] as char, hex[usize::from(x & 15)] as char]).collect(),
        // RFC 3986's unreserved characters as they are, the rest %XX.
        "URL" => {
            let mut out = String::with_capacity(b.len() * 3);
            for &x in b {
                if x.is_ascii_alphanumeric() || matches!(x, b'-' | b'.' | b'_' | b'~') {
                    out.push(x as char);
                } else {
                    out.extend(['%', hex[usize::from(x >> 4)] as char, hex[usize::from(x & 15)] as char]);
                }
            }
            out
        }
        "BASE64" => base64(b),
        "BASE64CF" => base64(b).replace('+', "-").replace('/', "~").replace('=', "_"),
        "BASE64URL" | "BASE64URLNOPAD" => {
            let s = base64(b).replace('+', "-").replace('/', "_");
            if enc == "BASE64URLNOPAD" {
                s.trim_end_matches('=').to_string()
            } else {
                s
            }
        }
        _ => String::from_utf8_lossy(b).into_owned(),
    })
}

/// An address with an optional port (`1.2.3.4`, `1.2.3.4:8000`,
/// `1.2.3.4 8000`, `::1`, `[::1]`, `[::1]:8000`), the port `default`
/// when it has none, as Varnish's VSS parses them.
pub(super) fn parse_addr(s: &str, default: u16) -> Option<(IpAddr, u16)> {
    let s = s.trim();
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        let tail = tail.trim_start_matches([':', ' ']);
        (h, (!tail.is_empty()).then_some(tail))
    } else if let Some((h, p)) = s.split_once(' ') {
        (h, Some(p.trim()))
    } else if s.matches(':').count() == 1 {
        let (h, p) = s.split_once(':')?;
        (h, Some(p))
    } else {
        (s, None)
    };
    let ip: IpAddr = host.parse().ok()?;
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    Some((ip, port))
}

/// A value as an IP (an IP, or text that parses as one, port 80 if it
/// names none).
fn as_ip(v: &Val) -> Option<Val> {
    match v {
        Val::Ip(ip, p) => Some(Val::Ip(*ip, *p)),
        Val::None => None,
        other => parse_addr(&other.text(), 80).map(|(ip, p)| Val::Ip(ip, p)),
    }
}

/// A random number in [0, 1): splitmix64 over a counter seeded by the
/// clock (a coin for policies, not for secrets).
fn random_unit() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ (crate::util::now().to_bits());
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// std.fileread / std.blobread: a file's contents, read once per name
/// (as Varnish: a changed file is not read again).
fn file_reader(name: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let path = one_arg(args, name, 1, pos, sc)?.remove(0);
    let as_blob = name == "std.blobread";
    let cache: Mutex<HashMap<String, Arc<Vec<u8>>>> = Mutex::new(HashMap::new());
    Ok(Box::new(move |t, c| {
        let p = path(t, c).text();
        let known = cache.lock().map(|m| m.get(&p).cloned()).unwrap_or(None);
        let data = match known {
            Some(d) => d,
            None => match std::fs::read(&p) {
                Ok(d) => {
                    let d = Arc::new(d);
                    if let Ok(mut m) = cache.lock() {
                        m.insert(p, d.clone());
                    }
                    d
                }
                Err(e) => {
                    fail(t, format!("std.fileread(\"{p}\"): {e}"));
                    return Val::None;
                }
            },
        };
        if as_blob {
            blob(&data)
        } else {
            Val::Str(String::from_utf8_lossy(&data).into_owned())
        }
    }))
}

/// The functions of this module; None for a name it does not know.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    Some(match name {
        "blob.encode" => blob_encode(args, names, pos, sc),
        "std.fileread" | "std.blobread" => file_reader(name, args, pos, sc),
        "std.ip" => std_ip(args, names, pos, sc),
        "std.port" => one_arg(args, name, 1, pos, sc).map(|mut a| {
            let x = a.remove(0);
            let f: ExprFn = Box::new(move |t, c| match as_ip(&x(t, c)) {
                Some(Val::Ip(_, p)) => Val::Int(i64::from(p)),
                _ => Val::Int(0),
            });
            f
        }),
        "std.random" => one_arg(args, name, 2, pos, sc).map(|a| {
            let mut a = a.into_iter();
            let (lo, hi) = (a.next().expect("2 args"), a.next().expect("2 args"));
            let f: ExprFn = Box::new(move |t, c| {
                let (lo, hi) = (lo(t, c).num().unwrap_or(0.0), hi(t, c).num().unwrap_or(0.0));
                Val::Real(lo + (hi - lo) * random_unit())
            });
            f
        }),
        "std.real2time" | "std.real2integer" | "std.time2real" | "std.time2integer" => conversion(name, args, pos, sc),
        "std.rollback" => rollback(args, pos),
        "directors.lookup" => lookup(args, pos, sc),
        _ => return None,
    })
}

/// std.ip(s, fallback, resolve = true, p = "80"): `s` as an address, a
/// name resolved to its first address unless resolve is false (numeric
/// ports only), port `p` where it names none; else the fallback; without
/// one the task fails ("std.ip: conversion failed").
fn std_ip(args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    const PARAMS: [&str; 4] = ["s", "fallback", "resolve", "p"];
    let mut parts: [Option<ExprFn>; 4] = Default::default();
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => PARAMS.iter().position(|p| p == n),
            None => (i < PARAMS.len()).then_some(i),
        };
        let Some(at) = at else { return err(format!("std.ip() has no argument '{}'", n.as_deref().unwrap_or("")), a.pos()) };
        parts[at] = Some(sc.expr(a)?);
    }
    let [Some(x), fb, resolve, port] = parts else { return err("std.ip() needs an address", pos) };
    Ok(Box::new(move |t, c| {
        let default = port.as_ref().map_or(80, |p| p(t, c).text().trim().parse().unwrap_or(80));
        let text = x(t, c).text();
        let names_too = resolve.as_ref().is_none_or(|r| r(t, c).truthy());
        let found = parse_addr(&text, default).or_else(|| if names_too { resolve_first(&text, default) } else { None });
        match (found, &fb) {
            (Some((ip, p)), _) => Val::Ip(ip, p),
            (None, Some(fb)) => as_ip(&fb(t, c)).unwrap_or(Val::None),
            (None, None) => {
                fail(t, "std.ip: conversion failed".into());
                Val::Ip(IpAddr::from([0, 0, 0, 0]), 0)
            }
        }
    }))
}

/// A host name (with an optional numeric port, as [`parse_addr`] reads
/// one) resolved: its first address, as getaddrinfo orders them.
fn resolve_first(s: &str, default: u16) -> Option<(IpAddr, u16)> {
    use std::net::ToSocketAddrs;
    let s = s.trim();
    let (host, port) = match s.split_once([' ', ':']) {
        Some((h, p)) => (h, p.trim().parse().ok()?),
        None => (s, default),
    };
    if host.is_empty() {
        return None;
    }
    let a = (host, port).to_socket_addrs().ok()?.next()?;
    Some((a.ip(), a.port()))
}

/// std.real2time(r, fallback), std.real2integer(r, fallback),
/// std.time2real(t, fallback), std.time2integer(t, fallback).
fn conversion(name: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let mut a = one_arg(args, name, 2, pos, sc)?.into_iter();
    let (x, fb) = (a.next().expect("2 args"), a.next().expect("2 args"));
    let to: fn(f64) -> Option<Val> = match name {
        "std.real2time" => |r| Some(Val::Time(r)),
        "std.time2real" => |r| Some(Val::Real(r)),
        // round(3), within VCL's INT range (VRT_INTEGER_MAX).
        _ => |r| {
            let i = r.round();
            (i.abs() <= 999_999_999_999_999.0).then_some(Val::Int(i as i64))
        },
    };
    Ok(Box::new(move |t, c| match x(t, c).num().filter(|n| n.is_finite()).and_then(to) {
        Some(v) => v,
        None => fb(t, c),
    }))
}

/// std.rollback(req): the request's headers back as they arrived (where
/// they were kept: a policy that may do ESI keeps them); std.rollback(bereq):
/// the backend request as the fetch began.
fn rollback(args: &[Expr], pos: Pos) -> Result<ExprFn, VclError> {
    match args {
        [Expr::Name(n, _)] if n == "req" => Ok(Box::new(|t, _| {
            if let Some(r) = t.req.as_deref_mut() {
                if let Some(h) = &r.http0 {
                    r.headers = h.clone();
                }
                // The task's vmod state goes too (Varnish's Req_Rollback).
                r.cookies.clear();
                r.vars.clear();
            }
            Val::None
        })),
        [Expr::Name(n, _)] if n == "bereq" => Ok(Box::new(|t, _| {
            if let Some(b) = t.bereq.as_deref_mut() {
                b.rollback();
                b.cookies.clear();
                b.vars.clear();
                b.shard_params.clear();
            }
            Val::None
        })),
        _ => err("std.rollback() takes req or bereq", pos),
    }
}

/// directors.lookup(name): a backend by name, in vcl_init only (anywhere
/// else the task fails, as Varnish).
fn lookup(args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let x = one_arg(args, "directors.lookup", 1, pos, sc)?.remove(0);
    let backends: Vec<String> = sc.backends.to_vec();
    Ok(Box::new(move |t, c| {
        if t.req.is_some() || t.bereq.is_some() {
            fail(t, "directors.lookup() may only be called from vcl_init{}".into());
            return Val::None;
        }
        let n = x(t, c).text();
        if backends.contains(&n) {
            Val::Backend(n)
        } else {
            fail(t, format!("directors.lookup(): no backend named {n}"));
            Val::None
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in [&b""[..], b"F", b"Fi", b"Fil", b"File One", b"File Three"] {
            assert_eq!(unbase64(&base64(s)).as_deref(), Some(s));
        }
        assert_eq!(base64(b"File One"), "RmlsZSBPbmU=");
        assert_eq!(base64(b"File Three"), "RmlsZSBUaHJlZQ==");
    }

    #[test]
    fn addresses_parse_with_and_without_ports() {
        let v4: IpAddr = "1.2.3.4".parse().unwrap();
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(parse_addr("1.2.3.4", 80), Some((v4, 80)));
        assert_eq!(parse_addr("1.2.3.4:8000", 80), Some((v4, 8000)));
        assert_eq!(parse_addr("1.2.3.4 8000", 80), Some((v4, 8000)));
        assert_eq!(parse_addr("::1", 80), Some((v6, 80)));
        assert_eq!(parse_addr("[::1]", 80), Some((v6, 80)));
        assert_eq!(parse_addr("[::1]:8000", 80), Some((v6, 8000)));
        assert_eq!(parse_addr("..", 80), None);
    }

    #[test]
    fn random_stays_in_range() {
        assert!((0..1000).map(|_| random_unit()).all(|r| (0.0..1.0).contains(&r)));
    }
}
