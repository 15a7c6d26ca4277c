//! The vcl.* commands: the manager compiles (so errors come back at once),
//! keeps the sources so a new child gets them all back, and the child
//! loads and switches.

use common::adm::status;

use crate::mgt::commands::call::{too_few, Call, Reply};
use crate::mgt::state::{ChildState, Mgr, VclState};
use crate::util::now;

fn known(st: &VclState, n: &str) -> bool {
    st.list.iter().any(|(x, _, _)| x == n)
}

fn is_label(st: &VclState, n: &str) -> bool {
    st.labels.iter().any(|(l, _)| l == n)
}

/// A VCL or label name must be a C name (a letter, then letters, digits,
/// `_` or `-`), as Varnish's VCT_invalid_name; the answer if it is not.
fn bad_name(name: &str) -> Option<Reply> {
    let bad =
        name.bytes().enumerate().find(|&(i, c)| !(c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || c == b'_' || c == b'-'))));
    let (_, c) = bad?;
    let shown = if c > 0x20 && c < 0x7f { format!("('{}')", c as char) } else { format!("(0x{c:02x})") };
    Some((status::PARAM, format!("Illegal character in VCL name {shown}")))
}

fn state_of(mgr: &Mgr) -> std::sync::MutexGuard<'_, VclState> {
    mgr.vcls.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tell a running child; its refusal is the command's answer.
fn tell_child(mgr: &Mgr, cmd: &[String]) -> Result<(), Reply> {
    if mgr.child_state() == ChildState::Running {
        let (code, body) = mgr.relay(cmd);
        if code != status::OK {
            return Err((code, body));
        }
    }
    Ok(())
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
    /// For a label: the programs whose `return (vcl())` names it.
    refs: usize,
}

fn vcl_rows(mgr: &Mgr, st: &VclState) -> Vec<VclRow> {
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
    let cooldown = mgr.params().vcl_cooldown;
    for (n, _, _) in &st.list {
        let state = st.states.get(n).cloned().unwrap_or_else(|| "auto".into());
        let labelled = st.labels.iter().any(|(_, t)| t == n);
        let cooled = state == "auto" && !labelled && st.idle_since.get(n).is_some_and(|t| t.elapsed() >= cooldown);
        let temperature = if state == "cold" || cooled { "cold" } else { "warm" };
        rows.push(VclRow {
            status: if *n == st.active { "active" } else { "available" },
            state,
            temperature,
            busy: running.then(|| busy.get(n).copied().unwrap_or(0)),
            name: n.clone(),
            label_of: None,
            labels: st.labels.iter().filter(|(_, t)| t == n).count(),
            refs: 0,
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
            refs: users(st, l, &[]).len(),
        });
    }
    // In the order they were made, as Varnish lists them.
    rows.sort_by_key(|r| st.order.iter().position(|n| *n == r.name).unwrap_or(usize::MAX));
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
                let refs = match r.refs {
                    0 => String::new(),
                    1 => " (1 return(vcl))".into(),
                    n => format!(" ({n} return(vcl)'s)"),
                };
                c.extend(["->".to_string(), format!("{t}{refs}")]);
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

pub fn list(c: &Call) -> Reply {
    let st = state_of(c.mgr);
    let rows = vcl_rows(c.mgr, &st);
    if !c.json {
        return (status::OK, vcl_list_text(&rows));
    }
    let argv: Vec<&str> = c.argv.iter().map(String::as_str).collect();
    let mut doc = vec![serde_json::json!(2), serde_json::json!(argv), serde_json::json!((now() * 1000.0).round() / 1000.0)];
    for r in &rows {
        let mut e = serde_json::json!({
            "status": r.status, "state": r.state, "temperature": r.temperature,
            "busy": r.busy.unwrap_or(0), "name": r.name,
        });
        if let Some(t) = &r.label_of {
            e["label"] = serde_json::json!({ "name": t });
            if r.refs > 0 {
                e["label"]["refs"] = serde_json::json!(r.refs);
            }
        } else if r.labels > 0 {
            e["labels"] = serde_json::json!(r.labels);
        }
        doc.push(e);
    }
    (status::OK, serde_json::to_string_pretty(&doc).unwrap_or_default())
}

/// The answer to a program the compiler refused, as varnishd words it.
fn vcc_failed(e: &str) -> Reply {
    (status::PARAM, format!("Message from VCC-compiler:\n{e}Running VCC-compiler failed, exited with 2\nVCL compilation failed"))
}

/// vcl.load and vcl.inline.
pub fn load(c: &Call) -> Reply {
    let pos = c.positional();
    let [vname, src, rest @ ..] = pos.as_slice() else { return too_few() };
    if let Some(r) = bad_name(vname) {
        return r;
    }
    let mut st = state_of(c.mgr);
    if known(&st, vname) || is_label(&st, vname) {
        return (status::PARAM, format!("Already a VCL program named {vname}"));
    }
    let (max, handling) = {
        let p = c.mgr.params();
        (p.max_vcl as usize, p.max_vcl_handling)
    };
    if st.list.len() >= max && handling == 2 {
        let n = st.list.len();
        return (status::CANT, format!("Too many ({n}) VCLs already loaded\n(See max_vcl and max_vcl_handling parameters)"));
    }
    let state = rest.first().copied().unwrap_or("auto");
    if !matches!(state, "auto" | "cold" | "warm") {
        return (status::PARAM, format!("State must be one of auto, cold or warm, not \"{state}\""));
    }
    // The file is read once here (a regular file, bounded: see
    // crate::vcl::parse_file) and named in errors as it was given (its
    // resolved path would tell where a link leads); the text kept is what
    // was compiled, the child gets the resolved path.
    let (parsed, path) = if c.name == "vcl.load" {
        // A relative name is looked for along vcl_path, as Varnish's.
        let file = match crate::vcl::paths::find_vcl(src, None) {
            Ok(f) => f,
            Err(e) => return vcc_failed(&format!("{e}\n")),
        };
        let p = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
        (crate::vcl::parse_file(&file), Some(p))
    } else {
        (crate::vcl::parse_source(vname, src), None)
    };
    let labels: Vec<&str> = st.labels.iter().map(|(l, _)| l.as_str()).collect();
    let compiled = parsed.map_err(|e| e.to_string()).and_then(|p| {
        let checked = match crate::vcl::load::unknown_label(&p, &labels) {
            Some(e) => Err(e),
            None => crate::vcl::compile::compile(&p),
        };
        match checked {
            Ok(_) => {
                let uses = crate::vcl::load::labels_used(&p).into_iter().map(|(l, _)| l).collect::<Vec<_>>();
                let warn: String = crate::vcl::xref::warnings(&p).iter().map(|w| w.render(&p.files) + "\n").collect();
                let warn = if warn.is_empty() { warn } else { format!("Message from VCC-compiler:\n{warn}(That was just a warning)\n") };
                Ok((p.files.into_iter().next().map(|(_, text)| text).unwrap_or_default(), uses, warn))
            }
            Err(e) => Err(e.render(&p.files)),
        }
    });
    let (text, uses, warn) = match compiled {
        Ok(text) => text,
        Err(e) => return vcc_failed(&e),
    };
    let cmd = match &path {
        Some(p) => vec!["vcl.load".to_string(), vname.to_string(), p.display().to_string()],
        None => vec!["vcl.inline".to_string(), vname.to_string(), text.clone()],
    };
    if let Err(r) = tell_child(c.mgr, &cmd) {
        return r;
    }
    st.list.push((vname.to_string(), text, path));
    st.order.push(vname.to_string());
    if !uses.is_empty() {
        st.uses.insert(vname.to_string(), uses);
    }
    st.idle_since.insert(vname.to_string(), std::time::Instant::now());
    if state != "auto" {
        st.states.insert(vname.to_string(), state.to_string());
    }
    let n = st.list.len();
    if n > max && handling == 1 {
        let max_warn = "Remember to vcl.discard the old/unused VCLs.\n(See max_vcl and max_vcl_handling parameters)";
        return (status::OK, format!("{warn}VCL compiled.\n{n} VCLs loaded\n{max_warn}"));
    }
    (status::OK, format!("{warn}VCL compiled."))
}

pub fn use_(c: &Call) -> Reply {
    let pos = c.positional();
    let [vname] = pos.as_slice() else { return too_few() };
    let mut st = state_of(c.mgr);
    if !known(&st, vname) && !is_label(&st, vname) {
        return (status::PARAM, format!("No VCL named {vname} known."));
    }
    if st.states.get(*vname).is_some_and(|s| s == "cold") {
        return (status::CANT, format!("VCL '{vname}' is cold: vcl.state {vname} auto (or warm) first"));
    }
    if let Err(r) = tell_child(c.mgr, &["vcl.use".to_string(), vname.to_string()]) {
        return r;
    }
    // The program left goes idle, the one (or the label's) taken is in use.
    let target = |st: &VclState, n: &str| st.labels.iter().find(|(l, _)| l == n).map_or(n.to_string(), |(_, t)| t.clone());
    let (old, new) = (target(&st, &st.active), target(&st, vname));
    st.idle_since.insert(old, std::time::Instant::now());
    st.idle_since.remove(&new);
    st.active = vname.to_string();
    (status::OK, format!("VCL '{vname}' now active"))
}

pub fn label(c: &Call) -> Reply {
    let pos = c.positional();
    let [label, target] = pos.as_slice() else { return too_few() };
    if let Some(r) = bad_name(label) {
        return r;
    }
    let mut st = state_of(c.mgr);
    if is_label(&st, target) {
        return (status::CANT, "VCL labels cannot point to labels".into());
    }
    if !known(&st, target) {
        return (status::PARAM, format!("No VCL named {target} known."));
    }
    if known(&st, label) {
        return (status::PARAM, format!("{label} is not a label"));
    }
    let current = st.labels.iter().find(|(l, _)| l == label).map(|(_, t)| t.as_str());
    if current.is_some_and(|t| t != *target) {
        let mut why = String::new();
        if reaches(&st, target, label, &mut why) {
            return (status::PARAM, format!("{why}Pointing label {label} at {target} would create a loop"));
        }
    }
    if st.states.get(*target).is_some_and(|s| s == "cold") {
        return (status::CANT, format!("VCL '{target}' is cold: a label must name a warm program"));
    }
    if let Err(r) = tell_child(c.mgr, &["vcl.label".to_string(), label.to_string(), target.to_string()]) {
        return r;
    }
    let moved = match st.labels.iter_mut().find(|(l, _)| l == label) {
        Some(e) => Some(std::mem::replace(&mut e.1, target.to_string())),
        None => {
            st.labels.push((label.to_string(), target.to_string()));
            st.order.push(label.to_string());
            None
        }
    };
    // The active label moved: its old program goes idle.
    if let Some(old) = moved.filter(|_| st.active == *label) {
        st.idle_since.insert(old, std::time::Instant::now());
        st.idle_since.remove(*target);
    }
    (status::OK, String::new())
}

/// Does following `from` (a program's `return (vcl())` labels, a label's
/// program) reach `to`? On the way back out, each step into `why`, as
/// Varnish's manager explains a loop.
fn reaches(st: &VclState, from: &str, to: &str, why: &mut String) -> bool {
    if from == to {
        return true;
    }
    if let Some((_, t)) = st.labels.iter().find(|(l, _)| l == from) {
        if reaches(st, t, to, why) {
            why.push_str(&format!("Label {from} points to vcl {t}\n"));
            return true;
        }
        return false;
    }
    for l in st.uses.get(from).into_iter().flatten() {
        if reaches(st, l, to, why) {
            why.push_str(&format!("Vcl {from} uses Label {l}\n"));
            return true;
        }
    }
    false
}

/// What a refused discard lists: a line each, five at most (Varnish's).
fn depending(names: &[&str]) -> String {
    let mut out: String = names.iter().take(5).map(|n| format!("\t{n}\n")).collect();
    if names.len() > 5 {
        out.push_str("\t[...]");
    }
    out
}

/// The programs (not among `going`) whose `return (vcl())` names `label`.
fn users<'s>(st: &'s VclState, label: &str, going: &[String]) -> Vec<&'s str> {
    let mut v: Vec<&str> =
        st.uses.iter().filter(|(p, ls)| !going.contains(p) && ls.iter().any(|l| l == label)).map(|(p, _)| p.as_str()).collect();
    v.sort();
    v
}

pub fn state(c: &Call) -> Reply {
    let pos = c.positional();
    let [vname, rest @ ..] = pos.as_slice() else { return too_few() };
    let mut st = state_of(c.mgr);
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

/// All or nothing: every pattern must match, nothing active or labelled
/// may go.
pub fn discard(c: &Call) -> Reply {
    let patterns = c.positional();
    if patterns.is_empty() {
        return too_few();
    }
    let mut st = state_of(c.mgr);
    let mut names: Vec<String> = Vec::new();
    for p in &patterns {
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
            return (status::CANT, format!("Cannot discard labeled VCL program {n}:\n{}", depending(&labels)));
        }
        let users = users(&st, n, &names);
        if is_label(&st, n) && !users.is_empty() {
            return (status::CANT, format!("Cannot discard VCL label {n}, other VCLs depend on it:\n{}", depending(&users)));
        }
    }
    // Labels first, so the child never holds a label to nothing.
    names.sort_by_key(|n| !is_label(&st, n));
    for n in &names {
        st.list.retain(|(x, _, _)| x != n);
        st.labels.retain(|(l, _)| l != n);
        st.uses.remove(n);
        st.order.retain(|x| x != n);
        st.states.remove(n);
        st.idle_since.remove(n);
        if c.mgr.child_state() == ChildState::Running {
            let _ = c.mgr.relay(&["vcl.discard".to_string(), n.to_string()]);
        }
    }
    (status::OK, String::new())
}

pub fn show(c: &Call) -> Reply {
    let st = state_of(c.mgr);
    let verbose = c.has("-v");
    let pos = c.positional();
    let want = pos.iter().find(|a| !a.starts_with('-')).copied().unwrap_or(st.active.as_str()).to_string();
    let want = st.labels.iter().find(|(l, _)| *l == want).map(|(_, t)| t.clone()).unwrap_or(want);
    match st.list.iter().find(|(n, _, _)| *n == want) {
        Some((_, src, path)) if verbose => {
            let file = path.as_ref().map_or_else(|| "<vcl.inline>".to_string(), |p| p.display().to_string());
            let builtin = crate::vcl::BUILTIN_VCL;
            (status::OK, format!("// VCL.SHOW 0 {} {file}\n{src}\n// VCL.SHOW 1 {} <builtin>\n{builtin}", src.len(), builtin.len()))
        }
        Some((_, src, _)) => (status::OK, src.clone()),
        None => (status::PARAM, format!("No VCL named {want} known.")),
    }
}
