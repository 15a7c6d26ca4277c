//! param.show, param.set, param.reset: the manager keeps the parameters
//! and tells a running child.

use std::fmt::Write as _;

use common::adm::status;

use crate::mgt::commands::call::{too_few, too_many, Call, Reply};
use crate::mgt::state::{ChildState, Mgr};
use crate::params::{self, Effect, Kind};

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
    if params::def(name).is_some_and(|d| d.effect == Effect::Unavailable) {
        return (status::CANT, format!("parameter \"{name}\" is not available on this platform."));
    }
    if protected(mgr, name) {
        return (status::AUTH, format!("parameter \"{name}\" is protected."));
    }
    let mut p = mgr.params();
    if let Err(e) = p.set(name, value) {
        if let params::ParamError::Unknown(_) = e {
            return (status::PARAM, e.to_string());
        }
        return (status::PARAM, format!("{e}\n\n(attempting to set param '{name}' to '{value}')"));
    }
    let restart = params::def(name).is_some_and(|d| d.effect == Effect::Restart);
    drop(p);
    if mgr.child_state() != ChildState::Running {
        return (status::OK, String::new());
    }
    let (code, body) = mgr.relay(&["param.set".into(), name.into(), value.into()]);
    if code != status::OK {
        return (code, body);
    }
    // As Varnish, said only while a child runs.
    if restart {
        return (status::OK, "\nChange will take effect when child is restarted".into());
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
    // Names padded to the longest one and a space, as Varnish's margin.
    let width = params::DEFS.iter().map(|d| d.name.len() + 1).max().unwrap_or(0);
    for (d, v) in selected {
        if d.effect == Effect::Unavailable {
            let _ = match w.long {
                true => write!(s, "{}\n        Not available\n\n\n\n        NB: This parameter depends on a feature which is not available\n        on this platform.\n\n", d.name),
                false => writeln!(s, "{:<width$}-", d.name),
            };
            continue;
        }
        if w.long {
            let _ = writeln!(s, "{}", d.name);
            let _ = writeln!(s, "        Value is: {v}{}{}", units(d), if changed(d.name) { "" } else { " (default)" });
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
            wrap(&mut s, d.description);
            // Varnish's NB lines, but for parameters without effect here.
            let shown = |f: &str| d.effect != Effect::Inert || f == "protected";
            for (_, note) in params::flags(d, protected(c.mgr, d.name)).into_iter().filter(|(f, _)| shown(f)) {
                s.push('\n');
                wrap(&mut s, note);
            }
            let _ = writeln!(s);
        } else {
            let _ = writeln!(s, "{:<width$}{v}{}{}", d.name, units(d), if changed(d.name) { "" } else { " (default)" });
        }
    }
    (status::OK, s)
}

/// `text` indented 8 and wrapped before column 72, as Varnish's
/// mcf_wrap_line (runs of spaces kept), ending in a newline.
fn wrap(s: &mut String, text: &str) {
    const INDENT: &str = "        ";
    let mut words = text.split(' ');
    let mut line = format!("{INDENT}{}", words.next().unwrap_or(""));
    for w in words {
        if line.len() + 1 + w.len() < 72 {
            line.push(' ');
            line.push_str(w);
        } else {
            s.push_str(&line);
            s.push('\n');
            line = format!("{INDENT}{w}");
        }
    }
    s.push_str(&line);
    s.push('\n');
}

/// ` [units]`, or nothing for a parameter without (as Varnish).
fn units(d: &params::ParamDef) -> String {
    if d.units.is_empty() {
        String::new()
    } else {
        format!(" [{}]", d.units)
    }
}

/// One parameter as param.show -j shows it: Varnish leaves out units,
/// minimum and maximum where there are none.
fn param_json(d: &params::ParamDef, v: &str, protected: bool) -> serde_json::Value {
    if d.effect == Effect::Unavailable {
        return serde_json::json!({"name": d.name, "implemented": false});
    }
    let value: serde_json::Value = match d.kind {
        Kind::Bool => serde_json::json!(v == "on"),
        Kind::Seconds | Kind::Float => v.parse::<f64>().map(serde_json::Value::from).unwrap_or_else(|_| v.into()),
        Kind::Bytes => params::parse_size(v).map(serde_json::Value::from).unwrap_or_else(|_| v.into()),
        Kind::Uint if v.eq_ignore_ascii_case("unlimited") => u32::MAX.into(),
        Kind::Uint => v.parse::<u64>().map(serde_json::Value::from).unwrap_or_else(|_| v.into()),
        Kind::Pool => match params::parse_pool(d, v) {
            Ok((min, max, age)) => serde_json::json!({"min_pool": min, "max_pool": max, "max_age": age}),
            Err(_) => v.into(),
        },
        Kind::Bits | Kind::TagMask | Kind::Text => v.into(),
    };
    let flags: Vec<&str> = params::flags(d, protected).into_iter().map(|(f, _)| f).collect();
    let mut o = serde_json::json!({"name": d.name, "implemented": true, "value": value});
    let m = o.as_object_mut().expect("an object");
    if !d.units.is_empty() {
        m.insert("units".into(), d.units.into());
    }
    m.insert("default".into(), d.default.into());
    if let Some(min) = d.min {
        m.insert("minimum".into(), min.into());
    }
    if let Some(max) = d.max {
        m.insert("maximum".into(), max.into());
    }
    m.insert("description".into(), d.description.into());
    m.insert("flags".into(), flags.into());
    o
}
