//! param.show, param.set, param.reset: the manager keeps the parameters
//! and tells a running child.

use std::fmt::Write as _;

use common::adm::status;

use crate::mgt::commands::call::{too_few, Call, Reply};
use crate::mgt::state::{ChildState, Mgr};
use crate::params::{self, Kind};

pub fn set(c: &Call) -> Reply {
    match c.positional().as_slice() {
        [name, value] => param_set(c.mgr, name, value),
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

fn param_show(c: &Call) -> Reply {
    let rest = c.rest;
    let p = c.mgr.params();
    let long = rest.iter().any(|a| a == "-l");
    let jflag = rest.iter().any(|a| a == "-j");
    let which = rest.iter().find(|a| !a.starts_with('-')).map(String::as_str);
    let defaults = params::Params::default();
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
                    Kind::Bits => (*v).into(),
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
        return c.json_reply(list.into());
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
