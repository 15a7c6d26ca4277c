//! param.show, param.set, param.reset: the manager keeps the parameters
//! and tells a running child.

use std::fmt::Write as _;

use common::adm::status;

use crate::mgt::commands::call::{too_few, too_many, Call, Reply};
use crate::mgt::state::{ChildState, Mgr};
use crate::params::{self, Kind};

pub fn set(c: &Call) -> Reply {
    match c.positional().as_slice() {
        [name, value] => {
            let r = param_set(c.mgr, name, value);
            if !c.json || r.0 != status::OK {
                return r;
            }
            // As Varnish: the parameter as param.show -j shows it.
            let p = c.mgr.params();
            match (params::def(name), p.get(name)) {
                (Some(d), Some(v)) => c.json_items(vec![param_json(d, v, false)]),
                _ => r,
            }
        }
        _ => too_few(),
    }
}

pub fn reset(c: &Call) -> Reply {
    match c.positional().as_slice() {
        [name] => match params::def(name) {
            Some(d) => param_set(c.mgr, name, d.default),
            None => (status::PARAM, format!("Unknown parameter \"{name}\".")),
        },
        _ => too_few(),
    }
}

pub fn show(c: &Call) -> Reply {
    param_show(c)
}

fn param_set(mgr: &Mgr, name: &str, value: &str) -> Reply {
    if protected(mgr, name) {
        return (status::AUTH, format!("parameter \"{name}\" is protected."));
    }
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

/// Made read-only by -r.
fn protected(mgr: &Mgr, name: &str) -> bool {
    mgr.args.read_only.iter().any(|r| r == name)
}

/// param.show's words, as Varnish reads them: `-l` the long form,
/// `changed` only the parameters off their default, at most one name.
struct Wanted<'a> {
    long: bool,
    changed: bool,
    name: Option<&'a str>,
}

fn wanted<'a>(words: &[&'a str]) -> Result<Wanted<'a>, Reply> {
    let mut w = Wanted { long: false, changed: false, name: None };
    for a in words {
        match *a {
            "-l" => w.long = true,
            "changed" => w.changed = true,
            _ if w.name.is_some() => return Err(too_many()),
            a => {
                w.name = Some(a);
                w.long = true;
            }
        }
    }
    Ok(w)
}

fn param_show(c: &Call) -> Reply {
    let words = c.positional();
    if c.json && words.contains(&"-l") {
        return (status::PARAM, "-l not permitted with param.show -j".into());
    }
    let w = match wanted(&words) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let p = c.mgr.params();
    let defaults = params::Params::default();
    let changed = |name: &str| p.get(name) != defaults.get(name);
    let named: Vec<_> = p.all().filter(|(d, _)| w.name.is_none_or(|n| d.name == n)).collect();
    if let (Some(n), true) = (w.name, named.is_empty()) {
        return (status::PARAM, format!("Unknown parameter \"{n}\"."));
    }
    let selected = named.into_iter().filter(|(d, _)| !w.changed || changed(d.name));
    if c.json {
        return c.json_items(selected.map(|(d, v)| param_json(d, v, protected(c.mgr, d.name))).collect());
    }
    let mut s = String::new();
    for (d, v) in selected {
        if w.long {
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
            if protected(c.mgr, d.name) {
                let _ = writeln!(s, "\n        NB: This parameter is protected and can not be changed.");
            }
            let _ = writeln!(s);
        } else {
            let _ = writeln!(s, "{:<30} {v} [{}]{}", d.name, d.units, if changed(d.name) { "" } else { " (default)" });
        }
    }
    (status::OK, s)
}

/// One parameter as param.show -j shows it.
fn param_json(d: &params::ParamDef, v: &str, protected: bool) -> serde_json::Value {
    let value: serde_json::Value = match d.kind {
        Kind::Bool => serde_json::json!(v == "on"),
        Kind::Seconds => v.parse::<f64>().map(serde_json::Value::from).unwrap_or_else(|_| v.into()),
        Kind::Bytes => params::parse_size(v).map(serde_json::Value::from).unwrap_or_else(|_| v.into()),
        Kind::Uint => v.parse::<u64>().map(serde_json::Value::from).unwrap_or_else(|_| v.into()),
        Kind::Bits | Kind::TagMask | Kind::Text => v.into(),
    };
    let flags: Vec<&str> = [(d.restart, "must_restart"), (protected, "protected")].iter().filter(|f| f.0).map(|f| f.1).collect();
    serde_json::json!({
        "name": d.name, "implemented": true, "value": value, "units": d.units,
        "default": d.default, "minimum": d.min, "maximum": d.max,
        "description": d.description, "flags": flags,
    })
}
