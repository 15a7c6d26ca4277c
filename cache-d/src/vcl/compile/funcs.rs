//! Functions: the built-in ones, vmod_std's, and the directors' methods.

use super::decls::ObjKind;
use super::program::*;
use super::re::regex_arg;
use super::vmod::one_arg;
use crate::vcl::ast::*;
use crate::vcl::compile::vars::*;
use crate::vcl::diag::{err, unsupported, VclError};
use crate::vcl::model::*;
use bytes::Bytes;
use common::log::vsl::Tag;

/// std.querysort: the query string's parameters in sorted order (so
/// equivalent URLs hash alike); empty parameters are dropped.
pub fn querysort(url: &str) -> String {
    let Some((path, query)) = url.split_once('?') else { return url.to_string() };
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    if params.is_empty() {
        // As Varnish: "/a?&" sorts to "/a?".
        return format!("{path}?");
    }
    params.sort_unstable();
    format!("{path}?{}", params.join("&"))
}

pub(super) fn only_in(name: &str, allowed: u32, pos: Pos, sc: &Scope<'_>) -> Result<(), VclError> {
    match sc.ctx.iter().find(|s| allowed & (1 << **s as u32) == 0) {
        Some(s) => err(format!("{name}() cannot be used in {} (it can be in: {})", s.name(), subs_in(allowed)), pos),
        None => Ok(()),
    }
}

pub use crate::vcl::check::VMODS;

/// The functions [`call`] knows (documented in cache-vcl(7)).
pub const FUNCTIONS: &[&str] = &[
    "regsub",
    "regsuball",
    "hash_data",
    "synthetic",
    "ban",
    "std.ban",
    "std.ban_error",
    "std.syntax",
    "std.late_100_continue",
    "std.cache_req_body",
    "std.log",
    "std.syslog",
    "std.tolower",
    "std.toupper",
    "std.querysort",
    "std.integer",
    "std.real",
    "std.duration",
    "std.time",
    "std.ip",
    "std.port",
    "std.healthy",
    "std.collect",
    "std.random",
    "std.real2time",
    "std.real2integer",
    "std.time2real",
    "std.time2integer",
    "std.fileread",
    "std.blobread",
    "std.rollback",
    "blob.encode",
    "directors.lookup",
    "tls.is_tls",
    "tls.version",
    "tls.cipher",
    "tls.authority",
    "tls.alpn",
    "xkey.purge",
    "xkey.softpurge",
    "purge.hard",
    "purge.soft",
    "var.set",
    "var.get",
    "var.global_set",
    "var.global_get",
    "var.set_int",
    "var.get_int",
    "var.set_string",
    "var.get_string",
    "var.set_real",
    "var.get_real",
    "var.set_duration",
    "var.get_duration",
    "var.set_ip",
    "var.get_ip",
    "var.set_backend",
    "var.get_backend",
    "var.clear",
    "str.count",
    "str.startswith",
    "str.endswith",
    "str.contains",
    "str.take",
    "str.reverse",
    "str.split",
    "header.append",
    "header.copy",
    "header.get",
    "header.remove",
    "header.regsub",
    "header.dyn",
    "cookie.clean",
    "cookie.delete",
    "cookie.filter",
    "cookie.filter_re",
    "cookie.keep",
    "cookie.keep_re",
    "cookie.format_date",
    "cookie.format_rfc1123",
    "cookie.get",
    "cookie.get_re",
    "cookie.get_string",
    "cookie.isset",
    "cookie.parse",
    "cookie.set",
    "vsthrottle.is_denied",
    "vsthrottle.return_token",
    "vsthrottle.remaining",
    "vsthrottle.blocked",
    "bodyaccess.hash_req_body",
    "bodyaccess.len_req_body",
    "bodyaccess.rematch_req_body",
    "bodyaccess.log_req_body",
    "saintmode.blacklist",
    "saintmode.status",
    "tcp.dump_info",
    "tcp.get_estimated_rtt",
    "tcp.congestion_algorithm",
    "tcp.set_socket_pace",
    "proxy.alpn",
    "proxy.authority",
    "proxy.is_ssl",
    "proxy.client_has_cert_sess",
    "proxy.client_has_cert_conn",
    "proxy.ssl_verify_result",
    "proxy.ssl_version",
    "proxy.client_cert_cn",
    "proxy.ssl_cipher",
    "proxy.cert_sign",
    "proxy.cert_key",
    "unix.user",
    "unix.group",
    "unix.uid",
    "unix.gid",
    "std.round",
    "std.strstr",
    "std.fnmatch",
    "std.file_exists",
    "std.getenv",
    "std.strftime",
    "std.bytes",
    "std.timestamp",
    "std.set_ip_tos",
    "blob.decode",
    "blob.transcode",
    "blob.equal",
    "blob.length",
    "blob.sub",
    "blob.same",
];

/// Every variable a program can name (headers as `req.http.`), for the
/// documentation's test.
pub fn variables() -> impl Iterator<Item = &'static str> {
    ACCESS.iter().map(|(n, _, _)| *n)
}

/// A function call: the built-in functions and vmod_std's.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    // Conversions with an optional fallback: (value[, fallback]); without
    // one, a value that does not convert fails the task (vmod_std).
    let with_fallback = |parse: fn(&str) -> Option<Val>| -> Result<ExprFn, VclError> {
        let n = if args.len() == 1 { 1 } else { 2 };
        let mut a = one_arg(args, name, n, pos, sc)?.into_iter();
        let (x, fb) = (a.next().expect("1 arg"), a.next());
        let what = format!("{name}: conversion failed");
        Ok(Box::new(move |t, c| match (parse(x(t, c).text().trim()), &fb) {
            (Some(v), _) => v,
            (None, Some(fb)) => fb(t, c),
            (None, None) => {
                fail(t, what.clone());
                Val::None
            }
        }))
    };
    if let Some(f) = super::var::call(name, args, names, pos, sc)
        .or_else(|| super::strmod::call(name, args, names, pos, sc))
        .or_else(|| super::header::call(name, args, names, pos, sc))
    {
        return f;
    }
    if let Some((obj, method)) = name.split_once('.') {
        match sc.objects.get(obj) {
            Some(ObjKind::Director(crate::backend::director::Kind::Shard)) if method == "backend" => {
                return super::shardparam::shard_backend(obj, args, names, pos, sc);
            }
            Some(ObjKind::Director(crate::backend::director::Kind::Shard)) if method == "associate" => {
                return super::shardparam::associate(obj, args, sc);
            }
            Some(ObjKind::Director(crate::backend::director::Kind::Shard)) if matches!(method, "add_backend" | "remove_backend") => {
                return super::shardparam::members(obj, method, args, names, pos, sc);
            }
            Some(ObjKind::Director(kind)) => return director_call(obj, *kind, method, args, pos, sc),
            Some(ObjKind::Dynamic) => return super::dynamic::director_call(obj, method, args, names, pos, sc),
            Some(ObjKind::Resolver) => return super::dynamic::resolver_call(obj, method, args, pos, sc),
            Some(ObjKind::Saintmode) => return super::saintmode::method(obj, method, args, names, pos, sc),
            Some(ObjKind::Blob) => return super::blob::object_call(obj, method, args, names, pos),
            Some(ObjKind::ShardParam) => return super::shardparam::method(obj, method, args, names, pos, sc),
            Some(ObjKind::Accept) => return super::accept::method(obj, method, args, names, pos, sc),
            None => {}
        }
    }
    if let Some(f) = super::cookie::call(name, args, names, pos, sc) {
        return f;
    }
    if let Some(f) = super::vsthrottle::call(name, args, names, pos, sc) {
        return f;
    }
    if let Some(f) = super::bodyaccess::call(name, args, names, pos, sc) {
        return f;
    }
    if let Some(f) = super::saintmode::call(name, args, names, pos, sc) {
        return f;
    }
    if let Some(f) = super::tcp::call(name, args, names, pos, sc) {
        return f;
    }
    if let Some(f) = super::proxy::call(name, args, pos, sc)
        .or_else(|| super::unixmod::call(name, args, pos, sc))
        .or_else(|| super::stdx::call(name, args, names, pos, sc))
        .or_else(|| super::blob::call(name, args, names, pos, sc))
    {
        return f;
    }
    if let Some(f) = super::vmod::call(name, args, names, pos, sc) {
        return f;
    }
    Ok(match name {
        "regsub" | "regsuball" => {
            if args.len() != 3 {
                return err(format!("{name}() takes 3 arguments"), pos);
            }
            let re = regex_arg(&args[1])?;
            let all = name == "regsuball";
            let (src, sub) = (sc.expr(&args[0])?, sc.expr(&args[2])?);
            Box::new(move |t, c| {
                let s = src(t, c).text();
                Val::Str(re.replace(&s, &sub(t, c).text(), all).into_owned())
            })
        }
        "hash_data" => hash_data(args, pos, sc)?,
        "synthetic" => {
            only_in(name, mask(&[Sub::Synth, Sub::BackendError]), pos, sc)?;
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                // An unset value alone prints as Varnish's printf does NULL.
                let v = match x(t, c) {
                    Val::None => "(null)".to_string(),
                    v => v.text(),
                };
                if let Some(b) = t.body.as_deref_mut() {
                    b.extend_from_slice(v.as_bytes());
                }
                Val::None
            })
        }
        "ban" | "std.ban" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            let returns = name == "std.ban";
            Box::new(move |t, c| {
                // An unset string is VRT_ban_string's NULL.
                let done = match x(t, c) {
                    Val::None => Err("Null argument".to_string()),
                    spec => t.env.ban(&spec.text()),
                };
                // A bad ban is logged and the subroutine goes on; only
                // std.ban() leaves what std.ban_error() reads.
                if let Err(e) = &done {
                    t.record(Tag::VclError, format!("ban(): {e}").as_bytes());
                }
                match (done, returns) {
                    (_, false) => Val::None,
                    (Ok(()), true) => {
                        set_ban_error(t, String::new());
                        Val::Bool(true)
                    }
                    (Err(e), true) => {
                        set_ban_error(t, e);
                        Val::Bool(false)
                    }
                }
            })
        }
        "std.ban_error" => {
            one_arg(args, name, 0, pos, sc)?;
            Box::new(|t, _| {
                let e = t.req.as_deref().map(|r| &r.ban_error).or(t.bereq.as_deref().map(|r| &r.ban_error));
                Val::Str(e.cloned().unwrap_or_default())
            })
        }
        "std.cache_req_body" => {
            only_in(name, mask(&[Sub::Recv]), pos, sc)?;
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let limit = x(t, c).num().unwrap_or(0.0);
                let Some(r) = t.req.as_deref_mut() else { return Val::Bool(false) };
                // The body is read after vcl_recv, at most `limit` bytes:
                // a Content-Length over it is refused now (false), a
                // chunked one when it passes the limit (the connection
                // closes either way, as in Varnish).
                let fits = match r.body_size {
                    None => true,
                    Some(Some(n)) => (n as f64) <= limit,
                    Some(None) => true,
                };
                if r.body_size.is_some() {
                    r.cache_body = Some(limit.max(0.0) as u64);
                }
                Val::Bool(fits)
            })
        }
        "std.late_100_continue" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let late = x(t, c).truthy();
                if let Some(r) = t.req.as_deref_mut() {
                    r.late_100_continue = late;
                }
                Val::None
            })
        }
        "std.syntax" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            let version = sc.version;
            Box::new(move |t, c| Val::Bool(x(t, c).num().is_some_and(|want| version >= want - 1e-9)))
        }
        "std.log" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let v = x(t, c).text();
                t.record(Tag::VclLog, v.as_bytes());
                Val::None
            })
        }
        "std.syslog" => {
            let mut a = one_arg(args, name, 2, pos, sc)?.into_iter();
            let (prio, msg) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| {
                let p = prio(t, c).num().unwrap_or(6.0) as i32;
                let m = msg(t, c).text().replace('\0', " ");
                if let Ok(cs) = std::ffi::CString::new(m) {
                    // SAFETY: both strings are NUL-terminated; "%s" takes one.
                    unsafe { libc::syslog(p, c"%s".as_ptr(), cs.as_ptr()) };
                }
                Val::None
            })
        }
        "std.tolower" | "std.toupper" => {
            let up = name == "std.toupper";
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let s = x(t, c).text();
                Val::Str(if up { s.to_uppercase() } else { s.to_lowercase() })
            })
        }
        "std.querysort" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| Val::Str(querysort(&x(t, c).text())))
        }
        "std.integer" => with_fallback(|s| s.parse::<i64>().ok().map(Val::Int))?,
        "std.real" => with_fallback(|s| s.parse::<f64>().ok().filter(|f| f.is_finite()).map(Val::Real))?,
        "std.duration" => with_fallback(|s| crate::cache::ban::expr::parse_duration(s).map(Val::Dur))?,
        "std.time" => {
            with_fallback(|s| common::httpdate::parse(s).or_else(|| s.parse::<f64>().ok().filter(|f| f.is_finite())).map(Val::Time))?
        }
        "std.healthy" => {
            let x = one_arg(args, name, 1, pos, sc)?.remove(0);
            Box::new(move |t, c| {
                let b = x(t, c);
                let name = match &b {
                    Val::Backend(n) => Some(n.as_str()),
                    _ => None,
                };
                match name {
                    Some(n)
                        if c.runtime.get().is_some_and(|r| r.contains_key(n))
                            || c.directors().contains_key(n)
                            || c.domain(n).is_some()
                            || c.saint(n).is_some() =>
                    {
                        Val::Bool(c.usable(n, 0))
                    }
                    _ => Val::Bool(t.env.healthy(name)),
                }
            })
        }
        // vmod tls (Varnish Enterprise's names): the client connection's TLS.
        // varnish-modules' xkey: purge (or make stale) by surrogate key.
        "xkey.purge" | "xkey.softpurge" => {
            let keys = one_arg(args, name, 1, pos, sc)?.remove(0);
            let soft = name == "xkey.softpurge";
            Box::new(move |t, c| {
                let keys = keys(t, c).text();
                let n = t.env.xkey_purge(&keys, soft);
                t.record(
                    Tag::VclLog,
                    format!("{}: {n} object(s) for \"{keys}\"", if soft { "xkey.softpurge" } else { "xkey.purge" }).as_bytes(),
                );
                Val::Int(n)
            })
        }
        // Varnish 7's vmod_purge: the current object's variants.
        "purge.hard" | "purge.soft" => purge_call(name, args, names, pos, sc)?,
        "tls.is_tls" => {
            one_arg(args, name, 0, pos, sc)?;
            Box::new(|t, _| Val::Bool(t.tls.is_some()))
        }
        "tls.version" | "tls.cipher" | "tls.authority" | "tls.alpn" => {
            one_arg(args, name, 0, pos, sc)?;
            let field: fn(&crate::vcl::model::TlsInfo) -> Option<String> = match name {
                "tls.version" => |i| Some(i.version.to_string()),
                "tls.cipher" => |i| Some(i.cipher.clone()),
                "tls.authority" => |i| i.sni.clone(),
                _ => |i| i.alpn.clone(),
            };
            Box::new(move |t, _| t.tls.as_deref().and_then(field).map_or(Val::None, Val::Str))
        }
        "std.collect" => {
            if args.is_empty() || args.len() > 2 {
                return err("std.collect() takes a header and an optional separator", pos);
            }
            let Expr::Name(h, hpos) = &args[0] else { return err("std.collect() takes a header (req.http.X, resp.http.X...)", pos) };
            access(h, true, *hpos, sc)?;
            let Some((w, hname)) = header_prefix(h) else { return err("std.collect() takes a header", *hpos) };
            let hname = hname.to_string();
            let sep = match args.get(1) {
                Some(e) => Some(sc.expr(e)?),
                None => None,
            };
            Box::new(move |t, c| {
                let sep = sep.as_ref().map_or_else(|| ", ".to_string(), |s| s(t, c).text());
                if let Some(hs) = headers_mut(t, w) {
                    let vals: Vec<Bytes> =
                        hs.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(hname.as_bytes())).map(|(_, v)| v.clone()).collect();
                    if vals.len() > 1 {
                        let joined = vals.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>().join(&sep);
                        hs.set(&hname, Bytes::from(joined));
                    }
                }
                Val::None
            })
        }
        _ => return unsupported(&format!("Function {name}()"), pos),
    })
}

/// `obj.add_backend(backend[, weight])`, in vcl_init.
fn add_backend(obj: String, a: Vec<ExprFn>) -> ExprFn {
    let mut it = a.into_iter();
    let (b, w) = (it.next().expect("1 arg"), it.next());
    Box::new(move |t, c| {
        let (member, weight) = (b(t, c), w.as_ref().map_or(1.0, |w| w(t, c).num().unwrap_or(1.0)));
        match (c.directors().get(&obj).cloned(), member) {
            (Some(d), Val::Backend(m)) => d.add(&m, weight),
            // A NULL backend (a hash director's empty pick) fails
            // vcl_init, as Varnish's vdir_add_backend.
            (_, Val::None) => fail(t, format!("{obj}: None backend cannot be added")),
            _ => {}
        }
        Val::None
    })
}

/// `obj.method(...)` on a director.
fn director_call(
    obj: &str,
    kind: crate::backend::director::Kind,
    method: &str,
    args: &[Expr],
    pos: Pos,
    sc: &Scope<'_>,
) -> Result<ExprFn, VclError> {
    use crate::backend::director::Kind;
    let a: Vec<ExprFn> = args.iter().map(|x| sc.expr(x)).collect::<Result<_, _>>()?;
    let obj_name = obj.to_string();
    let obj = obj.to_string();
    let with = move |c: &Compiled| c.directors().get(&obj).cloned();
    Ok(match (method, a.len()) {
        ("add_backend", 1 | 2) => {
            only_in(method, mask(&[Sub::Init]), pos, sc)?;
            add_backend(obj_name, a)
        }
        ("remove_backend", 1) => {
            let b = a.into_iter().next().expect("1 arg");
            Box::new(move |t, c| {
                if let (Some(d), Val::Backend(m)) = (with(c), b(t, c)) {
                    d.remove(&m);
                }
                Val::None
            })
        }
        // reconfigure(replicas=67): a member joining the ring gets that many
        // points per unit of weight; 0 or less fails (false, as Varnish).
        ("reconfigure", 0 | 1) if kind == Kind::Shard => {
            let replicas = a.into_iter().next();
            Box::new(move |t, c| {
                let n = replicas.as_ref().map(|r| r(t, c).num().unwrap_or(0.0));
                if n.is_some_and(|n| n < 1.0) {
                    return Val::Bool(false);
                }
                if let Some(d) = with(c) {
                    d.reconfigure(n.map(|n| n.min(f64::from(u32::MAX)) as u32));
                }
                Val::Bool(true)
            })
        }
        // clear(): every member out (as remove_backend() each); debug(INT)
        // only changes what Varnish logs for the ring.
        ("clear", 0) if kind == Kind::Shard => Box::new(move |_, c| {
            if let Some(d) = with(c) {
                d.member_names().iter().for_each(|m| d.remove(m));
            }
            Val::Bool(true)
        }),
        ("debug", 1) if kind == Kind::Shard => Box::new(|_, _| Val::None),
        ("set_warmup", 1) if kind == Kind::Shard => {
            let x = a.into_iter().next().expect("1 arg");
            Box::new(move |t, c| {
                let share = x(t, c).num().unwrap_or(0.0);
                if let Some(d) = with(c) {
                    d.set_warmup(share);
                }
                Val::None
            })
        }
        ("set_rampup", 1) if kind == Kind::Shard => {
            let x = a.into_iter().next().expect("1 arg");
            Box::new(move |t, c| {
                let secs = x(t, c).num().unwrap_or(0.0);
                if let Some(d) = with(c) {
                    d.set_rampup(secs);
                }
                Val::None
            })
        }
        // sh.key(STRING): the key's point, for by=KEY.
        ("key", 1) if kind == Kind::Shard => {
            let x = a.into_iter().next().expect("1 arg");
            Box::new(move |t, c| Val::Int(i64::from(crate::backend::director::point(x(t, c).text()))))
        }
        // Hash picks now, by the key (the URL without one).
        ("backend", 0 | 1) if kind == Kind::Hash => {
            let key = a.into_iter().next();
            Box::new(move |t, c| {
                let k = match &key {
                    Some(k) => k(t, c).text(),
                    None => t.req.as_deref().map(|r| String::from_utf8_lossy(&r.url).into_owned()).unwrap_or_default(),
                };
                let Some(d) = with(c) else { return Val::None };
                match d.pick(Some(&k), &|m| c.usable(m, 1)) {
                    Some(m) => Val::Backend(m),
                    // In vcl_init no healthy member is Varnish's NULL
                    // backend (add_backend refuses it); a request goes
                    // to the director, which fails the fetch as sick.
                    None if t.req.is_none() && t.bereq.is_none() => Val::None,
                    None => Val::Backend(d.name.clone()),
                }
            })
        }
        // The others are resolved when the fetch starts (as in Varnish).
        ("backend", 0) => Box::new(move |_, _| Val::Backend(obj_name.clone())),
        (m, n) => return unsupported(&format!("Method {m}() with {n} argument(s) on this director"), pos),
    })
}

/// Remember why this task's last std.ban() failed (std.ban_error()).
fn set_ban_error(t: &mut Task<'_>, e: String) {
    if let Some(r) = t.req.as_deref_mut() {
        r.ban_error = e;
    } else if let Some(r) = t.bereq.as_deref_mut() {
        r.ban_error = e;
    }
}

/// purge.hard() and purge.soft(ttl = 0s, grace = -1s, keep = -1s) (a
/// negative grace or keep leaves it as it is), in vcl_hit and vcl_miss
/// only, as Varnish 7's vmod_purge; they return how many variants.
fn purge_call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let soft = name == "purge.soft";
    if !soft && !args.is_empty() {
        return err("purge.hard() takes no argument", pos);
    }
    // Anywhere else it fails the task when it runs (Varnish's VRT_purge);
    // a subroutine called from vcl_hit or vcl_miss and elsewhere too is
    // let through.
    if !sc.ctx.iter().any(|s| matches!(s, Sub::Hit | Sub::Miss)) {
        return Ok(Box::new(|t, _| {
            fail(t, "purge can only happen in vcl_hit{} or vcl_miss{}".into());
            Val::Int(0)
        }));
    }
    let mut parts: [Option<ExprFn>; 3] = [None, None, None];
    for (i, (a, n)) in args.iter().zip(names).enumerate() {
        let at = match n.as_deref().or_else(|| ["ttl", "grace", "keep"].get(i).copied()) {
            Some("ttl") => 0,
            Some("grace") => 1,
            Some("keep") => 2,
            _ => return err(format!("purge.soft() has no argument '{}'", n.as_deref().unwrap_or("")), a.pos()),
        };
        parts[at] = Some(sc.expr(a)?);
    }
    let [ttl, grace, keep] = parts;
    Ok(Box::new(move |t, c| {
        let mut secs = |f: &Option<ExprFn>, default: f64| {
            f.as_ref().map_or(default, |f| match f(t, c) {
                Val::Dur(d) | Val::Real(d) => d,
                Val::Int(i) => i as f64,
                _ => default,
            })
        };
        let (ttl, grace, keep) = (secs(&ttl, 0.0), secs(&grace, -1.0), secs(&keep, -1.0));
        let Some(hash) = t.req.as_ref().and_then(|r| r.hash.clone()) else { return Val::Int(0) };
        let soft_args = soft.then_some((ttl, (grace >= 0.0).then_some(grace), (keep >= 0.0).then_some(keep)));
        Val::Int(t.env.purge_hash(&hash, soft_args))
    }))
}

/// hash_data(): each piece of its argument (the strings a `+` chain
/// joins, as Varnish's STRANDS) goes into the key, and is a Hash record
/// of its own when vsl_mask lets Hash through; an unset piece adds
/// nothing. A NUL ends the input. The chain is split only where it
/// surely joins strings (one of its first two terms is a string literal
/// or a header, so every `+` concatenates); else it is one piece.
fn hash_data(args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    only_in("hash_data", mask(&[Sub::Hash]), pos, sc)?;
    let [arg] = args else { return err(format!("hash_data() takes 1 argument(s), not {}", args.len()), pos) };
    let mut leaves = Vec::new();
    let mut e = arg;
    while let Expr::Binary { op: "+", left, right, .. } = e {
        leaves.push(right.as_ref());
        e = left;
    }
    leaves.push(e);
    leaves.reverse();
    let stringy = |e: &Expr| match e {
        Expr::Str(..) => true,
        Expr::Name(n, _) => n.contains(".http.") || n.ends_with(".url"),
        _ => false,
    };
    if !leaves.iter().take(2).any(|e| stringy(e)) {
        leaves = vec![arg];
    }
    let pieces = leaves.into_iter().map(|l| sc.expr(l)).collect::<Result<Vec<_>, _>>()?;
    Ok(Box::new(move |t, c| {
        for f in &pieces {
            let v = f(t, c);
            if matches!(v, Val::None) {
                continue;
            }
            let s = v.text();
            if let Some(k) = t.key.as_deref_mut() {
                k.extend_from_slice(s.as_bytes());
            }
            if let Some((log, vxid, side)) = t.log.as_mut() {
                log.rec(Tag::Hash, *side, *vxid, s.as_bytes());
            }
        }
        if let Some(k) = t.key.as_deref_mut() {
            k.push(0);
        }
        Val::None
    }))
}
