//! The child's control channel: the manager's commands (relayed from the
//! admin socket or replayed after a restart) on a private socket, and the
//! VCL programs the child holds.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use common::adm::{self, status};
use common::counters::C;

use crate::backend::pool::{Admin, Backend};
use crate::backend::probe;
use crate::shared::{Active, Shared};
use crate::util::now;
use crate::vcl::policy::Policy;

/// A reply: the CLI status code and the body.
type Reply = (u16, String);

/// The programs the child holds: by name, and labels naming them.
struct Programs {
    vcls: HashMap<String, Arc<Active>>,
    /// label → (program, the program as used through the label: its
    /// requests log `VCL_use <program> via <label>`).
    labels: HashMap<String, (String, Arc<Active>)>,
}

impl Programs {
    /// The backends a backend.* pattern names: `name` or `vcl.name`, globs;
    /// without a pattern, the active program's. The -b backend is
    /// `boot.default` while the boot program declares none.
    fn backends(&self, sh: &Shared, pattern: Option<&str>) -> Vec<Arc<Backend>> {
        let active = sh.policy();
        let mut all: Vec<Arc<Backend>> = Vec::new();
        let mut names: Vec<&String> = self.vcls.keys().collect();
        names.sort();
        for n in names {
            let p = &self.vcls[n];
            if pattern.is_none() && !Arc::ptr_eq(&p.policy, &active.policy) {
                continue;
            }
            let bes = p.policy.backends();
            if bes.is_empty() && n == "boot" {
                all.push(sh.backend.clone());
            }
            all.extend(bes);
        }
        if all.is_empty() && pattern.is_none() {
            all.push(sh.backend.clone());
        }
        all.retain(|b| pattern.is_none_or(|p| common::glob::matches(p, &b.full_name()) || common::glob::matches(p, &b.name)));
        all
    }

    /// The directors a backend.list pattern names (as [`Self::backends`]).
    fn directors(&self, sh: &Shared, pattern: Option<&str>) -> Vec<probe::DirectorRow> {
        let active = sh.policy();
        let mut names: Vec<&String> = self.vcls.keys().collect();
        names.sort();
        let mut all: Vec<probe::DirectorRow> = names
            .into_iter()
            .map(|n| &self.vcls[n])
            .filter(|p| pattern.is_some() || Arc::ptr_eq(&p.policy, &active.policy))
            .flat_map(|p| p.policy.directors())
            .collect();
        all.retain(|d| {
            pattern.is_none_or(|p| {
                common::glob::matches(p, &d.name) || d.name.split_once('.').is_some_and(|(_, n)| common::glob::matches(p, n))
            })
        });
        all
    }

    /// A program by name or label.
    fn get(&self, name: &str) -> Option<&Arc<Active>> {
        self.vcls.get(name).or_else(|| self.labels.get(name).map(|(_, a)| a))
    }
    /// Requests running on `name` now (directly or through a label): the
    /// holders of its Arcs other than this table and the active slot.
    fn busy(&self, sh: &Shared, name: &str) -> usize {
        let active = sh.policy();
        let count = |a: &Arc<Active>| {
            // `active` itself holds one reference when it is this one.
            let held = 1 + if Arc::ptr_eq(&active, a) { 2 } else { 0 };
            Arc::strong_count(a).saturating_sub(held)
        };
        let own = self.vcls.get(name).map_or(0, count);
        // A label's Arc is held once more, by the shared label table.
        own + self.labels.values().filter(|(t, _)| t == name).map(|(_, a)| count(a).saturating_sub(1)).sum::<usize>()
    }
}

/// Serve the manager's commands on the control socket until it closes.
pub fn serve(ctl: UnixStream, sh: &Shared, go: &tokio::sync::watch::Sender<bool>) {
    let Ok(mut out) = ctl.try_clone() else { return };
    let mut input = BufReader::new(ctl);
    // Loaded programs by name; "boot" is the one we started with.
    let mut progs = Programs { vcls: HashMap::new(), labels: HashMap::new() };
    progs.vcls.insert("boot".into(), sh.policy());
    loop {
        let args = match adm::read_command(&mut input, usize::MAX, false) {
            Ok(Some(Ok(a))) => a,
            Ok(Some(Err(e))) => {
                let _ = out.write_all(&adm::frame(status::SYNTAX, e));
                continue;
            }
            Ok(None) | Err(_) => return,
        };
        let (code, body) = if args.first().is_some_and(|a| a == "go") {
            go.send_replace(true);
            (status::OK, String::new())
        } else {
            command(sh, &mut progs, &args)
        };
        // MAIN.n_vcl* and n_backend (the backends of every loaded
        // program): a discarded program is freed at once here.
        let n = progs.vcls.len() as u64;
        let backends = progs.vcls.values().map(|p| p.policy.backends().len().max(1) as u64).sum();
        for (c, v) in [(C::NVcl, n), (C::NVclAvail, n), (C::NVclDiscard, 0), (C::NBackend, backends)] {
            sh.seg.set(c, v);
        }
        if out.write_all(&adm::frame(code, &body)).is_err() {
            return;
        }
    }
}

/// Commands the child answers (the manager relays them).
fn command(sh: &Shared, progs: &mut Programs, args: &[String]) -> Reply {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        [verb @ ("vcl.load" | "vcl.inline"), name, src] => vcl_load(sh, progs, verb, name, src),
        ["vcl.use", name] => match progs.get(name) {
            Some(p) => {
                sh.set_active(p.clone());
                (status::OK, format!("VCL '{name}' now active"))
            }
            None => (status::PARAM, format!("No VCL named {name} known.")),
        },
        ["vcl.label", label, target] => {
            let Some(p) = progs.vcls.get(*target) else {
                return (status::PARAM, format!("No VCL named {target} known."));
            };
            let via = Arc::new(Active { name: format!("{target} via {label}"), policy: p.policy.clone() });
            // The active label moved: so does the traffic.
            if progs.labels.get(*label).is_some_and(|(_, old)| Arc::ptr_eq(old, &sh.policy())) {
                sh.set_active(via.clone());
            }
            sh.set_label(label, Some(via.clone()));
            progs.labels.insert(label.to_string(), (target.to_string(), via));
            (status::OK, String::new())
        }
        ["vcl.discard", name] => {
            sh.set_label(name, None);
            if progs.labels.remove(*name).is_none() {
                if let Some(p) = progs.vcls.remove(*name) {
                    p.policy.fini();
                }
            }
            (status::OK, String::new())
        }
        ["vcl.busy"] => {
            let mut rows: Vec<String> = progs.vcls.keys().map(|n| format!("{n} {}", progs.busy(sh, n))).collect();
            rows.sort();
            (status::OK, rows.join("\n"))
        }
        ["ping", ..] => (status::OK, format!("PONG {} 1.0", now() as u64)),
        ["param.set", name, value] => param_set(sh, name, value),
        ["debug.panic.worker", ..] => panic!("Don't panic (debug.panic.worker was asked to)"),
        ["debug.panic.request", ..] => {
            sh.debug_panic_request.store(true, std::sync::atomic::Ordering::Relaxed);
            (status::OK, "The next request's task will panic.".into())
        }
        ["backend.list", flags @ ..] => {
            let pattern = flags.iter().find(|f| !f.starts_with('-')).copied();
            let list = progs.backends(sh, pattern);
            let dirs = progs.directors(sh, pattern);
            let argv: Vec<&str> = std::iter::once("backend.list").chain(flags.iter().copied()).collect();
            (status::OK, probe::backend_list(&list, &dirs, flags.contains(&"-j"), flags.contains(&"-p"), &argv))
        }
        ["backend.set_health", pattern, state] => set_health(sh, progs, pattern, state),
        ["ban", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            match sh.cache.ban(&rest, now(), sh.params().ban_dups) {
                Ok(_) => (status::OK, String::new()),
                Err(e) => (status::PARAM, e.to_string()),
            }
        }
        ["ban.list", flags @ ..] => ban_list(sh, flags),
        ["xkey.purge", rest @ ..] => {
            let soft = rest.first() == Some(&"-s");
            let keys = rest[usize::from(soft)..].join(" ");
            if keys.trim().is_empty() {
                return (status::PARAM, "xkey.purge needs at least one key".into());
            }
            let n = sh.cache.xkey_purge(keys.as_bytes(), soft, now());
            (status::OK, format!("{n} object(s) {}", if soft { "made stale" } else { "purged" }))
        }
        // Certificates, as the manager hands a whole set over (it reads
        // the files): clear, a load for each, commit.
        ["tls.cert.clear"] => {
            sh.tls.clear_staged();
            (status::OK, String::new())
        }
        ["tls.cert.load", id, pem] => match sh.tls.load(id, pem.as_bytes()) {
            Ok(()) => (status::OK, String::new()),
            Err(e) => (status::PARAM, e),
        },
        ["tls.cert.commit"] => {
            sh.tls.commit();
            (status::OK, String::new())
        }
        ["tls.cert.list"] => (status::OK, sh.tls.live_ids().iter().map(|id| format!("{id}\n")).collect()),
        _ => (status::UNKNOWN, "Unknown request.\nType 'help' for more info.".into()),
    }
}

fn vcl_load(sh: &Shared, progs: &mut Programs, verb: &str, name: &str, src: &str) -> Reply {
    let parsed = if verb == "vcl.load" { crate::vcl::parse_file(Path::new(src)) } else { crate::vcl::parse_source(name, src) };
    let loaded = parsed
        .map_err(|e| e.to_string())
        .and_then(|p| crate::vcl::compile::compile(&p).map_err(|e| e.render(&p.files)))
        .and_then(|c| crate::vcl::compile::VclPolicy::load(name, c));
    match loaded {
        Ok(p) => {
            Policy::start(&p, &sh.seg);
            progs.vcls.insert(name.to_string(), Arc::new(Active { name: name.to_string(), policy: Arc::new(p) }));
            (status::OK, String::new())
        }
        Err(e) => (status::PARAM, e),
    }
}

fn param_set(sh: &Shared, name: &str, value: &str) -> Reply {
    let mut p = (**sh.params()).clone();
    match p.set(name, value) {
        Ok(()) => {
            sh.set_params(p);
            (status::OK, String::new())
        }
        Err(e) => (status::PARAM, e.to_string()),
    }
}

fn set_health(sh: &Shared, progs: &Programs, pattern: &str, state: &str) -> Reply {
    let Some(a) = Admin::parse(state) else {
        return (status::PARAM, format!("Invalid state {state}: use auto, healthy or sick"));
    };
    let list = progs.backends(sh, Some(pattern));
    if list.is_empty() {
        return (status::PARAM, format!("No Backends matches: {pattern}"));
    }
    for b in list {
        b.set_admin(a);
    }
    (status::OK, String::new())
}

fn ban_list(sh: &Shared, flags: &[&str]) -> Reply {
    let list = sh.cache.ban_list();
    if flags.contains(&"-j") {
        let v: Vec<_> = list
            .iter()
            .map(|b| serde_json::json!({"time": format!("{:.6}", b.time), "refs": b.refs, "completed": b.completed, "spec": b.spec}))
            .collect();
        let argv: Vec<&str> = std::iter::once("ban.list").chain(flags.iter().copied()).collect();
        let doc = serde_json::json!([2, argv, (now() * 1000.0).round() / 1000.0, v]);
        return (status::OK, serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    let mut s = String::from("Present bans:\n");
    for b in list {
        s.push_str(&format!("{:10.6} {:5} {}  {}\n", b.time, b.refs, if b.completed { "C" } else { "-" }, b.spec));
    }
    (status::OK, s)
}
