//! Log formats: parse a varnishncsa format string once, then render one
//! line per client transaction.

use std::fmt::Write as _;

use chrono::{Local, TimeZone};
use common::log::group::Tx;
use common::log::vsl::Tag;

/// One piece of a format.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Lit(String),
    Bytes,
    Micros,
    Protocol,
    Host,
    InBytes,
    Ident,
    Method,
    OutBytes,
    Query,
    Request,
    Status,
    Time,
    Strftime(String),
    Seconds,
    Unit(u32),
    Url,
    User,
    ReqHeader(String),
    RespHeader(String),
    Extended(String),
    /// `%{VSL:Tag[:prefix][[field]]}x`: the first such record's payload.
    Vsl {
        tag: Tag,
        prefix: Option<String>,
        field: Option<usize>,
    },
}

/// A parsed format.
#[derive(Debug, Clone)]
pub struct Format {
    items: Vec<Item>,
}

/// The tags any line reads (fields, %{...}i/o headers, %{Varnish:...}x).
const LINE_TAGS: [Tag; 21] = [
    Tag::HttpGarbage,
    Tag::VclCall,
    Tag::VclReturn,
    Tag::ReqStart,
    Tag::BackendOpen,
    Tag::ReqMethod,
    Tag::BereqMethod,
    Tag::ReqUrl,
    Tag::BereqUrl,
    Tag::ReqProtocol,
    Tag::BereqProtocol,
    Tag::RespStatus,
    Tag::BerespStatus,
    Tag::ReqAcct,
    Tag::BereqAcct,
    Tag::PipeAcct,
    Tag::Timestamp,
    Tag::ReqHeader,
    Tag::BereqHeader,
    Tag::RespHeader,
    Tag::BerespHeader,
];

impl Format {
    /// The tags whose records rendering this format reads: the reader
    /// copies no others.
    pub fn tags(&self) -> Vec<Tag> {
        let mut tags = LINE_TAGS.to_vec();
        tags.extend(self.items.iter().filter_map(|i| match i {
            Item::Vsl { tag, .. } => Some(*tag),
            _ => None,
        }));
        tags
    }

    /// Parse a format string; errors name the offending specifier.
    pub fn parse(f: &str) -> Result<Format, String> {
        let mut items = Vec::new();
        let mut lit = String::new();
        let mut chars = f.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => lit.push('\n'),
                    Some('t') => lit.push('\t'),
                    Some(o) => {
                        lit.push('\\');
                        lit.push(o);
                    }
                    None => lit.push('\\'),
                },
                '%' => {
                    let arg = if chars.peek() == Some(&'{') {
                        chars.next();
                        let mut a = String::new();
                        loop {
                            match chars.next() {
                                Some('}') => break,
                                Some(ch) => a.push(ch),
                                None => return Err(format!("unterminated %{{ in format \"{f}\"")),
                            }
                        }
                        Some(a)
                    } else {
                        None
                    };
                    let spec = chars.next().ok_or_else(|| format!("format \"{f}\" ends with a lone %"))?;
                    let item = match (spec, arg) {
                        ('%', None) => {
                            lit.push('%');
                            continue;
                        }
                        ('b', None) => Item::Bytes,
                        ('D', None) => Item::Micros,
                        ('H', None) => Item::Protocol,
                        ('h', None) => Item::Host,
                        ('I', None) => Item::InBytes,
                        ('l', None) => Item::Ident,
                        ('m', None) => Item::Method,
                        ('O', None) => Item::OutBytes,
                        ('q', None) => Item::Query,
                        ('r', None) => Item::Request,
                        ('s', None) => Item::Status,
                        ('t', None) => Item::Time,
                        ('t', Some(a)) => Item::Strftime(a),
                        ('T', None) => Item::Seconds,
                        ('T', Some(a)) => match a.as_str() {
                            "s" => Item::Unit(1),
                            "ms" => Item::Unit(1000),
                            "us" => Item::Unit(1_000_000),
                            _ => return Err(format!("unknown time unit \"{a}\" in %{{{a}}}T (use s, ms or us)")),
                        },
                        ('U', None) => Item::Url,
                        ('u', None) => Item::User,
                        ('i', Some(h)) => Item::ReqHeader(h),
                        ('o', Some(h)) => Item::RespHeader(h),
                        ('x', Some(x)) => match x.as_str() {
                            "Varnish:vxid" | "Varnish:side" | "Varnish:time_firstbyte" | "Varnish:hitmiss" | "Varnish:handling" => {
                                Item::Extended(x)
                            }
                            v if v.starts_with("VSL:") => vsl_item(&v[4..])?,
                            _ => return Err(format!("unsupported %{{{x}}}x in format")),
                        },
                        (c, Some(a)) => return Err(format!("unknown format specifier %{{{a}}}{c}")),
                        (c, None) => return Err(format!("unknown format specifier %{c}")),
                    };
                    if !lit.is_empty() {
                        items.push(Item::Lit(std::mem::take(&mut lit)));
                    }
                    items.push(item);
                }
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            items.push(Item::Lit(lit));
        }
        Ok(Format { items })
    }

    /// Render the line for a client request or a backend request; None if
    /// it has no line (a session, garbage, restarted, or a time specifier
    /// without a Start timestamp). The caller picks the sides (-b / -c).
    pub fn render(&self, tx: &Tx) -> Option<String> {
        self.render_quoted(tx, false)
    }

    /// `render`, or with `json` as varnishncsa -j renders: values escaped
    /// for a JSON string, a missing string empty, a missing number 0.
    pub fn render_quoted(&self, tx: &Tx, json: bool) -> Option<String> {
        let f = Fields::of(tx)?;
        let mut out = String::with_capacity(256);
        let q = Quote { json };
        let (missing, zero) = if json { ("", "0") } else { ("-", "-") };
        for it in &self.items {
            match it {
                Item::Lit(s) => out.push_str(s),
                Item::Bytes => out.push_str(&f.acct(4).map_or(zero.into(), |v| v.to_string())),
                // A pipe counts what was piped, as varnishncsa does.
                Item::InBytes => out.push_str(&f.acct(2).or_else(|| f.pipe(2)).map_or(zero.into(), |v| v.to_string())),
                Item::OutBytes => out.push_str(&f.acct(5).or_else(|| f.pipe(3)).map_or(zero.into(), |v| v.to_string())),
                // Truncated, as varnishncsa does ((int)(span * 1e6)), so the
                // same log gives the same number in both.
                Item::Micros => out.push_str(&(((f.end? - f.start?) * 1e6) as i64).to_string()),
                Item::Seconds => out.push_str(&((f.end? - f.start?).floor()).to_string()),
                Item::Unit(u) => out.push_str(&(((f.end? - f.start?) * *u as f64) as i64).to_string()),
                Item::Protocol => q.escape(&mut out, f.protocol.unwrap_or("HTTP/1.0")),
                Item::Host => q.opt(&mut out, f.client_ip, missing),
                Item::Ident => out.push('-'),
                Item::Method => q.opt(&mut out, f.method, missing),
                Item::Query => {
                    if let Some((_, query)) = f.url.and_then(|u| u.split_once('?')) {
                        out.push('?');
                        q.escape(&mut out, query);
                    }
                }
                Item::Url => q.opt(&mut out, f.url.map(|u| u.split('?').next().unwrap_or(u)), missing),
                Item::Request => {
                    q.escape(&mut out, f.method.unwrap_or("-"));
                    out.push(' ');
                    match f.req_header("Host") {
                        Some(h) if h.starts_with("http://") => q.escape(&mut out, h),
                        Some(h) => {
                            out.push_str("http://");
                            q.escape(&mut out, h);
                        }
                        None => out.push_str("http://localhost"),
                    }
                    // No URL (a restarted transaction): nothing, as varnishncsa.
                    q.escape(&mut out, f.url.unwrap_or(""));
                    out.push(' ');
                    q.escape(&mut out, f.protocol.unwrap_or("HTTP/1.0"));
                }
                Item::Status => q.opt(&mut out, f.status, zero),
                Item::Time => {
                    let t = local(f.start?)?;
                    let _ = write!(out, "[{}]", t.format("%d/%b/%Y:%H:%M:%S %z"));
                }
                Item::Strftime(spec) => {
                    let start = f.start?;
                    match spec.as_str() {
                        "sec" => out.push_str(&(start.floor() as i64).to_string()),
                        "msec" => out.push_str(&((start * 1e3).floor() as i64).to_string()),
                        "usec" => out.push_str(&((start * 1e6).floor() as i64).to_string()),
                        "msec_frac" => out.push_str(&format!("{:03}", ((start.fract()) * 1e3).floor() as i64)),
                        "usec_frac" => out.push_str(&format!("{:06}", ((start.fract()) * 1e6).floor() as i64)),
                        _ => {
                            let t = local(start)?;
                            let mut s = String::new();
                            if write!(s, "{}", t.format(spec)).is_err() {
                                s = "-".into();
                            }
                            out.push_str(&s);
                        }
                    }
                }
                Item::User => out.push_str(&f.user().unwrap_or_else(|| "-".into())),
                Item::ReqHeader(h) => q.opt(&mut out, f.req_header(h), missing),
                Item::RespHeader(h) => q.opt(&mut out, f.resp_header(h), missing),
                Item::Vsl { tag, prefix, field } => q.opt(&mut out, vsl_value(tx, *tag, prefix.as_deref(), *field), missing),
                Item::Extended(x) => match x.as_str() {
                    "Varnish:vxid" => out.push_str(&tx.vxid.to_string()),
                    "Varnish:side" => out.push(if f.backend { 'b' } else { 'c' }),
                    "Varnish:time_firstbyte" => q.opt(&mut out, f.firstbyte, zero),
                    "Varnish:hitmiss" => out.push_str(f.handling().0),
                    "Varnish:handling" => out.push_str(f.handling().1),
                    _ => out.push('-'),
                },
            }
        }
        Some(out)
    }
}

/// Parse the inside of `%{VSL:...}x`: `Tag[:prefix][[field]]`.
fn vsl_item(spec: &str) -> Result<Item, String> {
    let bad = || format!("bad %{{VSL:{spec}}}x: use VSL:Tag, VSL:Tag:prefix, VSL:Tag[field] or VSL:Tag:prefix[field]");
    let (rest, field) = match spec.strip_suffix(']').and_then(|s| s.rsplit_once('[')) {
        Some((r, f)) => (r, Some(f.parse::<usize>().ok().filter(|n| (1..=255).contains(n)).ok_or_else(bad)?)),
        None => (spec, None),
    };
    let (tag, prefix) = match rest.split_once(':') {
        Some((t, p)) if !p.is_empty() => (t, Some(p.to_string())),
        Some(_) => return Err(bad()),
        None => (rest, None),
    };
    let tag = Tag::from_name(tag).ok_or_else(|| format!("unknown tag \"{tag}\" in %{{VSL:{spec}}}x"))?;
    Ok(Item::Vsl { tag, prefix, field })
}

/// The value `%{VSL:...}x` names in `tx`, if any.
fn vsl_value<'a>(tx: &'a Tx, tag: Tag, prefix: Option<&str>, field: Option<usize>) -> Option<&'a str> {
    let r = tx
        .records
        .iter()
        .find(|r| r.tag == tag && prefix.is_none_or(|p| text(r).split_once(':').is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(p))))?;
    let mut v = text(r);
    if prefix.is_some() {
        v = v.split_once(':').map_or(v, |(_, rest)| rest.trim_start());
    }
    match field {
        Some(n) => v.split_ascii_whitespace().nth(n - 1),
        None => Some(v),
    }
}

impl Format {
    /// Render the transaction as one JSON object (a JSON-lines record):
    /// each specifier of the format under a name of its own, numbers as
    /// numbers, what is unknown as null; literal text is left out.
    pub fn render_json(&self, tx: &Tx) -> Option<String> {
        use serde_json::{json, Value};
        let f = Fields::of(tx)?;
        let num = |v: Option<u64>| v.map_or(Value::Null, |n| json!(n));
        let s = |v: Option<&str>| v.map_or(Value::Null, |x| json!(x));
        let span = match (f.start, f.end) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let key = |prefix: &str, h: &str| format!("{prefix}{}", h.to_ascii_lowercase().replace('-', "_"));
        let mut m = serde_json::Map::new();
        for it in &self.items {
            let (k, v) = match it {
                Item::Lit(_) => continue,
                Item::Bytes => ("bytes".to_string(), num(f.acct(4))),
                Item::InBytes => ("bytes_in".into(), num(f.acct(2).or_else(|| f.pipe(2)))),
                Item::OutBytes => ("bytes_out".into(), num(f.acct(5).or_else(|| f.pipe(3)))),
                Item::Micros => ("duration_us".into(), span.map_or(Value::Null, |d| json!((d * 1e6) as i64))),
                Item::Seconds => ("duration_s".into(), span.map_or(Value::Null, |d| json!(d.floor() as i64))),
                Item::Unit(u) => (
                    format!(
                        "duration_{}",
                        match u {
                            1 => "s",
                            1000 => "ms",
                            _ => "us",
                        }
                    ),
                    span.map_or(Value::Null, |d| json!((d * *u as f64) as i64)),
                ),
                Item::Protocol => ("protocol".into(), json!(f.protocol.unwrap_or("HTTP/1.0"))),
                Item::Host => ("host".into(), s(f.client_ip)),
                Item::Ident => ("ident".into(), Value::Null),
                Item::Method => ("method".into(), s(f.method)),
                Item::Query => ("query".into(), s(f.url.and_then(|u| u.split_once('?')).map(|q| q.1))),
                Item::Url => ("url".into(), s(f.url.map(|u| u.split('?').next().unwrap_or(u)))),
                Item::Request => {
                    let host = match f.req_header("Host") {
                        Some(h) if h.starts_with("http://") => h.to_string(),
                        Some(h) => format!("http://{h}"),
                        None => "http://localhost".into(),
                    };
                    let r = format!("{} {host}{} {}", f.method.unwrap_or("-"), f.url.unwrap_or(""), f.protocol.unwrap_or("HTTP/1.0"));
                    ("request".into(), json!(r))
                }
                Item::Status => ("status".into(), num(f.status.and_then(|v| v.parse().ok()))),
                Item::Time => (
                    "time".into(),
                    f.start.and_then(local).map_or(Value::Null, |t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, false))),
                ),
                Item::Strftime(spec) => {
                    let v = f.start.and_then(|start| match spec.as_str() {
                        "sec" => Some(json!(start.floor() as i64)),
                        "msec" => Some(json!((start * 1e3).floor() as i64)),
                        "usec" => Some(json!((start * 1e6).floor() as i64)),
                        "msec_frac" => Some(json!(format!("{:03}", (start.fract() * 1e3).floor() as i64))),
                        "usec_frac" => Some(json!(format!("{:06}", (start.fract() * 1e6).floor() as i64))),
                        _ => {
                            let mut out = String::new();
                            write!(out, "{}", local(start)?.format(spec)).ok()?;
                            Some(json!(out))
                        }
                    });
                    (key("time_", spec), v.unwrap_or(Value::Null))
                }
                Item::User => ("user".into(), f.user().map_or(Value::Null, |u| json!(u))),
                Item::ReqHeader(h) => (key("req_", h), s(f.req_header(h))),
                Item::RespHeader(h) => (key("resp_", h), s(f.resp_header(h))),
                Item::Vsl { tag, prefix, field } => {
                    let mut k = format!("vsl_{}", tag.name().to_ascii_lowercase());
                    if let Some(p) = prefix {
                        k = format!("{k}_{}", p.to_ascii_lowercase().replace('-', "_"));
                    }
                    if let Some(n) = field {
                        k = format!("{k}_{n}");
                    }
                    (k, s(vsl_value(tx, *tag, prefix.as_deref(), *field)))
                }
                Item::Extended(x) => {
                    let name = x.strip_prefix("Varnish:").unwrap_or(x).to_string();
                    let v = match x.as_str() {
                        "Varnish:vxid" => json!(tx.vxid),
                        "Varnish:side" => json!(if f.backend { "b" } else { "c" }),
                        "Varnish:time_firstbyte" => f.firstbyte.and_then(|v| v.parse::<f64>().ok()).map_or(Value::Null, |v| json!(v)),
                        "Varnish:hitmiss" => json!(f.handling().0),
                        "Varnish:handling" => json!(f.handling().1),
                        _ => Value::Null,
                    };
                    (name, v)
                }
            };
            m.insert(k, v);
        }
        serde_json::to_string(&m).ok()
    }
}

fn local(t: f64) -> Option<chrono::DateTime<Local>> {
    Local.timestamp_opt(t.floor() as i64, ((t.fract()) * 1e9) as u32).single()
}

/// How values are escaped: varnishncsa's way, or for JSON (-j).
#[derive(Clone, Copy)]
struct Quote {
    json: bool,
}

impl Quote {
    fn escape(self, out: &mut String, s: &str) {
        if self.json {
            escape_json(out, s)
        } else {
            escape(out, s)
        }
    }

    /// A value, or `missing` when there is none.
    fn opt(self, out: &mut String, v: Option<&str>, missing: &str) {
        match v {
            Some(v) => self.escape(out, v),
            None => out.push_str(missing),
        }
    }
}

/// varnishncsa -j's escaping (Varnish's VSB_QUOTE_JSON): `"` and `\`
/// backslashed, `\n \r \t \v`, other control bytes as `\u00NN`; the
/// rest (UTF-8 included) as it is.
pub fn escape_json(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// varnishncsa's escaping: `"` and `\` backslashed, control characters
/// as `\n \r \t \v` or `\xNN`, bytes outside printable ASCII as `\xNN`.
pub fn escape(out: &mut String, s: &str) {
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x0b => out.push_str("\\v"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

/// The values of one client transaction that formats use.
struct Fields<'a> {
    /// A backend transaction (-b): Bereq*/Beresp* tags instead of Req*/Resp*.
    backend: bool,
    tx: &'a Tx,
    client_ip: Option<&'a str>,
    method: Option<&'a str>,
    url: Option<&'a str>,
    protocol: Option<&'a str>,
    status: Option<&'a str>,
    start: Option<f64>,
    end: Option<f64>,
    firstbyte: Option<&'a str>,
    acct: Option<&'a str>,
    /// A pipe's byte counts: header in, bereq header, piped in, piped out.
    pipe_acct: Option<&'a str>,
}

fn text(r: &common::log::group::OwnedRecord) -> &str {
    std::str::from_utf8(&r.payload).unwrap_or("-")
}

impl<'a> Fields<'a> {
    fn of(tx: &'a Tx) -> Option<Fields<'a>> {
        use common::log::group::TxKind;
        let backend = match tx.kind {
            TxKind::Request if tx.is_client() => false,
            TxKind::BeReq => true,
            _ => return None,
        };
        let mut f = Fields {
            tx,
            backend,
            client_ip: None,
            method: None,
            url: None,
            protocol: None,
            status: None,
            start: None,
            end: None,
            firstbyte: None,
            acct: None,
            pipe_acct: None,
        };
        for r in &tx.records {
            let t = text(r);
            match (r.tag, backend) {
                (Tag::HttpGarbage, _) => return None,
                (Tag::VclReturn, false) if t == "restart" => return None,
                (Tag::ReqStart, false) => f.client_ip = t.split(' ').next(),
                // A backend line's host is the backend's address.
                (Tag::BackendOpen, true) => f.client_ip = t.split(' ').nth(2),
                (Tag::ReqMethod, false) | (Tag::BereqMethod, true) => f.method = f.method.or(Some(t)),
                (Tag::ReqUrl, false) | (Tag::BereqUrl, true) => f.url = f.url.or(Some(t)),
                (Tag::ReqProtocol, false) | (Tag::BereqProtocol, true) => f.protocol = f.protocol.or(Some(t)),
                (Tag::RespStatus, false) | (Tag::BerespStatus, true) => f.status = Some(t),
                (Tag::ReqAcct, false) | (Tag::BereqAcct, true) => f.acct = Some(t),
                (Tag::PipeAcct, false) => f.pipe_acct = Some(t),
                (Tag::Timestamp, _) => {
                    let (label, rest) = t.split_once(": ").unwrap_or(("", ""));
                    let mut fields = rest.split(' ');
                    let abs = fields.next().and_then(|v| v.parse::<f64>().ok());
                    match (label, backend) {
                        ("Start", _) => f.start = abs,
                        ("Resp" | "PipeSess", false) | ("BerespBody" | "Retry" | "Error", true) => f.end = abs,
                        ("Process" | "Pipe", false) | ("Beresp", true) => f.firstbyte = f.firstbyte.or(fields.next()),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        Some(f)
    }

    fn acct(&self, i: usize) -> Option<u64> {
        self.acct?.split(' ').nth(i)?.parse().ok()
    }

    fn pipe(&self, i: usize) -> Option<u64> {
        self.pipe_acct?.split(' ').nth(i)?.parse().ok()
    }

    fn header(&self, tag: Tag, name: &str) -> Option<&'a str> {
        let tx: &'a Tx = self.tx;
        tx.records.iter().rev().filter(|r| r.tag == tag).map(text).find_map(|t| {
            let (n, v) = t.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim_start())
        })
    }
    fn req_header(&self, name: &str) -> Option<&'a str> {
        self.header(if self.backend { Tag::BereqHeader } else { Tag::ReqHeader }, name)
    }
    fn resp_header(&self, name: &str) -> Option<&'a str> {
        self.header(if self.backend { Tag::BerespHeader } else { Tag::RespHeader }, name)
    }

    /// `%u`: the user of an `Authorization: Basic` header.
    fn user(&self) -> Option<String> {
        let v = self.req_header("Authorization")?;
        let (scheme, cred) = v.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let raw = base64_decode(cred.trim())?;
        let raw = &raw[..raw.len().min(128)];
        let user = raw.split(|&b| b == b':').next()?;
        let mut out = String::new();
        escape(&mut out, &String::from_utf8_lossy(user));
        Some(out)
    }

    /// (hitmiss, handling) from the VCL_call records.
    fn handling(&self) -> (&'static str, &'static str) {
        let mut res = ("-", "-");
        if self.backend {
            return res;
        }
        for r in &self.tx.records {
            match (r.tag, text(r)) {
                (Tag::VclCall, "HIT") => res = ("hit", "hit"),
                (Tag::VclCall, "MISS") => res = ("miss", "miss"),
                (Tag::VclCall, "PASS") => res = ("miss", "pass"),
                (Tag::VclCall, "SYNTH") => res = ("miss", "synth"),
                (Tag::VclReturn, "pipe") => res = ("miss", "pipe"),
                _ => {}
            }
        }
        res
    }
}

/// Standard base64 (RFC 4648) with optional padding; None on bad input.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().take_while(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = acc << 6 | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::log::group::{Grouper, Grouping};
    use common::log::vsl::{Batch, Records, Side};

    fn tx(extra: &[(Tag, &str)]) -> Tx {
        let mut b = Batch::new();
        let v = 7;
        b.rec(Tag::Begin, Side::Client, v, b"req 6 rxreq");
        b.rec(Tag::Timestamp, Side::Client, v, b"Start: 1700000000.250000 0.000000 0.000000");
        b.rec(Tag::ReqStart, Side::Client, v, b"127.0.0.1 5555 a0");
        b.rec(Tag::ReqMethod, Side::Client, v, b"GET");
        b.rec(Tag::ReqUrl, Side::Client, v, b"/a/b?x=1");
        b.rec(Tag::ReqProtocol, Side::Client, v, b"HTTP/1.1");
        b.rec(Tag::ReqHeader, Side::Client, v, b"Host: example.com");
        b.rec(Tag::ReqHeader, Side::Client, v, b"User-Agent: curl/8 \"quoted\"");
        for (t, p) in extra {
            b.rec(*t, Side::Client, v, p.as_bytes());
        }
        b.rec(Tag::RespStatus, Side::Client, v, b"200");
        b.rec(Tag::Timestamp, Side::Client, v, b"Resp: 1700000000.251500 0.001500 0.000100");
        b.rec(Tag::ReqAcct, Side::Client, v, b"78 0 78 250 1024 1274");
        b.rec(Tag::End, Side::Client, v, b"");
        let mut g = Grouper::new(Grouping::Vxid);
        let mut out = Vec::new();
        let now = std::time::Instant::now();
        for r in Records::new(b.as_bytes()) {
            g.feed(&r, now, &mut out);
        }
        out.pop().unwrap().txs.pop().unwrap().1
    }

    #[test]
    fn default_format_fields() {
        let f = Format::parse(r#"%h %l %u "%r" %s %b "%{Referer}i" "%{User-agent}i" %D %I %O %q %U %H %m %{sec}t %{msec_frac}t"#).unwrap();
        let line = f.render(&tx(&[])).unwrap();
        assert_eq!(
            line,
            // %D: (1700000000.2515 - 1700000000.25) * 1e6 is 1499.99... in
            // binary; varnishncsa truncates it to 1499, and so do we.
            r#"127.0.0.1 - - "GET http://example.com/a/b?x=1 HTTP/1.1" 200 1024 "-" "curl/8 \"quoted\"" 1499 78 1274 ?x=1 /a/b HTTP/1.1 GET 1700000000 250"#
        );
    }

    #[test]
    fn basic_auth_user_and_garbage() {
        let f = Format::parse("%u").unwrap();
        // "alice:secret"
        assert_eq!(f.render(&tx(&[(Tag::ReqHeader, "Authorization: Basic YWxpY2U6c2VjcmV0")])).unwrap(), "alice");
        assert_eq!(f.render(&tx(&[(Tag::ReqHeader, "Authorization: Bearer x")])).unwrap(), "-");
        assert!(f.render(&tx(&[(Tag::HttpGarbage, "junk")])).is_none());
    }

    #[test]
    fn json_values_as_varnishncsa_j() {
        let f = Format::parse(r#"{"ua": "%{User-agent}i", "x": "%{X}i", "u": "%{U}i", "s": %s, "b": %{Referer}i}"#).unwrap();
        let t = tx(&[(Tag::ReqHeader, "X: a\tb\u{1}"), (Tag::ReqHeader, "U: \u{2203}")]);
        let line = f.render_quoted(&t, true).unwrap();
        assert_eq!(line, r#"{"ua": "curl/8 \"quoted\"", "x": "a\tb\u0001", "u": "∃", "s": 200, "b": }"#);
        assert_eq!(Format::parse("%{U}i").unwrap().render(&t).unwrap(), r"\xe2\x88\x83");
    }

    #[test]
    fn time_format_and_errors() {
        let f = Format::parse("%t").unwrap();
        let line = f.render(&tx(&[])).unwrap();
        assert!(line.starts_with('[') && line.ends_with(']') && line.contains("/Nov/2023:"), "{line}");
        assert!(Format::parse("%Z").is_err());
        assert!(Format::parse("%{x").is_err());
        assert!(Format::parse("%{s}T").is_ok());
        assert!(Format::parse("%{fortnights}T").is_err());
    }
}
