//! `import dynamic;` in VCL: `new d = dynamic.director(...)`, its
//! `.backend(host, port)` and `.debug(BOOL)`, and `new r =
//! dynamic.resolver(...)` with the methods that configure it in vcl_init.
//! The constructors' arguments are literals, checked here with their line
//! and column; the objects are made when vcl_init runs.

use std::sync::Arc;
use std::time::Duration;

use common::resolve::{Resolver, ResolverSpec};

use crate::backend::dynamic::{port_number, Dynamic, DynamicSpec, TtlFrom};
use crate::vcl::ast::{Expr, Pos};
use crate::vcl::compile::program::{fail, Acl, ExprFn, Flow, Scope, StmtFn, Val};
use crate::vcl::diag::{err, unsupported, VclError};
use crate::vcl::model::Sub;

/// The most names one director resolves at once: each is a lookup thread,
/// and `.backend()` without a host takes the request's Host header, so a
/// client could otherwise make one per request. A new name past it drops
/// the least recently used one (a client's made-up names do not lock the
/// table until domain_usage_timeout); it is refused only while as many
/// dropped names' lookups are still running.
pub const MAX_DOMAINS: usize = 1024;

const DIRECTOR_ARGS: [&str; 21] = [
    "port",
    "host_header",
    "share",
    "probe",
    "whitelist",
    "ttl",
    "connect_timeout",
    "first_byte_timeout",
    "between_bytes_timeout",
    "domain_usage_timeout",
    "first_lookup_timeout",
    "max_connections",
    "proxy_header",
    "resolver",
    "ttl_from",
    "retry_after",
    "via",
    "keep",
    "authority",
    "wait_timeout",
    "wait_limit",
];

fn text(e: &Expr, what: &str) -> Result<String, VclError> {
    match e {
        Expr::Str(s, _) => Ok(s.clone()),
        Expr::Int(i, _) => Ok(i.to_string()),
        other => err(format!("{what} takes a string literal"), other.pos()),
    }
}

fn duration(e: &Expr, what: &str) -> Result<Duration, VclError> {
    match e {
        Expr::Duration(d, _) if d.is_finite() && *d >= 0.0 => Ok(Duration::from_secs_f64(d.min(crate::params::MAX_SECONDS))),
        other => err(format!("{what} takes a duration (e.g. 10s)"), other.pos()),
    }
}

fn int(e: &Expr, what: &str) -> Result<i64, VclError> {
    match e {
        Expr::Int(i, _) => Ok(*i),
        other => err(format!("{what} takes a number"), other.pos()),
    }
}

fn word<'e>(e: &'e Expr, allowed: &[&str], what: &str) -> Result<&'e str, VclError> {
    match e {
        Expr::Name(n, _) | Expr::Str(n, _) if allowed.contains(&n.as_str()) => Ok(n),
        other => err(format!("{what} must be one of {}", allowed.join(", ")), other.pos()),
    }
}

/// `new NAME = dynamic.director(...)`: the arguments checked now, the
/// director made when vcl_init runs (with its resolver, if one is named).
pub(super) fn director_new(name: &str, args: &[Expr], names: &[Option<String>], sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    let mut spec = DynamicSpec::default();
    let (mut resolver, mut share, mut ttl_from_at) = (None, "DEFAULT", None);
    for (i, (a, n)) in args.iter().zip(names).enumerate() {
        let n = n.as_deref().or_else(|| DIRECTOR_ARGS.get(i).copied()).unwrap_or("");
        let what = format!("dynamic.director({n})");
        match n {
            "port" => {
                spec.port = text(a, &what)?;
                spec.port_num = port_number(&spec.port).ok_or_else(|| VclError {
                    msg: format!("{what}: '{}' is not a port (a number, http or https)", spec.port),
                    pos: a.pos(),
                })?;
            }
            "host_header" => spec.cfg.host_header = Some(text(a, &what)?),
            "share" => share = word(a, &["DEFAULT", "DIRECTOR", "HOST"], &what)?,
            "probe" => match a {
                Expr::Name(p, pos) => {
                    let probe = sc.probes.get(p).cloned();
                    spec.cfg.probe = Some(probe.ok_or_else(|| VclError { msg: format!("Probe '{p}' is not declared"), pos: *pos })?);
                }
                other => return err(format!("{what} takes the name of a probe"), other.pos()),
            },
            "whitelist" => match a {
                Expr::Name(acl, pos) => {
                    let entries = sc.acls.get(acl).map(|x| x.entries.clone());
                    let entries = entries.ok_or_else(|| VclError { msg: format!("ACL '{acl}' is not declared"), pos: *pos })?;
                    let acl = Acl { entries, log: false };
                    spec.whitelist = Some(Arc::new(move |ip| acl.matches(ip)));
                }
                other => return err(format!("{what} takes the name of an ACL"), other.pos()),
            },
            "ttl" => spec.ttl = duration(a, &what)?.max(Duration::from_millis(100)),
            "connect_timeout" => spec.cfg.connect_timeout = Some(duration(a, &what)?),
            "first_byte_timeout" => spec.cfg.first_byte_timeout = Some(duration(a, &what)?),
            "between_bytes_timeout" => spec.cfg.between_bytes_timeout = Some(duration(a, &what)?),
            "domain_usage_timeout" => spec.domain_usage_timeout = duration(a, &what)?,
            "first_lookup_timeout" => spec.first_lookup_timeout = duration(a, &what)?,
            "retry_after" => spec.retry_after = duration(a, &what)?.max(Duration::from_millis(100)),
            "max_connections" => spec.cfg.max_connections = Some(int(a, &what)?).filter(|m| *m > 0).map(|m| m as usize),
            "keep" => spec.keep = int(a, &what)?.clamp(0, i64::from(u32::MAX)) as u32,
            "ttl_from" => {
                spec.ttl_from = match word(a, &["cfg", "dns", "min", "max"], &what)? {
                    "dns" => TtlFrom::Dns,
                    "min" => TtlFrom::Min,
                    "max" => TtlFrom::Max,
                    _ => TtlFrom::Cfg,
                };
                ttl_from_at = Some(a.pos());
            }
            "resolver" => match a {
                Expr::Call { name: call, args, pos, .. } if call.ends_with(".use") && args.is_empty() => {
                    let obj = call.trim_end_matches(".use");
                    if sc.objects.get(obj) != Some(&super::decls::ObjKind::Resolver) {
                        return err(format!("'{obj}' is not a dynamic.resolver()"), *pos);
                    }
                    resolver = Some(obj.to_string());
                }
                other => return err(format!("{what} takes a resolver's .use(), e.g. resolver = r.use()"), other.pos()),
            },
            "proxy_header" if int(a, &what)? == 0 => {}
            "wait_limit" if int(a, &what)? == 0 => {}
            "proxy_header" | "via" | "authority" | "wait_timeout" | "wait_limit" => {
                return unsupported(&format!("The dynamic director's {n} argument"), a.pos());
            }
            other => return err(format!("dynamic.director() has no argument '{other}'"), a.pos()),
        }
    }
    if let (Some(at), None) = (ttl_from_at, &resolver) {
        if spec.ttl_from != TtlFrom::Cfg {
            return err("ttl_from other than cfg needs a resolver (resolver = r.use()): the system's resolver gives no TTL", at);
        }
    }
    spec.share_host = share == "HOST";
    let name = name.to_string();
    Ok(Box::new(move |t, c| {
        let r = match &resolver {
            None => Resolver::System,
            Some(r) => match Resolver::dns(&c.resolvers().get(r).cloned().unwrap_or_default()) {
                Ok(r) => r,
                Err(e) => {
                    fail(t, format!("dynamic.resolver(): {e}"));
                    return Flow::Next;
                }
            },
        };
        let vcl = c.vcl_name.get().map_or("boot", String::as_str);
        c.dynamics().insert(name.clone(), Dynamic::new(vcl, &name, spec.clone(), r));
        Flow::Next
    }))
}

/// `new NAME = dynamic.resolver(set_from_os = true, parallel = 16)`.
pub(super) fn resolver_new(name: &str, args: &[Expr], names: &[Option<String>]) -> Result<StmtFn, VclError> {
    let mut spec = ResolverSpec { from_os: true, ..Default::default() };
    for (i, (a, n)) in args.iter().zip(names).enumerate() {
        match n.as_deref().or_else(|| ["set_from_os", "parallel"].get(i).copied()).unwrap_or("") {
            "set_from_os" => {
                spec.from_os = match a {
                    Expr::Name(b, _) if b == "true" || b == "false" => b == "true",
                    Expr::Int(i, _) => *i != 0,
                    other => return err("set_from_os takes true or false", other.pos()),
                }
            }
            // Lookups run one at a time per name; parallel is accepted.
            "parallel" => drop(int(a, "dynamic.resolver(parallel)")?),
            other => return err(format!("dynamic.resolver() has no argument '{other}'"), a.pos()),
        }
    }
    let name = name.to_string();
    Ok(Box::new(move |_, c| {
        c.resolvers().insert(name.clone(), spec.clone());
        Flow::Next
    }))
}

/// A method of a dynamic.resolver(): configuration, in vcl_init only.
pub(super) fn resolver_call(obj: &str, method: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    if let Some(s) = sc.ctx.iter().find(|s| **s != Sub::Init) {
        return err(format!("{obj}.{method}() configures the resolver: vcl_init only (not {})", s.name()), pos);
    }
    let name = obj.to_string();
    let edit = move |f: Box<dyn Fn(&mut ResolverSpec) + Send + Sync>| -> ExprFn {
        Box::new(move |_, c| {
            if let Some(s) = c.resolvers().get_mut(&name) {
                f(s);
            }
            Val::Bool(true)
        })
    };
    Ok(match (method, args) {
        ("add_nameserver", [a]) => {
            let s = text(a, "add_nameserver()")?;
            let addr = s
                .parse::<std::net::SocketAddr>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(|ip| std::net::SocketAddr::new(ip, 53)))
                .map_err(|_| VclError { msg: format!("add_nameserver(): '{s}' is not an address (IP or IP:PORT)"), pos: a.pos() })?;
            edit(Box::new(move |r| r.nameservers.push(addr)))
        }
        ("clear_nameservers", []) => edit(Box::new(|r| r.nameservers.clear())),
        ("set_timeout", [a]) => {
            let d = duration(a, "set_timeout()")?;
            edit(Box::new(move |r| r.timeout = Some(d)))
        }
        ("use", []) => return err(format!("{obj}.use() is the resolver argument of dynamic.director()"), pos),
        (m, _) => {
            return unsupported(
                &format!("Method {m}() of dynamic.resolver (cachekit's resolver takes add_nameserver, clear_nameservers, set_timeout)"),
                pos,
            )
        }
    })
}

/// A method of a dynamic.director(): `.backend(host = "", port = "")`
/// and `.debug(BOOL)`.
pub(super) fn director_call(
    obj: &str,
    method: &str,
    args: &[Expr],
    names: &[Option<String>],
    pos: Pos,
    sc: &Scope<'_>,
) -> Result<ExprFn, VclError> {
    let obj = obj.to_string();
    match method {
        "backend" => {
            let (mut host, mut port) = (None, None);
            for (i, (a, n)) in args.iter().zip(names).enumerate() {
                match n.as_deref().or_else(|| ["host", "port", "authority"].get(i).copied()).unwrap_or("") {
                    "host" => host = Some(sc.expr(a)?),
                    "port" => {
                        if let Expr::Str(p, at) = a {
                            if port_number(p).is_none() {
                                return err(format!("'{p}' is not a port (a number, http or https)"), *at);
                            }
                        }
                        port = Some(sc.expr(a)?);
                    }
                    "authority" => return unsupported("The dynamic director's authority argument", a.pos()),
                    other => return err(format!("{obj}.backend() has no argument '{other}'"), a.pos()),
                }
            }
            Ok(Box::new(move |t, c| {
                let mut h = host.as_ref().map(|h| h(t, c).text()).unwrap_or_default();
                if h.is_empty() {
                    h = request_host(t);
                }
                let p = port.as_ref().map(|p| p(t, c).text()).unwrap_or_default();
                if h.is_empty() || (!p.is_empty() && port_number(&p).is_none()) {
                    return Val::None;
                }
                let Some(d) = c.dynamics().get(&obj).cloned() else { return Val::None };
                match d.domain(&h, &p, MAX_DOMAINS) {
                    Some(dom) => Val::Backend(dom.name.clone()),
                    None => {
                        fail(
                            t,
                            format!(
                                "{obj}.backend(): more than {MAX_DOMAINS} names at once, and as many dropped ones still being looked up"
                            ),
                        );
                        Val::None
                    }
                }
            }))
        }
        "debug" => {
            let [a] = args else { return err(format!("{obj}.debug() takes true or false"), pos) };
            let on = sc.expr(a)?;
            Ok(Box::new(move |t, c| {
                let v = on(t, c).truthy();
                if let Some(d) = c.dynamics().get(&obj) {
                    d.set_debug(v);
                }
                Val::None
            }))
        }
        "service" => unsupported("The dynamic director's .service() (DNS SRV records)", pos),
        m => err(format!("dynamic.director has no method {m}() (it has backend, debug)"), pos),
    }
}

/// The host a `.backend()` without one resolves: the backend request's
/// Host header, else the client request's, without a port.
fn request_host(t: &crate::vcl::model::Task<'_>) -> String {
    let h = t.bereq.as_deref().and_then(|b| b.headers.get("host")).or_else(|| t.req.as_deref().and_then(|r| r.headers.get("host")));
    let h = h.map(|v| String::from_utf8_lossy(v).trim().to_string()).unwrap_or_default();
    crate::util::host_name(&h).to_string()
}
