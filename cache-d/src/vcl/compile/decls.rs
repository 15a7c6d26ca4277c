//! Backend and probe declarations: their checks, their settings, and the
//! directors `new` makes.

use crate::vcl::ast::*;
use crate::vcl::diag::{err, unsupported, VclError};
use std::collections::HashMap;
use std::net::IpAddr;

/// A declared backend: where it is and its settings.
#[derive(Clone, Debug)]
pub struct BackendSpec {
    pub name: String,
    pub host: String,
    pub port: String,
    pub cfg: crate::backend::pool::BackendCfg,
}

/// A backend's `.path`, as VCC checks it: absolute, and a socket if it is
/// there (a missing one may appear later: Varnish only warns).
fn check_path(path: &str, fields: &[Field], at: Pos) -> Result<(), VclError> {
    use std::os::unix::fs::FileTypeExt;
    if !path.starts_with('/') {
        return err("Backend path: Must be an absolute path", at);
    }
    if let (Some(true), Some(f)) = (flag(fields, "ssl"), field_value(fields, "ssl")) {
        return err("A backend on a Unix socket (.path) cannot use .ssl", f.pos);
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.file_type().is_socket() => err("Backend path: Not a socket", at),
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied) => Ok(()),
        Err(e) => err(format!("Backend path: Cannot stat: {e}"), at),
    }
}

/// A probe's settings, with Varnish's defaults for what is left out.
pub(super) fn probe_spec(fields: &[Field]) -> crate::backend::health::ProbeSpec {
    let mut p = crate::backend::health::ProbeSpec::default();
    let mut initial = None;
    for f in fields {
        match (f.name.as_str(), &f.value) {
            ("url", FieldValue::Expr(Expr::Str(s, _))) => p.url = s.clone(),
            ("request", FieldValue::Expr(e)) => {
                // `.request = "GET / HTTP/1.1" "Host: x" "Connection: close";`
                // arrives as a concatenation of strings.
                let mut lines = Vec::new();
                collect_strings(e, &mut lines);
                p.request = Some(lines);
            }
            ("expected_response", FieldValue::Expr(Expr::Int(n, _))) => p.expected = (*n).clamp(100, 999) as u16,
            ("timeout", FieldValue::Expr(Expr::Duration(d, _))) => p.timeout = secs(d.max(0.001)),
            ("interval", FieldValue::Expr(Expr::Duration(d, _))) => p.interval = secs(d.max(0.01)),
            ("window", FieldValue::Expr(Expr::Int(n, _))) => p.window = (*n).clamp(1, 64) as u32,
            ("threshold", FieldValue::Expr(Expr::Int(n, _))) => p.threshold = (*n).clamp(0, 64) as u32,
            ("initial", FieldValue::Expr(Expr::Int(n, _))) => initial = Some((*n).clamp(0, 64) as u32),
            _ => {}
        }
    }
    // Varnish: .initial defaults to .threshold - 1.
    p.initial = initial.unwrap_or(p.threshold.saturating_sub(1));
    p
}

fn collect_strings(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Str(s, _) => out.push(s.clone()),
        Expr::Binary { left, right, .. } => {
            collect_strings(left, out);
            collect_strings(right, out);
        }
        _ => {}
    }
}

pub(super) fn backend_spec(
    name: &str,
    fields: &[Field],
    probes: &HashMap<String, crate::backend::health::ProbeSpec>,
    pos: Pos,
) -> Result<BackendSpec, VclError> {
    let text = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Str(s, _)) => Some(s.clone()),
            FieldValue::Expr(Expr::Int(i, _)) => Some(i.to_string()),
            _ => None,
        })
    };
    let dur = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Duration(d, _)) => Some(secs(d.max(0.0))),
            _ => None,
        })
    };
    let max = field_value(fields, "max_connections").and_then(|f| match &f.value {
        FieldValue::Expr(Expr::Int(i, _)) if *i > 0 => Some(*i as usize),
        _ => None,
    });
    let probe = match field_value(fields, "probe").map(|f| &f.value) {
        Some(FieldValue::Block(inner)) => Some(probe_spec(inner)),
        Some(FieldValue::Name(n)) | Some(FieldValue::Expr(Expr::Name(n, _))) => Some(
            probes
                .get(n)
                .cloned()
                .ok_or_else(|| VclError { msg: format!("Probe '{n}' is not declared (declare it before the backend)"), pos })?,
        ),
        _ => None,
    };
    // A backend on a Unix socket (.path): its path stands where the host
    // would (pool::resolve gives a path no addresses), and a request
    // without Host gets Varnish's 0.0.0.0.
    let path = text("path");
    let host = path.clone().or_else(|| text("host")).unwrap_or_else(|| "127.0.0.1".into());
    let host_text = if path.is_some() { "0.0.0.0".to_string() } else { host.clone() };
    let ssl = match flag(fields, "ssl") {
        Some(true) => {
            let ask = crate::backend::tls::TlsAsk {
                sni: flag(fields, "ssl_sni"),
                verify_peer: flag(fields, "ssl_verify_peer"),
                verify_host: flag(fields, "ssl_verify_host"),
                ca_file: text("ssl_ca_file"),
            };
            let name = text("host_header").unwrap_or_else(|| host.clone());
            let at = field_value(fields, "ssl").map_or(pos, |f| f.pos);
            Some(std::sync::Arc::new(crate::backend::tls::BeTls::new(&name, &ask).map_err(|msg| VclError { msg, pos: at })?))
        }
        _ => None,
    };
    Ok(BackendSpec {
        name: name.to_string(),
        host,
        port: text("port").unwrap_or_else(|| "80".into()),
        cfg: crate::backend::pool::BackendCfg {
            connect_timeout: dur("connect_timeout"),
            first_byte_timeout: dur("first_byte_timeout"),
            between_bytes_timeout: dur("between_bytes_timeout"),
            max_connections: max,
            // As Varnish: requests without a Host get the backend's
            // .host_header, else its .host as written.
            host_header: Some(text("host_header").unwrap_or_else(|| host_text.clone())),
            probe,
            ssl,
            path: path.map(std::path::PathBuf::from),
            preamble: field_value(fields, "preamble").and_then(|f| match &f.value {
                FieldValue::Blob(b) if !b.is_empty() => Some(bytes::Bytes::from(b.clone())),
                _ => None,
            }),
        },
    })
}

/// A yes/no field: 0 or 1, true or false.
fn flag(fields: &[Field], name: &str) -> Option<bool> {
    field_value(fields, name).and_then(|f| match &f.value {
        FieldValue::Expr(Expr::Int(i, _)) => Some(*i != 0),
        FieldValue::Expr(Expr::Name(n, _)) => Some(n == "true"),
        _ => None,
    })
}

const BACKEND_FIELDS: [&str; 18] = [
    "host",
    "port",
    "path",
    "host_header",
    "connect_timeout",
    "first_byte_timeout",
    "between_bytes_timeout",
    "probe",
    "proxy_header",
    "max_connections",
    "authority",
    "via",
    "preamble",
    "ssl",
    "ssl_sni",
    "ssl_verify_peer",
    "ssl_verify_host",
    "ssl_ca_file",
];
const PROBE_FIELDS: [&str; 8] = ["url", "request", "expected_response", "timeout", "interval", "initial", "window", "threshold"];

pub(super) fn field_value<'f>(fields: &'f [Field], name: &str) -> Option<&'f Field> {
    fields.iter().find(|f| f.name == name)
}

/// A backend declaration: known fields of the right kinds, an address that
/// resolves (at load, as Varnish does).
pub(super) fn check_backend(name: &str, fields: &[Field], pos: Pos) -> Result<(), VclError> {
    for f in fields {
        if !BACKEND_FIELDS.contains(&f.name.as_str()) {
            return err(format!("Unknown field: '{}' (backends take: {})", f.name, BACKEND_FIELDS.join(", ")), f.pos);
        }
        if fields.iter().filter(|g| g.name == f.name).count() > 1 {
            return err(format!("Field '{}' redefined", f.name), f.pos);
        }
        match (f.name.as_str(), &f.value) {
            ("connect_timeout" | "first_byte_timeout" | "between_bytes_timeout", FieldValue::Expr(Expr::Duration(..))) => {}
            ("connect_timeout" | "first_byte_timeout" | "between_bytes_timeout", _) => {
                return err(format!("'.{}' takes a duration (e.g. 5s)", f.name), f.pos);
            }
            ("ssl" | "ssl_sni" | "ssl_verify_peer" | "ssl_verify_host", FieldValue::Expr(Expr::Int(0 | 1, _))) => {}
            ("ssl" | "ssl_sni" | "ssl_verify_peer" | "ssl_verify_host", FieldValue::Expr(Expr::Name(n, _)))
                if n == "true" || n == "false" => {}
            ("ssl" | "ssl_sni" | "ssl_verify_peer" | "ssl_verify_host", _) => {
                return err(format!("'.{}' takes 0 or 1 (or true or false)", f.name), f.pos);
            }
            ("max_connections" | "proxy_header", FieldValue::Expr(Expr::Int(..))) => {}
            ("max_connections" | "proxy_header", _) => return err(format!("'.{}' takes a number", f.name), f.pos),
            ("probe", FieldValue::Block(inner)) => check_probe(inner)?,
            ("probe", FieldValue::Name(_) | FieldValue::Expr(Expr::Name(..))) => {}
            ("probe", _) => return err("Expected '{' or name of probe", f.pos),
            ("preamble", FieldValue::Blob(_)) => {}
            ("preamble", _) => return err("'.preamble' takes a BLOB (:base64:)", f.pos),
            (_, FieldValue::Blob(_)) => return err(format!("'.{}' does not take a BLOB", f.name), f.pos),
            (_, FieldValue::Expr(Expr::Str(..))) => {}
            ("port", FieldValue::Expr(Expr::Int(..))) => {}
            _ => return err(format!("'.{}' takes a string", f.name), f.pos),
        }
    }
    let text = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Str(s, _)) => Some(s.clone()),
            FieldValue::Expr(Expr::Int(i, _)) => Some(i.to_string()),
            _ => None,
        })
    };
    if let (Some(_), Some(p)) = (field_value(fields, "host"), field_value(fields, "path")) {
        return err("Cannot specify both .host and .path", p.pos);
    }
    if let Some(p) = field_value(fields, "path") {
        return check_path(&text("path").unwrap_or_default(), fields, p.pos);
    }
    let Some(host) = text("host") else {
        return err(format!("Mandatory field 'host' missing in backend '{name}'"), pos);
    };
    let port = text("port").unwrap_or_else(|| "80".into());
    // A port in .host ("name:81", "[::1]:81") wins, as Varnish's VSS_parse.
    let resolves = !host.starts_with('/') && crate::backend::pool::resolve(&crate::backend::pool::host_port(&host, &port)).is_ok();
    if !resolves {
        let at = field_value(fields, "host").map_or(pos, |f| f.pos);
        return err(format!("Backend host '{host}' port '{port}' could not be resolved to an IP address"), at);
    }
    Ok(())
}

pub(super) fn check_probe(fields: &[Field]) -> Result<(), VclError> {
    for f in fields {
        if !PROBE_FIELDS.contains(&f.name.as_str()) {
            return err(format!("Unknown field: '{}' (probes take: {})", f.name, PROBE_FIELDS.join(", ")), f.pos);
        }
        match (f.name.as_str(), &f.value) {
            ("timeout" | "interval", FieldValue::Expr(Expr::Duration(..))) => {}
            ("timeout" | "interval", _) => return err(format!("'.{}' takes a duration (e.g. 5s)", f.name), f.pos),
            ("expected_response", FieldValue::Expr(Expr::Int(n, _))) if !(100..=999).contains(n) => {
                return err("Must specify .expected_response with exactly three digits (100 <= x <= 999)", f.pos);
            }
            ("initial" | "window" | "threshold" | "expected_response", FieldValue::Expr(Expr::Int(n, _))) => {
                if f.name != "expected_response" && !(0..=64).contains(n) {
                    return err(format!("'.{}' must be between 0 and 64", f.name), f.pos);
                }
            }
            ("initial" | "window" | "threshold" | "expected_response", _) => return err(format!("'.{}' takes a number", f.name), f.pos),
            (_, FieldValue::Expr(Expr::Str(..))) => {}
            // One string per line (see the parser).
            ("request", FieldValue::Expr(Expr::Binary { .. })) => {}
            _ => return err(format!("'.{}' takes a string", f.name), f.pos),
        }
    }
    if field_value(fields, "url").is_some() && field_value(fields, "request").is_some() {
        return err("A probe takes .url or .request, not both", fields[0].pos);
    }
    let num = |n: &str| {
        field_value(fields, n).and_then(|f| match &f.value {
            FieldValue::Expr(Expr::Int(i, _)) => Some(*i),
            _ => None,
        })
    };
    if let (None, Some(w)) = (num("threshold"), field_value(fields, "window")) {
        return err("Must specify .threshold with .window", w.pos);
    }
    if let (Some(t), Some(w)) = (num("threshold"), num("window")) {
        if t > w {
            let at = field_value(fields, "threshold").map_or(Pos::default(), |f| f.pos);
            return err(format!("Probe .threshold ({t}) is larger than .window ({w})"), at);
        }
    }
    Ok(())
}

/// What `new` can make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ObjKind {
    Director(crate::backend::director::Kind),
    /// dynamic.director()
    Dynamic,
    /// dynamic.resolver()
    Resolver,
    /// saintmode.saintmode()
    Saintmode,
    /// blob.blob()
    Blob,
    /// directors.shard_param()
    ShardParam,
    /// accept.rule()
    Accept,
}

/// The objects `new` makes, with their kind; anything else `new` is
/// refused.
pub(super) fn collect_objects(body: &[Stmt], out: &mut HashMap<String, ObjKind>) -> Result<(), VclError> {
    for s in body {
        match s {
            Stmt::New { name, ctor, pos } => {
                let Expr::Call { name: ctor_name, args, pos: cpos, .. } = ctor else {
                    return err("\"new\" takes a constructor, e.g. directors.round_robin()", *pos);
                };
                let sticky = match args.first() {
                    Some(Expr::Name(b, _)) => b == "true",
                    _ => false,
                };
                let kind = match ctor_name.as_str() {
                    "dynamic.director" => ObjKind::Dynamic,
                    "dynamic.resolver" => ObjKind::Resolver,
                    "saintmode.saintmode" => ObjKind::Saintmode,
                    "blob.blob" => ObjKind::Blob,
                    "directors.shard_param" => ObjKind::ShardParam,
                    "accept.rule" => ObjKind::Accept,
                    c => match crate::backend::director::Kind::from_ctor(c, sticky) {
                        Some(k) => ObjKind::Director(k),
                        None => return unsupported(&format!("Object {ctor_name}()"), *cpos),
                    },
                };
                if out.insert(name.clone(), kind).is_some() {
                    return err(format!("Object '{name}' redefined"), *pos);
                }
            }
            Stmt::If { branches, otherwise, .. } => {
                for (_, b) in branches {
                    collect_objects(b, out)?;
                }
                if let Some(o) = otherwise {
                    collect_objects(o, out)?;
                }
            }
            Stmt::Block(b) => collect_objects(b, out)?,
            _ => {}
        }
    }
    Ok(())
}

/// A duration from VCL seconds, bounded: a value past a century (or not a
/// number) must not overflow a deadline later.
fn secs(d: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(if d.is_nan() { 0.0 } else { d.clamp(0.0, crate::params::MAX_SECONDS) })
}

/// An ACL's entries as (negated, network, mask length), as VCC reads
/// them: "192.168" is 192.168.0.0/16 (not inet_aton's 192.0.0.168); a
/// mask too wide for the family, or one address both in and out, is
/// refused; host bits past the mask are an error unless `-pedantic`
/// (then cleared); a name in parentheses that does not resolve is
/// skipped.
pub(super) fn acl_entries(flags: &AclFlags, entries: &[AclEntry]) -> Result<Vec<(bool, IpAddr, u8)>, VclError> {
    let mut list = Vec::new();
    let mut seen: HashMap<(IpAddr, u8), bool> = HashMap::new();
    for e in entries {
        let (ips, default_mask) = match net_notation(&e.addr) {
            Some((ip, m)) => (vec![ip], Some(m)),
            None => (resolve(&e.addr), None),
        };
        if ips.is_empty() {
            if e.para {
                continue;
            }
            return err(format!("DNS lookup({}): Name or service not known", e.addr), e.pos);
        }
        if e.mask.is_some() && ips.iter().any(IpAddr::is_ipv4) && ips.iter().any(IpAddr::is_ipv6) {
            let m = e.mask.unwrap_or(0);
            return err(format!("Mask (/{m}) specified, but string resolves to both IPv4 and IPv6 addresses."), e.pos);
        }
        for ip in ips {
            let full = if ip.is_ipv4() { 32 } else { 128 };
            let mask = e.mask.or(default_mask).unwrap_or(full);
            if mask > full {
                let fam = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
                return err(format!("Too wide mask (/{mask}) for {fam} address"), e.pos);
            }
            let net = masked(ip, mask);
            if flags.pedantic && net != ip {
                return err(format!("Non-zero bits in masked part, (maybe use {net}/{mask} ?)"), e.pos);
            }
            match seen.insert((net, mask), e.negated) {
                Some(neg) if neg != e.negated => return err("Conflicting ACL entries:", e.pos),
                Some(_) => {}
                None => list.push((e.negated, net, mask)),
            }
        }
    }
    Ok(list)
}

/// "a.b.c.d" with one to four decimal parts of 0-255: the address with
/// the missing parts zero, and the mask the parts given cover.
fn net_notation(addr: &str) -> Option<(IpAddr, u8)> {
    let mut b = [0u8; 4];
    let parts: Vec<&str> = addr.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        b[i] = p.parse().ok()?;
    }
    Some((IpAddr::from(b), 8 * parts.len() as u8))
}

fn resolve(addr: &str) -> Vec<IpAddr> {
    if let Ok(ip) = addr.parse::<IpAddr>() {
        return vec![ip];
    }
    use std::net::ToSocketAddrs;
    (addr, 0).to_socket_addrs().map(|i| i.map(|s| s.ip()).collect()).unwrap_or_default()
}

/// `ip` with the bits past `mask` cleared.
pub(super) fn masked(ip: IpAddr, mask: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = if mask == 0 { 0 } else { u32::MAX << (32 - mask.min(32) as u32) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if mask == 0 { 0 } else { u128::MAX << (128 - mask.min(128) as u32) };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(negated: bool, addr: &str, mask: Option<u8>) -> AclEntry {
        AclEntry { negated, addr: addr.into(), mask, pos: Pos::default(), para: false, include: false }
    }

    #[test]
    fn backend_paths_checked_as_vcc_does() {
        let at = Pos::default();
        assert!(check_path("s1.sock", &[], at).unwrap_err().msg.contains("Must be an absolute path"));
        assert!(check_path("/dev/null", &[], at).unwrap_err().msg.contains("Not a socket"));
        assert!(check_path("/nonexistent/s1.sock", &[], at).is_ok(), "a socket not there yet is only a warning in Varnish");
    }

    #[test]
    fn acl_entries_read_as_vcc_does() {
        assert_eq!(net_notation("192.168.16"), Some((IpAddr::from([192, 168, 16, 0]), 24)));
        assert_eq!(net_notation("10"), Some((IpAddr::from([10, 0, 0, 0]), 8)));
        assert_eq!(net_notation("1.2.3.4.5"), None);
        let on = AclFlags::default();
        let got = acl_entries(&on, &[entry(true, "192.168.16", Some(21))]).unwrap();
        assert_eq!(got, vec![(true, IpAddr::from([192, 168, 16, 0]), 21)]);
        assert!(acl_entries(&on, &[entry(false, "10.1.2.3", Some(33))]).unwrap_err().msg.contains("Too wide mask"));
        let both = [entry(false, "1.2.3.4", None), entry(true, "1.2.3.4", None)];
        assert!(acl_entries(&on, &both).unwrap_err().msg.contains("Conflicting"));
        assert!(acl_entries(&on, &[entry(false, "127.0.1", Some(19))]).unwrap_err().msg.contains("Non-zero bits"));
        let off = AclFlags { pedantic: false, ..on };
        assert_eq!(acl_entries(&off, &[entry(false, "127.0.1", Some(19))]).unwrap(), vec![(false, IpAddr::from([127, 0, 0, 0]), 19)]);
        let mut skipped = entry(false, "no-such-host.invalid", Some(22));
        skipped.para = true;
        assert!(acl_entries(&on, &[skipped]).unwrap().is_empty());
    }
}
