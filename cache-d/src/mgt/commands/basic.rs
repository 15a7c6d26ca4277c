//! The manager's own commands: ping, banner, pid, quit, status, start, stop,
//! panic.show, panic.clear, storage.list, and the ones it relays to the
//! child (bans and backends).

use std::fmt::Write as _;
use std::time::Duration;

use common::adm::status;

use crate::mgt::commands::call::{Call, Reply};
use crate::mgt::state::{ChildState, Mgr};
use crate::util::now;

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

pub fn ping(c: &Call) -> Reply {
    if c.json {
        return c.json_reply("PONG".into());
    }
    (status::OK, format!("PONG {} 1.0", now() as u64))
}

/// `pid`: the manager's process id, and the child's when one runs.
pub fn pid(c: &Call) -> Reply {
    let master = std::process::id();
    let worker = {
        let slot = c.mgr.slot();
        slot.proc.as_ref().filter(|_| slot.state == ChildState::Running).map(|p| p.id())
    };
    if c.json {
        let mut o = serde_json::json!({ "master": master });
        if let Some(w) = worker {
            o["worker"] = w.into();
        }
        return c.json_items(vec![o]);
    }
    let mut s = format!("Master: {master:>10}\n");
    if let Some(w) = worker {
        let _ = writeln!(s, "Worker: {w:>10}");
    }
    (status::OK, s)
}

pub fn banner_cmd(c: &Call) -> Reply {
    (status::OK, banner(c.mgr))
}

pub fn quit(_: &Call) -> Reply {
    (status::CLOSE, "Closing CLI connection".into())
}

pub fn status(c: &Call) -> Reply {
    let state = c.mgr.child_state().word();
    if c.json {
        return c.json_reply(state.into());
    }
    (status::OK, format!("Child in state {state}"))
}

pub fn start(c: &Call) -> Reply {
    match c.mgr.start_child() {
        Ok(()) => (status::OK, String::new()),
        Err(e) => (status::CANT, e.to_string()),
    }
}

pub fn stop(c: &Call) -> Reply {
    match c.mgr.stop_child(Duration::from_secs(5)) {
        Ok(()) => (status::OK, String::new()),
        Err(e) => (status::CANT, e.to_string()),
    }
}

pub fn panic_show(c: &Call) -> Reply {
    match &*c.mgr.panic.lock().unwrap_or_else(|e| e.into_inner()) {
        Some(p) if c.json => c.json_reply(p.text.clone().into()),
        Some(p) => (status::OK, p.text.clone()),
        None => (status::CANT, "Child has not panicked or panic has been cleared".into()),
    }
}

pub fn panic_clear(c: &Call) -> Reply {
    let had = c.mgr.panic.lock().unwrap_or_else(|e| e.into_inner()).take().is_some();
    if c.rest.first().is_some_and(|a| a == "-z") {
        c.mgr.seg.set(common::counters::C::MgtChildPanic, 0);
    }
    if had {
        (status::OK, String::new())
    } else {
        (status::CANT, "No panic to clear".into())
    }
}

pub fn storage_list(c: &Call) -> Reply {
    let stores = crate::cache::spec::resolve(&c.mgr.args.storage).unwrap_or_default();
    if c.json {
        let list: Vec<_> = stores.iter().map(|s| serde_json::json!({"name": s.name, "storage": s.kind.name()})).collect();
        return c.json_reply(serde_json::Value::Array(list));
    }
    let mut out = String::from("Storage devices:");
    for s in &stores {
        out.push_str(&format!("\n\tstorage.{} = {}", s.name, s.kind.name()));
    }
    (status::OK, out)
}

/// Commands about the cache: the child answers them.
pub fn relay(c: &Call) -> Reply {
    c.mgr.relay(&c.relayed())
}
