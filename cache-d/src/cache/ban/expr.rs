//! Bans: Varnish's ban expressions (`req.url ~ ^/news && obj.http.x == 1`),
//! parsed once, tested lazily against objects at lookup and by the lurker.
//! Sans-io: times come in as arguments.

use regex::Regex;

use crate::cache::object::ObjRef;

/// What a condition looks at.
#[derive(Clone, Debug, PartialEq)]
pub enum Field {
    ReqUrl,
    ReqHttp(String),
    ObjStatus,
    ObjHttp(String),
    ObjTtl,
    ObjAge,
    ObjGrace,
    ObjKeep,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Match,
    NoMatch,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn text(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Match => "~",
            Op::NoMatch => "!~",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

#[derive(Clone, Debug)]
enum Arg {
    Str(String),
    Re(Regex),
    Dur(f64),
}

#[derive(Clone, Debug)]
pub struct Cond {
    pub field: Field,
    pub op: Op,
    arg: Arg,
}

/// A syntax error: the message and which argument (1-based) is at fault.
/// Shown as the message alone, as Varnish words it (the CLI's answer,
/// std.ban_error()).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BanError {
    pub arg: usize,
    pub msg: String,
}

impl std::fmt::Display for BanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

fn field(s: &str) -> Option<Field> {
    Some(match s {
        "req.url" => Field::ReqUrl,
        "obj.status" => Field::ObjStatus,
        "obj.ttl" => Field::ObjTtl,
        "obj.age" => Field::ObjAge,
        "obj.grace" => Field::ObjGrace,
        "obj.keep" => Field::ObjKeep,
        _ => {
            if let Some(h) = s.strip_prefix("req.http.").filter(|h| !h.is_empty()) {
                Field::ReqHttp(h.to_string())
            } else if let Some(h) = s.strip_prefix("obj.http.").filter(|h| !h.is_empty()) {
                Field::ObjHttp(h.to_string())
            } else {
                return None;
            }
        }
    })
}

fn is_duration(f: &Field) -> bool {
    matches!(f, Field::ObjTtl | Field::ObjAge | Field::ObjGrace | Field::ObjKeep)
}

/// `<n.nn>(ms|s|m|h|d|w|y)` in seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let unit_at = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(unit_at);
    let n: f64 = num.parse().ok().filter(|n: &f64| n.is_finite())?;
    let mult = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "w" => 604800.0,
        "y" => 31536000.0,
        _ => return None,
    };
    Some(n * mult)
}

/// A duration as Varnish lists it: the largest unit that divides it.
pub fn format_duration(secs: f64) -> String {
    for (unit, m) in [("y", 31536000.0), ("w", 604800.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)] {
        if secs != 0.0 && (secs / m).fract() == 0.0 && secs.abs() >= m {
            return format!("{}{unit}", secs / m);
        }
    }
    if secs == 0.0 {
        return "0s".into();
    }
    format!("{}ms", (secs * 1000.0).round())
}

/// Parse the arguments of `ban` into conditions and the normalized spec.
pub fn parse(args: &[String]) -> Result<(Vec<Cond>, String), BanError> {
    let err = |arg: usize, msg: String| BanError { arg, msg };
    if args.len() < 3 {
        return Err(err(args.len() + 1, "Too few arguments: a ban is <field> <operator> <argument> [&& ...]".into()));
    }
    let mut conds = Vec::new();
    let mut spec = Vec::new();
    let mut i = 0;
    loop {
        if i + 3 > args.len() {
            return Err(err(i + 1, "Expected a <field> <operator> <argument> triplet after &&".into()));
        }
        let f = field(&args[i]).ok_or_else(|| err(i + 1, format!("Unknown or unsupported field \"{}\"", args[i])))?;
        let dur = is_duration(&f);
        let op = match (args[i + 1].as_str(), dur) {
            ("==", _) => Op::Eq,
            ("!=", _) => Op::Ne,
            ("~", false) => Op::Match,
            ("!~", false) => Op::NoMatch,
            ("<", true) => Op::Lt,
            ("<=", true) => Op::Le,
            (">", true) => Op::Gt,
            (">=", true) => Op::Ge,
            (o, false) => return Err(err(i + 2, format!("expected conditional (==, !=, ~ or !~) got \"{o}\""))),
            (o, true) => return Err(err(i + 2, format!("expected conditional (==, !=, >, >=, < or <=) got \"{o}\""))),
        };
        let raw = &args[i + 2];
        let (arg, shown) = if dur {
            let d = parse_duration(raw).ok_or_else(|| err(i + 3, format!("expected duration <n.nn>[ms|s|m|h|d|w|y] got \"{raw}\"")))?;
            (Arg::Dur(d), format_duration(d))
        } else if matches!(op, Op::Match | Op::NoMatch) {
            let re = Regex::new(raw).map_err(|e| err(i + 3, format!("Regex compile error: {e}")))?;
            (Arg::Re(re), raw.clone())
        } else {
            (Arg::Str(raw.clone()), raw.clone())
        };
        spec.push(format!("{} {} {shown}", args[i], op.text()));
        conds.push(Cond { field: f, op, arg });
        i += 3;
        if i == args.len() {
            break;
        }
        if args[i] != "&&" {
            return Err(err(i + 1, format!("Found \"{}\" expected &&", args[i])));
        }
        i += 1;
    }
    Ok((conds, spec.join(" && ")))
}

/// The arguments of a ban from VCL (ban(), std.ban()), by Varnish's
/// VRT_ban_string rules and in its words: split at white space only
/// (quotes and backslashes are kept as they are: VAV_Parse with
/// ARGV_NOESC), each triplet checked (as BAN_AddTest) before the next.
pub fn vcl_args(spec: &str) -> Result<Vec<String>, String> {
    // C's isspace in the "C" locale.
    let av: Vec<&str> = spec.split([' ', '\t', '\n', '\x0b', '\x0c', '\r']).filter(|a| !a.is_empty()).collect();
    let mut i = 0;
    loop {
        let triplet = match av.get(i..i + 3) {
            Some(t) => t,
            None if av.len() <= i => return Err("No ban conditions found.".into()),
            None if av.len() == i + 1 => return Err("Expected comparison operator.".into()),
            None => return Err("Expected second operand.".into()),
        };
        parse(&triplet.iter().map(|a| a.to_string()).collect::<Vec<_>>()).map_err(|e| e.msg)?;
        match av.get(i + 3) {
            None => return Ok(av.iter().map(|a| a.to_string()).collect()),
            Some(&"&&") => i += 4,
            Some(other) => return Err(format!("Expected && between conditions, found \"{other}\"")),
        }
    }
}

/// Does any condition look at the request (so the lurker cannot test it)?
pub fn has_req(conds: &[Cond]) -> bool {
    conds.iter().any(|c| matches!(c.field, Field::ReqUrl | Field::ReqHttp(_)))
}

/// What a test can see of the request (None for the lurker).
pub struct ReqView<'a> {
    pub url: &'a [u8],
    pub header: &'a dyn Fn(&str) -> Option<Vec<u8>>,
}

/// Test all conditions (they are ANDed) against `obj` at `ban_time`.
pub fn matches(conds: &[Cond], oc: &ObjRef, req: Option<&ReqView<'_>>, ban_time: f64) -> bool {
    let obj = &oc.obj;
    conds.iter().all(|c| {
        let value: Option<Vec<u8>> = match &c.field {
            Field::ReqUrl => match req {
                Some(r) => Some(r.url.to_vec()),
                None => return false,
            },
            Field::ReqHttp(h) => match req {
                Some(r) => (r.header)(h),
                None => return false,
            },
            Field::ObjStatus => Some(obj.status.to_string().into_bytes()),
            Field::ObjHttp(h) => oc.header_ref(h).map(|v| v.to_vec()),
            Field::ObjTtl => return num(c, obj.life().ttl_left(ban_time)),
            Field::ObjAge => return num(c, ban_time - obj.life().t_origin),
            Field::ObjGrace => return num(c, obj.life().grace),
            Field::ObjKeep => return num(c, obj.life().keep),
        };
        match (&c.arg, value) {
            (Arg::Str(s), Some(v)) => (v == s.as_bytes()) == (c.op == Op::Eq),
            (Arg::Re(re), Some(v)) => re.is_match(&String::from_utf8_lossy(&v)) == (c.op == Op::Match),
            // A missing header: == and ~ are false, != and !~ true.
            (_, None) => matches!(c.op, Op::Ne | Op::NoMatch),
            (Arg::Dur(_), Some(_)) => false,
        }
    })
}

fn num(c: &Cond, x: f64) -> bool {
    let Arg::Dur(d) = c.arg else { return false };
    match c.op {
        Op::Eq => x == d,
        Op::Ne => x != d,
        Op::Lt => x < d,
        Op::Le => x <= d,
        Op::Gt => x > d,
        Op::Ge => x >= d,
        Op::Match | Op::NoMatch => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Vec<String> {
        common::adm::tokenize(s).unwrap()
    }

    #[test]
    fn parses_and_normalizes() {
        let (c, spec) = parse(&a("req.url ~ ^/news && obj.ttl > 7d && obj.http.X-Tag == \"a b\"")).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(spec, "req.url ~ ^/news && obj.ttl > 1w && obj.http.X-Tag == a b");
        assert!(has_req(&c));
        assert!(!has_req(&parse(&a("obj.status == 200")).unwrap().0));
        assert_eq!(format_duration(90.0), "90s");
        assert_eq!(format_duration(0.5), "500ms");
        assert_eq!(parse_duration("1.5h"), Some(5400.0));
    }

    #[test]
    fn errors_name_the_argument() {
        let e = |s: &str| parse(&a(s)).unwrap_err();
        assert_eq!(e("req.foo == 1"), BanError { arg: 1, msg: "Unknown or unsupported field \"req.foo\"".into() });
        assert_eq!(e("req.url < 1").arg, 2);
        assert_eq!(e("obj.ttl ~ 1").arg, 2);
        assert!(e("obj.ttl > 3600").msg.contains("expected duration <n.nn>[ms|s|m|h|d|w|y] got \"3600\""));
        assert_eq!(e("req.url ~ /a || req.url ~ /b"), BanError { arg: 4, msg: "Found \"||\" expected &&".into() });
        assert_eq!(e("req.url ~ /a &&").arg, 5);
        assert!(e("req.url ~ (").msg.starts_with("Regex compile error"));
        assert_eq!(e("req.url").arg, 2);
    }

    #[test]
    fn vcl_bans_split_at_white_space_only_and_say_so_as_varnish() {
        let e = |s: &str| vcl_args(s).unwrap_err();
        assert_eq!(
            vcl_args("req.url ~ \\.css$ && obj.http.x == \"a").unwrap(),
            ["req.url", "~", "\\.css$", "&&", "obj.http.x", "==", "\"a"]
        );
        assert_eq!(e(" \t"), "No ban conditions found.");
        assert_eq!(e("req.url ~ /a &&"), "No ban conditions found.");
        assert_eq!(e("req.url"), "Expected comparison operator.");
        assert_eq!(e("req.url ~"), "Expected second operand.");
        assert_eq!(e("req.url ~ /a || req.url ~ /b"), "Expected && between conditions, found \"||\"");
        // Each triplet is tested before what follows it is looked at.
        assert_eq!(e("req.foo ~ /a ||"), "Unknown or unsupported field \"req.foo\"");
        assert_eq!(e("req.url ~ /a && obj.ttl > 3600"), "expected duration <n.nn>[ms|s|m|h|d|w|y] got \"3600\"");
    }
}
