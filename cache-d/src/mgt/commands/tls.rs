//! Certificates at runtime, with Varnish Enterprise's verbs: `tls.cert.load
//! ID FILE` and `tls.cert.discard ID` stage a change, `tls.cert.commit`
//! makes the staged set the one new handshakes use (open connections keep
//! theirs), `tls.cert.rollback` drops the staged changes, `tls.cert.list`
//! shows both. The manager reads the files and keeps both sets; a commit
//! (and a restarted child) gets the whole live set to the child.

use common::adm::status;

use crate::mgt::commands::call::{Call, Reply};
use crate::mgt::state::{ChildState, Mgr, TlsCerts};

fn certs(mgr: &Mgr) -> std::sync::MutexGuard<'_, TlsCerts> {
    mgr.tls.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn load(c: &Call) -> Reply {
    let args = c.positional();
    let (id, file) = (args[0], args[1]);
    // A regular file of at most 1 MiB (a FIFO or /dev/zero is refused at
    // once); the session is told the same whatever kept it from being
    // read, so it does not learn which paths exist (the log says why).
    let pem = match common::adm::read_file(std::path::Path::new(file), common::adm::MAX_PEM) {
        Ok(p) => p,
        Err(e) => {
            c.mgr.log(&format!("tls.cert.load {id}: {e}"));
            return (status::PARAM, common::adm::unreadable(file, "a certificate file", common::adm::MAX_PEM));
        }
    };
    // Checked here with the child's own code, so a commit cannot fail on
    // it; its messages quote nothing of the file.
    if let Err(e) = crate::tls::Cert::from_pem(id, &pem) {
        return (status::PARAM, e);
    }
    let Ok(pem) = String::from_utf8(pem) else { return (status::PARAM, format!("{id}: the PEM is not text")) };
    let mut t = certs(c.mgr);
    match t.staged.iter_mut().find(|(i, _)| i == id) {
        Some(slot) => slot.1 = pem,
        None => t.staged.push((id.to_string(), pem)),
    }
    (status::OK, format!("Certificate {id} staged (tls.cert.commit makes it live)."))
}

pub fn discard(c: &Call) -> Reply {
    let id = c.positional()[0];
    let mut t = certs(c.mgr);
    if !t.staged.iter().any(|(i, _)| i == id) {
        return (status::PARAM, format!("No certificate {id}."));
    }
    if t.staged.len() == 1 {
        return (status::CANT, format!("Certificate {id} is the last one: an https listener needs one."));
    }
    t.staged.retain(|(i, _)| i != id);
    (status::OK, format!("Certificate {id} staged for removal (tls.cert.commit removes it)."))
}

/// The staged set goes to the running child whole (then it is live there)
/// and becomes the manager's live set, which a restarted child gets.
pub fn commit(c: &Call) -> Reply {
    let staged = certs(c.mgr).staged.clone();
    if c.mgr.child_state() == ChildState::Running {
        if let Err(why) = c.mgr.send_certs(&staged) {
            return (status::CANT, format!("The child refused the certificates: {why}"));
        }
    }
    let n = staged.len();
    let mut t = certs(c.mgr);
    t.live = staged;
    t.checked = None;
    (status::OK, format!("{n} certificate(s) live."))
}

pub fn rollback(c: &Call) -> Reply {
    let mut t = certs(c.mgr);
    t.staged = t.live.clone();
    (status::OK, String::new())
}

/// Each certificate with its state: `live`, `staged` (loaded, not yet
/// committed), `replaced` (a new bundle staged for a live id) or
/// `discarded` (removed, not yet committed); when it expires and the
/// days left (`!` within tls_cert_warn of its end), the https listeners
/// it serves (every one: a set serves them all) and its names. The first
/// live one is the default (a handshake whose name no certificate serves
/// gets it).
pub fn list(c: &Call) -> Reply {
    let (now, warn) = (crate::tls::info::now(), c.mgr.params().tls_cert_warn as i64);
    let t = certs(c.mgr);
    let mut rows: Vec<(&str, &str, &str)> = Vec::new();
    for (id, pem) in &t.live {
        let (state, pem) = match t.staged.iter().find(|(i, _)| i == id) {
            Some((_, p)) if p == pem => ("live", pem),
            Some((_, p)) => ("replaced", p),
            None => ("discarded", pem),
        };
        rows.push((id, state, pem));
    }
    for (id, pem) in t.staged.iter().filter(|(i, _)| !t.live.iter().any(|(l, _)| l == i)) {
        rows.push((id, "staged", pem));
    }
    let listeners: Vec<&str> = c.mgr.https_listeners();
    if c.json {
        let v: Vec<_> = rows.iter().map(|(id, st, pem)| row_json(id, st, pem, &listeners, now, warn)).collect();
        return c.json_reply(serde_json::Value::Array(v));
    }
    let mut out = format!("{:<20} {:<10} {:<21} {:>6}  {:<12} {}\n", "ID", "STATE", "EXPIRES", "DAYS", "LISTENERS", "NAMES");
    for (id, st, pem) in rows {
        let (expires, days, names) = match crate::tls::info::of_pem(pem.as_bytes()) {
            Some(i) => {
                let mark = if i.close_to_end(now, warn) { "!" } else { "" };
                (crate::tls::info::utc(i.not_after), format!("{mark}{}", i.days_left(now)), i.names.join(","))
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        out.push_str(&format!("{id:<20} {st:<10} {expires:<21} {days:>6}  {:<12} {names}\n", listeners.join(",")));
    }
    (status::OK, out)
}

fn row_json(id: &str, state: &str, pem: &str, listeners: &[&str], now: i64, warn: i64) -> serde_json::Value {
    let info = crate::tls::info::of_pem(pem.as_bytes());
    serde_json::json!({
        "id": id,
        "state": state,
        "names": info.as_ref().map(|i| i.names.clone()).unwrap_or_default(),
        "not_after": info.as_ref().map(|i| crate::tls::info::utc(i.not_after)),
        "days_left": info.as_ref().map(|i| i.days_left(now)),
        "expiring": info.as_ref().is_some_and(|i| i.close_to_end(now, warn)),
        "listeners": listeners,
    })
}
