//! Fleet-wide commands (`--peers`): the nodes from a file of `host:port`
//! lines or from DNS (every address of a headless Service's name), one
//! command run on all of them in parallel, an answer line per node, and
//! an exit status that is 0 only when every node said 200. Nodes that
//! cannot be reached are tried again until `--retry-for` runs out, so a
//! ban reaches a node that was restarting.

use std::net::ToSocketAddrs;
use std::time::{Duration, Instant};

use common::adm::status;

use crate::conn::{Conn, Target};

/// One node's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub node: String,
    /// The answer's status and text; None when the node was not reached
    /// (or refused us) — `error` says why.
    pub status: Option<u16>,
    pub answer: String,
    pub error: Option<String>,
    pub attempts: u32,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        matches!(self.status, Some(status::OK | status::TRUNCATED))
    }
}

/// The nodes `spec` names: `dns:NAME:PORT` (every address NAME resolves
/// to), else a file of `host:port` lines (`#` comments, blank lines).
pub fn nodes(spec: &str) -> Result<Vec<String>, String> {
    if let Some(rest) = spec.strip_prefix("dns:") {
        let (name, port) = rest.rsplit_once(':').ok_or_else(|| format!("--peers {spec}: dns:NAME:PORT"))?;
        let port: u16 = port.parse().map_err(|_| format!("--peers {spec}: bad port '{port}'"))?;
        let mut addrs: Vec<String> = (name, port)
            .to_socket_addrs()
            .map_err(|e| format!("--peers {spec}: cannot resolve {name}: {e}"))?
            .map(|a| a.to_string())
            .collect();
        addrs.sort();
        addrs.dedup();
        if addrs.is_empty() {
            return Err(format!("--peers {spec}: {name} has no address"));
        }
        return Ok(addrs);
    }
    let text = std::fs::read_to_string(spec).map_err(|e| format!("--peers {spec}: {e}"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()) {
            return Err(format!("--peers {spec}: line {}: '{line}' is not host:port", i + 1));
        }
        out.push(line.to_string());
    }
    if out.is_empty() {
        return Err(format!("--peers {spec}: no node in it"));
    }
    Ok(out)
}

/// Run `line` on every node at once (`secret` authenticates); nodes not
/// reached are tried again every half second until `retry_for` has
/// passed. The outcomes in the nodes' order.
pub fn run_all(nodes: &[String], secret: Option<&std::path::Path>, line: &str, timeout: Duration, retry_for: Duration) -> Vec<Outcome> {
    let deadline = Instant::now() + retry_for;
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| {
                let t = Target { label: n.clone(), addrs: vec![n.clone()], secret: secret.map(|p| p.to_path_buf()) };
                s.spawn(move || one(&t, line, timeout, deadline))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| unreachable_outcome())).collect()
    })
}

fn unreachable_outcome() -> Outcome {
    Outcome { node: String::new(), status: None, answer: String::new(), error: Some("internal error".into()), attempts: 0 }
}

/// One node, tried until it answers or the deadline passes. Only a node
/// that could not be reached is tried again: one that answered, even with
/// an error, has had the command.
fn one(t: &Target, line: &str, timeout: Duration, deadline: Instant) -> Outcome {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reached = Conn::open(t, timeout).map_err(|e| e.0).and_then(|mut c| c.call_line(line).map_err(|e| format!("{}: {e}", t.label)));
        match reached {
            Ok((code, body)) => {
                return Outcome { node: t.label.clone(), status: Some(code), answer: body, error: None, attempts };
            }
            Err(e) if Instant::now() + Duration::from_millis(500) > deadline => {
                return Outcome { node: t.label.clone(), status: None, answer: String::new(), error: Some(e), attempts };
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The line printed for a node: `NODE STATUS first-line`, or `NODE
/// unreachable: why`.
pub fn text_line(o: &Outcome) -> String {
    match o.status {
        Some(code) => {
            let first = o.answer.lines().next().unwrap_or("");
            format!("{} {code} {first}", o.node).trim_end().to_string()
        }
        None => format!("{} unreachable: {}", o.node, o.error.as_deref().unwrap_or("")),
    }
}

/// The outcomes as a JSON list.
pub fn json(outcomes: &[Outcome]) -> String {
    let list: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            serde_json::json!({
                "node": o.node,
                "ok": o.ok(),
                "status": o.status,
                "answer": o.answer,
                "error": o.error,
                "attempts": o.attempts,
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_files_and_names() {
        let dir = std::env::temp_dir().join(format!("peers-{}", std::process::id()));
        std::fs::write(&dir, "# fleet\n10.0.0.1:6082\n\n[::1]:6082 # six\n").unwrap();
        assert_eq!(nodes(dir.to_str().unwrap()).unwrap(), ["10.0.0.1:6082", "[::1]:6082"]);
        std::fs::write(&dir, "10.0.0.1\n").unwrap();
        assert!(nodes(dir.to_str().unwrap()).unwrap_err().contains("line 1"));
        let _ = std::fs::remove_file(&dir);
        assert!(nodes("dns:localhost:6082").unwrap().iter().any(|a| a.ends_with(":6082")));
        assert!(nodes("dns:localhost").is_err());
    }
}
