//! The admin socket: Varnish's CLI protocol (challenge–response
//! authentication, framed responses) and the manager's commands. Commands
//! about the cache are relayed to the child.

use std::fmt::Write as _;
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::adm::{self, status};
use common::bounded::{Deadline, Deadlined, Slots};

use crate::mgt::{ChildState, Mgr};
use crate::params::{self, Kind};
use crate::util::now;

/// (name, syntax, help, minimum args, maximum args) of each command.
const COMMANDS: &[(&str, &str, &str, usize, usize)] = &[
    ("auth", "auth <response>", "Authenticate.", 1, 1),
    ("backend.list", "backend.list [-j] [-p] [<backend_pattern>]", "List backends.", 0, 3),
    ("backend.set_health", "backend.set_health <backend_pattern> [auto|healthy|sick]", "Set health status of backend(s).", 2, 2),
    (
        "ban",
        "ban <field> <operator> <arg> [&& <field> <oper> <arg> ...]",
        "Mark obsolete all objects where all the conditions match.",
        3,
        usize::MAX,
    ),
    ("ban.list", "ban.list [-j]", "List the active bans.", 0, 1),
    ("banner", "banner", "Print welcome banner.", 0, 0),
    ("help", "help [-j] [<command>]", "Show command/protocol help.", 0, 2),
    ("panic.clear", "panic.clear [-z]", "Clear the last panic, if any, -z will clear related varnishstat counter(s)", 0, 1),
    ("panic.show", "panic.show [-j]", "Return the last panic, if any.", 0, 1),
    ("param.reset", "param.reset [-j] <param>", "Reset parameter to default value.", 1, 2),
    ("param.set", "param.set [-j] <param> <value>", "Set parameter value.", 2, 3),
    ("param.show", "param.show [-l|-j] [<param>|changed]", "Show parameters and their values.", 0, 2),
    ("ping", "ping [-j] [<timestamp>]", "Keep connection alive.", 0, 2),
    ("quit", "quit", "Close connection.", 0, 0),
    ("start", "start", "Start the Varnish cache process.", 0, 0),
    ("status", "status [-j]", "Check status of Varnish cache process.", 0, 1),
    ("stop", "stop", "Stop the Varnish cache process.", 0, 0),
    ("storage.list", "storage.list [-j]", "List storage devices.", 0, 1),
    ("vcl.discard", "vcl.discard <name_pattern>...", "Unload the named configurations (when possible).", 1, usize::MAX),
    (
        "vcl.inline",
        "vcl.inline <configname> <quoted_VCLstring> [auto|cold|warm]",
        "Compile and load the VCL data under the name provided.",
        2,
        3,
    ),
    ("vcl.label", "vcl.label <label> <configname>", "Apply label to configuration.", 2, 2),
    ("vcl.list", "vcl.list [-j]", "List all loaded configuration.", 0, 1),
    ("vcl.load", "vcl.load <configname> <filename> [auto|cold|warm]", "Compile and load the VCL file under the name provided.", 2, 3),
    ("vcl.show", "vcl.show [-v] [<configname>]", "Display the source code for the specified configuration.", 0, 2),
    ("vcl.state", "vcl.state <configname> [auto|cold|warm]", "Force the state of the named configuration.", 1, 2),
    ("vcl.use", "vcl.use <configname|label>", "Switch to the named configuration immediately.", 1, 1),
];

/// Admin sessions served at once; more are told so and closed (each costs
/// a manager thread).
pub const MAX_SESSIONS: usize = 32;
/// Time a connection has to authenticate, from connect to `auth`.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(10);
/// Idle time an authenticated session may wait between commands, and the
/// longest a write to a session may block.
const IDLE: Duration = Duration::from_secs(3600);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Accept admin connections forever.
pub fn accept_loop(mgr: Arc<Mgr>, l: TcpListener) {
    let slots = Slots::new(MAX_SESSIONS);
    for mut s in l.incoming().flatten() {
        let Some(slot) = slots.take() else {
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = s.write_all(&adm::frame(status::CLOSE, "Too many CLI sessions"));
            mgr.log("admin connection refused: too many sessions");
            continue;
        };
        let m = mgr.clone();
        let _ = std::thread::Builder::new().name("cache-admin-sess".into()).spawn(move || {
            session(m, s);
            drop(slot);
        });
    }
}

/// The banner sent after authentication.
pub fn banner(mgr: &Mgr) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "-----------------------------");
    let _ = writeln!(b, "Varnish Cache CLI 1.0");
    let _ = writeln!(b, "-----------------------------");
    let _ = writeln!(b, "{},{},-junix,-smalloc,-sdefault,-hcritbit", std::env::consts::OS, std::env::consts::ARCH);
    let _ = writeln!(b, "cachekit-{} (cache-d)", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(b);
    let _ = writeln!(b, "Type 'help' for command list.");
    let _ = writeln!(b, "Type 'quit' to close CLI session.");
    if mgr.child_state() != ChildState::Running {
        let _ = writeln!(b, "Type 'start' to launch worker process.");
    }
    b
}

fn session(mgr: Arc<Mgr>, s: TcpStream) {
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    let Ok(out) = s.try_clone() else { return };
    let authed = mgr.secret.is_none();
    let until = Deadline::at((!authed).then(|| Instant::now() + AUTH_DEADLINE));
    let input = BufReader::new(Deadlined::new(s, until.clone(), Some(IDLE)));
    serve(&mgr, input, out, authed, &|| until.set(None));
}

/// `-d`: the CLI on standard input and output, already authenticated.
/// Returns when standard input ends.
pub fn stdin_session(mgr: Arc<Mgr>) {
    serve(&mgr, BufReader::new(std::io::stdin()), std::io::stdout(), true, &|| {});
}

/// Run the protocol on one connection.
fn serve(mgr: &Arc<Mgr>, mut input: impl std::io::BufRead, mut out: impl Write, authed: bool, on_auth: &dyn Fn()) {
    let mut authed = authed;
    let challenge = adm::challenge();
    let hello = if authed { adm::frame(status::OK, &banner(mgr)) } else { adm::frame(status::AUTH, &adm::auth_request_body(&challenge)) };
    if out.write_all(&hello).and_then(|_| out.flush()).is_err() {
        return;
    }
    loop {
        // Before authentication, lines are cut at 80 characters and only
        // help, ping, auth and quit exist.
        let max = if authed { 1 << 20 } else { 80 };
        let args = match adm::read_command(&mut input, max, authed) {
            Ok(None) | Err(_) => return,
            Ok(Some(Err(e))) => {
                let code = status::SYNTAX;
                if out.write_all(&adm::frame(code, &format!("Syntax Error: {e}"))).is_err() || !authed {
                    return;
                }
                continue;
            }
            Ok(Some(Ok(a))) => a,
        };
        if args.is_empty() {
            continue; // Empty lines get no reply.
        }
        let (code, body) = if !authed {
            match args[0].as_str() {
                "auth" if args.len() == 2 => {
                    let want = adm::auth_response(&challenge, mgr.secret.as_deref().unwrap_or_default());
                    if args[1].eq_ignore_ascii_case(&want) {
                        authed = true;
                        on_auth();
                        (status::OK, banner(mgr))
                    } else {
                        mgr.log("admin authentication failed");
                        (status::CLOSE, "Authentication failed".into())
                    }
                }
                "ping" | "help" | "quit" => command(mgr, &args),
                _ => (status::AUTH, adm::auth_request_body(&challenge)),
            }
        } else {
            command(mgr, &args)
        };
        if out.write_all(&adm::frame(code, &body)).and_then(|_| out.flush()).is_err()
            || code == status::CLOSE
            || (!authed && code != status::OK)
        {
            return;
        }
    }
}

/// JSON answer: `[ver, [argv...], time, data]`.
fn json(ver: u32, args: &[String], data: serde_json::Value) -> String {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = serde_json::json!([ver, argv, (now() * 1000.0).round() / 1000.0, data]);
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Run one command.
pub fn command(mgr: &Mgr, args: &[String]) -> (u16, String) {
    let name = args[0].as_str();
    if name.starts_with(|c: char| c.is_ascii_uppercase()) {
        return (status::UNKNOWN, "all commands are in lower-case.".into());
    }
    // Varnish 2 habit: purge means ban.
    let name = match name {
        "purge" => "ban",
        "purge.list" => "ban.list",
        n => n,
    };
    let rest = &args[1..];
    let jflag = rest.first().is_some_and(|a| a == "-j");
    if let Some(&(_, _, _, min, max)) = COMMANDS.iter().find(|c| c.0 == name) {
        let n = rest.len() - usize::from(jflag);
        if n < min {
            return (status::TOOFEW, "Too few parameters".into());
        }
        if n > max {
            return (status::TOOMANY, "Too many parameters".into());
        }
    }
    match name {
        "ping" if jflag => (status::OK, json(2, args, "PONG".into())),
        "ping" => (status::OK, format!("PONG {} 1.0", now() as u64)),
        "banner" => (status::OK, banner(mgr)),
        "quit" => (status::CLOSE, "Closing CLI connection".into()),
        "status" if jflag => (status::OK, json(2, args, mgr.child_state().word().into())),
        "status" => (status::OK, format!("Child in state {}", mgr.child_state().word())),
        "start" => match mgr.start_child() {
            Ok(()) => (status::OK, String::new()),
            Err(e) => (status::CANT, e),
        },
        "stop" => match mgr.stop_child(Duration::from_secs(5)) {
            Ok(()) => (status::OK, String::new()),
            Err(e) => (status::CANT, e),
        },
        "help" => help(args, rest, jflag),
        "param.show" => param_show(mgr, args, rest),
        "param.set" => match positional(rest).as_slice() {
            [name, value] => param_set(mgr, name, value),
            _ => (status::TOOFEW, "Too few parameters".into()),
        },
        "param.reset" => match positional(rest).as_slice() {
            [name] => match params::def(name) {
                Some(d) => param_set(mgr, name, d.default),
                None => (status::PARAM, format!("Unknown parameter \"{name}\".")),
            },
            _ => (status::TOOFEW, "Too few parameters".into()),
        },
        "panic.show" => match &*mgr.panic.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(p) if jflag => (status::OK, json(2, args, p.text.clone().into())),
            Some(p) => (status::OK, p.text.clone()),
            None => (status::CANT, "Child has not panicked or panic has been cleared".into()),
        },
        "panic.clear" => {
            let had = mgr.panic.lock().unwrap_or_else(|e| e.into_inner()).take().is_some();
            if rest.first().is_some_and(|a| a == "-z") {
                mgr.seg.set(common::counters::C::MgtChildPanic, 0);
            }
            if had {
                (status::OK, String::new())
            } else {
                (status::CANT, "No panic to clear".into())
            }
        }
        "storage.list" if jflag => (
            status::OK,
            json(
                2,
                args,
                serde_json::json!([{"name": "storage.s0", "storage": "malloc"}, {"name": "storage.Transient", "storage": "malloc"}]),
            ),
        ),
        "storage.list" => (status::OK, "Storage devices:\n\tstorage.s0 = malloc\n\tstorage.Transient = malloc".into()),
        "vcl.list" | "vcl.load" | "vcl.inline" | "vcl.use" | "vcl.discard" | "vcl.show" | "vcl.state" | "vcl.label" => {
            vcl_command(mgr, name, rest, args, jflag)
        }
        "ban" | "ban.list" | "backend.list" | "backend.set_health" => {
            let mut a = args.to_vec();
            a[0] = name.to_string();
            mgr.relay(&a)
        }
        n if n.starts_with("debug.") => mgr.relay(args),
        _ => (status::UNKNOWN, "Unknown request.\nType 'help' for more info.".into()),
    }
}

/// The arguments after a command, without its `-j` flag (only the first
/// argument can be one, as in Varnish).
fn positional(rest: &[String]) -> Vec<&str> {
    let skip = usize::from(rest.first().is_some_and(|a| a == "-j"));
    rest[skip..].iter().map(String::as_str).collect()
}

fn help(args: &[String], rest: &[String], jflag: bool) -> (u16, String) {
    if jflag {
        let list: Vec<_> = COMMANDS
            .iter()
            .map(|(n, syn, h, min, max)| {
                let max = if *max == usize::MAX { serde_json::json!(-1) } else { serde_json::json!(max) };
                serde_json::json!({"request": n, "syntax": syn, "help": h, "minarg": min, "maxarg": max, "flags": "", "json": syn.contains("-j")})
            })
            .collect();
        return (status::OK, json(2, args, list.into()));
    }
    match rest.first() {
        Some(c) => match COMMANDS.iter().find(|x| x.0 == c) {
            Some((_, syn, h, _, _)) => (status::OK, format!("{syn}\n  {h}")),
            None => (status::UNKNOWN, format!("Unknown request: {c}")),
        },
        None => {
            let mut s = String::new();
            for (_, syn, _, _, _) in COMMANDS {
                let _ = writeln!(s, "{syn}");
            }
            (status::OK, s)
        }
    }
}

/// One row of vcl.list.
struct VclRow {
    status: &'static str,
    state: String,
    temperature: &'static str,
    busy: Option<u64>,
    name: String,
    /// "-> target" for a label, "<- (n labels)" for a labelled program.
    label_of: Option<String>,
    labels: usize,
}

fn vcl_rows(mgr: &Mgr, st: &crate::mgt::VclState) -> Vec<VclRow> {
    // Busy counts come from the child; without one, nothing is busy.
    let mut busy = std::collections::HashMap::new();
    let running = mgr.child_state() == ChildState::Running;
    if running {
        let (code, body) = mgr.relay(&["vcl.busy".to_string()]);
        if code == status::OK {
            for l in body.lines() {
                if let Some((n, b)) = l.rsplit_once(' ') {
                    busy.insert(n.to_string(), b.parse::<u64>().unwrap_or(0));
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (n, _, _) in &st.list {
        let state = st.states.get(n).cloned().unwrap_or_else(|| "auto".into());
        let temperature = if state == "cold" { "cold" } else { "warm" };
        rows.push(VclRow {
            status: if *n == st.active { "active" } else { "available" },
            state,
            temperature,
            busy: running.then(|| busy.get(n).copied().unwrap_or(0)),
            name: n.clone(),
            label_of: None,
            labels: st.labels.iter().filter(|(_, t)| t == n).count(),
        });
    }
    for (l, t) in &st.labels {
        rows.push(VclRow {
            status: if *l == st.active { "active" } else { "available" },
            state: "label".into(),
            temperature: "warm",
            busy: running.then_some(0),
            name: l.clone(),
            label_of: Some(t.clone()),
            labels: 0,
        });
    }
    rows
}

/// vcl.list's text: columns as wide as their widest entry plus a gap (3
/// after the first, 4 after the others), as varnishd's table prints.
fn vcl_list_text(rows: &[VclRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c = vec![
                r.status.to_string(),
                r.state.clone(),
                r.temperature.to_string(),
                format!("{:>6}", r.busy.map_or("-".to_string(), |b| b.to_string())),
                r.name.clone(),
            ];
            if let Some(t) = &r.label_of {
                c.extend(["->".to_string(), t.clone()]);
            } else if r.labels > 0 {
                c.extend(["<-".to_string(), format!("({} label{})", r.labels, if r.labels == 1 { "" } else { "s" })]);
            }
            c
        })
        .collect();
    let ncol = cells.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..ncol).map(|i| cells.iter().filter_map(|c| c.get(i)).map(|s| s.len()).max().unwrap_or(0)).collect();
    let lines: Vec<String> = cells
        .iter()
        .map(|c| {
            let mut line = String::new();
            for (i, cell) in c.iter().enumerate() {
                if i + 1 == c.len() {
                    line.push_str(cell);
                } else {
                    let gap = if i == 0 { 3 } else { 4 };
                    line.push_str(&format!("{cell:<w$}", w = widths[i] + gap));
                }
            }
            line
        })
        .collect();
    lines.join("\n")
}

/// The vcl.* family: the manager compiles (so errors come back at once),
/// keeps the sources, and the child loads and switches.
fn vcl_command(mgr: &Mgr, name: &str, rest: &[String], json_args: &[String], jflag: bool) -> (u16, String) {
    let pos = positional(rest);
    let mut st = mgr.vcls.lock().unwrap_or_else(|e| e.into_inner());
    let known = |st: &crate::mgt::VclState, n: &str| st.list.iter().any(|(x, _, _)| x == n);
    let is_label = |st: &crate::mgt::VclState, n: &str| st.labels.iter().any(|(l, _)| l == n);
    match (name, pos.as_slice()) {
        ("vcl.list", _) => {
            let rows = vcl_rows(mgr, &st);
            if jflag {
                let argv: Vec<&str> = json_args.iter().map(String::as_str).collect();
                let mut doc = vec![serde_json::json!(2), serde_json::json!(argv), serde_json::json!((now() * 1000.0).round() / 1000.0)];
                for r in &rows {
                    let mut e = serde_json::json!({
                        "status": r.status, "state": r.state, "temperature": r.temperature,
                        "busy": r.busy.unwrap_or(0), "name": r.name,
                    });
                    if let Some(t) = &r.label_of {
                        e["label"] = serde_json::json!({ "name": t });
                    } else if r.labels > 0 {
                        e["labels"] = serde_json::json!(r.labels);
                    }
                    doc.push(e);
                }
                return (status::OK, serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            (status::OK, vcl_list_text(&rows))
        }
        ("vcl.load" | "vcl.inline", [vname, src, rest @ ..]) => {
            if known(&st, vname) || is_label(&st, vname) {
                return (status::PARAM, format!("Already a VCL program named {vname}"));
            }
            let state = rest.first().copied().unwrap_or("auto");
            if !matches!(state, "auto" | "cold" | "warm") {
                return (status::PARAM, format!("State must be one of auto, cold or warm, not \"{state}\""));
            }
            let (parsed, path, text) = if name == "vcl.load" {
                let p = std::fs::canonicalize(src).unwrap_or_else(|_| std::path::PathBuf::from(src));
                (crate::vcl::parse_file(&p), Some(p), std::fs::read_to_string(src).unwrap_or_default())
            } else {
                (crate::vcl::parse_source(vname, src), None, src.to_string())
            };
            let compiled = parsed
                .map_err(|e| e.to_string())
                .and_then(|p| crate::vcl::compile::compile(&p).map(|_| ()).map_err(|e| e.render(&p.files)));
            if let Err(e) = compiled {
                return (
                    status::PARAM,
                    format!("Message from VCC-compiler:\n{e}Running VCC-compiler failed, exited with 2\nVCL compilation failed"),
                );
            }
            if mgr.child_state() == ChildState::Running {
                let cmd = match &path {
                    Some(p) => vec!["vcl.load".to_string(), vname.to_string(), p.display().to_string()],
                    None => vec!["vcl.inline".to_string(), vname.to_string(), text.clone()],
                };
                let (code, body) = mgr.relay(&cmd);
                if code != status::OK {
                    return (code, body);
                }
            }
            st.list.push((vname.to_string(), text, path));
            if state != "auto" {
                st.states.insert(vname.to_string(), state.to_string());
            }
            (status::OK, "VCL compiled.".into())
        }
        ("vcl.use", [vname]) => {
            if !known(&st, vname) && !is_label(&st, vname) {
                return (status::PARAM, format!("No VCL named {vname} known."));
            }
            if st.states.get(*vname).is_some_and(|s| s == "cold") {
                return (status::CANT, format!("VCL '{vname}' is cold: vcl.state {vname} auto (or warm) first"));
            }
            if mgr.child_state() == ChildState::Running {
                let (code, body) = mgr.relay(&["vcl.use".to_string(), vname.to_string()]);
                if code != status::OK {
                    return (code, body);
                }
            }
            st.active = vname.to_string();
            (status::OK, format!("VCL '{vname}' now active"))
        }
        ("vcl.label", [label, target]) => {
            if is_label(&st, target) {
                return (status::PARAM, "VCL labels cannot point to labels".into());
            }
            if !known(&st, target) {
                return (status::PARAM, format!("No VCL named {target} known."));
            }
            if known(&st, label) {
                return (status::PARAM, format!("{label} is a VCL program, not a label"));
            }
            if st.states.get(*target).is_some_and(|s| s == "cold") {
                return (status::CANT, format!("VCL '{target}' is cold: a label must name a warm program"));
            }
            if mgr.child_state() == ChildState::Running {
                let (code, body) = mgr.relay(&["vcl.label".to_string(), label.to_string(), target.to_string()]);
                if code != status::OK {
                    return (code, body);
                }
            }
            match st.labels.iter_mut().find(|(l, _)| l == label) {
                Some(e) => e.1 = target.to_string(),
                None => st.labels.push((label.to_string(), target.to_string())),
            }
            (status::OK, String::new())
        }
        ("vcl.state", [vname, rest @ ..]) => {
            if !known(&st, vname) {
                return (status::PARAM, format!("No VCL named {vname} known."));
            }
            let Some(state) = rest.first() else {
                let cur = st.states.get(*vname).cloned().unwrap_or_else(|| "auto".into());
                return (status::OK, cur);
            };
            if !matches!(*state, "auto" | "cold" | "warm") {
                return (status::PARAM, format!("State must be one of auto, cold or warm, not \"{state}\""));
            }
            if *state == "cold" {
                let active_target = st.labels.iter().find(|(l, _)| *l == st.active).map(|(_, t)| t.as_str()).unwrap_or(st.active.as_str());
                if *vname == active_target {
                    return (status::CANT, "Cannot set the active VCL cold.".into());
                }
                if st.labels.iter().any(|(_, t)| t == vname) {
                    return (status::CANT, "A labeled VCL cannot be set cold".into());
                }
            }
            if *state == "auto" {
                st.states.remove(*vname);
            } else {
                st.states.insert(vname.to_string(), state.to_string());
            }
            (status::OK, String::new())
        }
        ("vcl.discard", patterns) if !patterns.is_empty() => {
            // All or nothing: every pattern must match, nothing active or
            // labelled may go.
            let mut names: Vec<String> = Vec::new();
            for p in patterns {
                let matched: Vec<String> = st
                    .list
                    .iter()
                    .map(|(n, _, _)| n.clone())
                    .chain(st.labels.iter().map(|(l, _)| l.clone()))
                    .filter(|n| common::glob::matches(p, n))
                    .collect();
                if matched.is_empty() {
                    return (status::PARAM, format!("No VCL name matches {p}"));
                }
                names.extend(matched);
            }
            names.dedup();
            for n in &names {
                if *n == st.active {
                    return (status::CANT, format!("Cannot discard active VCL program {n}"));
                }
                let labels: Vec<&str> = st.labels.iter().filter(|(l, t)| t == n && !names.contains(l)).map(|(l, _)| l.as_str()).collect();
                if !labels.is_empty() {
                    return (status::CANT, format!("Cannot discard labeled VCL program {n}:\n\t{}", labels.join("\n\t")));
                }
            }
            // Labels first, so the child never holds a label to nothing.
            names.sort_by_key(|n| !is_label(&st, n));
            for n in &names {
                st.list.retain(|(x, _, _)| x != n);
                st.labels.retain(|(l, _)| l != n);
                st.states.remove(n);
                if mgr.child_state() == ChildState::Running {
                    let _ = mgr.relay(&["vcl.discard".to_string(), n.to_string()]);
                }
            }
            (status::OK, String::new())
        }
        ("vcl.show", args) => {
            let verbose = rest.iter().any(|a| a == "-v");
            let want = args.iter().find(|a| !a.starts_with('-')).copied().unwrap_or(st.active.as_str()).to_string();
            let want = st.labels.iter().find(|(l, _)| *l == want).map(|(_, t)| t.clone()).unwrap_or(want);
            match st.list.iter().find(|(n, _, _)| *n == want) {
                Some((_, src, path)) if verbose => {
                    let file = path.as_ref().map_or_else(|| format!("<vcl.inline {want}>"), |p| p.display().to_string());
                    let builtin = crate::vcl::BUILTIN_VCL;
                    (status::OK, format!("// VCL.SHOW 0 {} {file}\n{src}\n// VCL.SHOW 1 {} <builtin>\n{builtin}", src.len(), builtin.len()))
                }
                Some((_, src, _)) => (status::OK, src.clone()),
                None => (status::PARAM, format!("No VCL named {want} known.")),
            }
        }
        _ => (status::TOOFEW, "Too few parameters".into()),
    }
}

fn param_set(mgr: &Mgr, name: &str, value: &str) -> (u16, String) {
    let mut p = mgr.params();
    if let Err(e) = p.set(name, value) {
        return (status::PARAM, format!("{e}\n(attempting to set param '{name}' to '{value}')"));
    }
    let restart = params::def(name).is_some_and(|d| d.restart);
    drop(p);
    if mgr.child_state() == ChildState::Running {
        let (code, body) = mgr.relay(&["param.set".into(), name.into(), value.into()]);
        if code != status::OK {
            return (code, body);
        }
    }
    if restart {
        return (status::OK, format!("Parameter {name} takes effect when the child restarts."));
    }
    (status::OK, String::new())
}

fn param_show(mgr: &Mgr, args: &[String], rest: &[String]) -> (u16, String) {
    let p = mgr.params();
    let long = rest.iter().any(|a| a == "-l");
    let jflag = rest.iter().any(|a| a == "-j");
    let which = rest.iter().find(|a| !a.starts_with('-')).map(String::as_str);
    let defaults = crate::params::Params::default();
    let changed = |name: &str| p.get(name) != defaults.get(name);
    let selected: Vec<_> = p
        .all()
        .filter(|(d, _)| match which {
            None => true,
            Some("changed") => changed(d.name),
            Some(w) => d.name == w,
        })
        .collect();
    if let Some(w) = which.filter(|w| *w != "changed") {
        if selected.is_empty() {
            return (status::PARAM, format!("Unknown parameter \"{w}\"."));
        }
    }
    if jflag {
        let list: Vec<_> = selected
            .iter()
            .map(|(d, v)| {
                let value: serde_json::Value = match d.kind {
                    Kind::Bool => serde_json::json!(*v == "on"),
                    Kind::Seconds => v.parse::<f64>().map(serde_json::Value::from).unwrap_or_else(|_| (*v).into()),
                    Kind::Bytes => params::parse_size(v).map(serde_json::Value::from).unwrap_or_else(|_| (*v).into()),
                    Kind::Uint => v.parse::<u64>().map(serde_json::Value::from).unwrap_or_else(|_| (*v).into()),
                };
                let mut flags = Vec::new();
                if d.restart {
                    flags.push("must_restart");
                }
                serde_json::json!({
                    "name": d.name, "implemented": true, "value": value, "units": d.units,
                    "default": d.default, "minimum": d.min, "maximum": d.max,
                    "description": d.description, "flags": flags,
                })
            })
            .collect();
        return (status::OK, json(2, args, list.into()));
    }
    let mut s = String::new();
    let full = long || (which.is_some() && which != Some("changed"));
    for (d, v) in selected {
        if full {
            let _ = writeln!(s, "{}", d.name);
            let _ = writeln!(s, "        Value is: {v} [{}]{}", d.units, if changed(d.name) { "" } else { " (default)" });
            if changed(d.name) {
                let _ = writeln!(s, "        Default is: {}", d.default);
            }
            if let Some(m) = d.min {
                let _ = writeln!(s, "        Minimum is: {m}");
            }
            if let Some(m) = d.max {
                let _ = writeln!(s, "        Maximum is: {m}");
            }
            let _ = writeln!(s);
            let _ = writeln!(s, "        {}", d.description);
            if d.restart {
                let _ = writeln!(s, "\n        NB: This parameter takes effect when the child restarts.");
            }
            let _ = writeln!(s);
        } else {
            let _ = writeln!(s, "{:<30} {v} [{}]{}", d.name, d.units, if changed(d.name) { "" } else { " (default)" });
        }
    }
    (status::OK, s)
}
