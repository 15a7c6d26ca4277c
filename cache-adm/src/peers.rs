//! Fleet-wide commands (`--peers`): the nodes from a file of `host:port`
//! lines or from DNS (every address of a headless Service's name), one
//! command run on all of them in parallel, an answer line per node, and
//! an exit status that is 0 only when every node said 200.
//!
//! The command goes out in rounds, half a second apart, until
//! `--retry-for` runs out: each round asks DNS again (a pod restarted at
//! a new address, or one that was not yet published, joins), and runs the
//! command on every node that has not answered yet. A node that answered,
//! even with an error, has had the command and is not asked again. A node
//! that was never reached and has left DNS is reported as gone and not
//! counted as failed: DNS no longer lists it in the fleet. `--expect N`
//! says how big the fleet is, so that a node missing from DNS altogether
//! (a pod being recreated) makes the command wait for it, or fail.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::adm::status;
use common::resolve::{Resolver, ResolverSpec};

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
    /// Never reached, and no longer in DNS.
    pub gone: bool,
}

impl Outcome {
    fn new(node: &str) -> Outcome {
        Outcome { node: node.to_string(), status: None, answer: String::new(), error: None, attempts: 0, gone: false }
    }

    pub fn ok(&self) -> bool {
        matches!(self.status, Some(status::OK | status::TRUNCATED))
    }

    /// Still to be asked: not answered and not gone.
    fn pending(&self) -> bool {
        self.status.is_none() && !self.gone
    }
}

/// Where the nodes come from.
pub enum Peers {
    /// A file's `host:port` lines, read once.
    File(Vec<String>),
    /// Every address of `name`, looked up again each round.
    Dns { name: String, port: u16, resolver: Resolver },
}

impl Peers {
    /// `dns:NAME:PORT` (through `nameservers` when given, else the
    /// system's resolver), else a file of `host:port` lines (`#`
    /// comments, blank lines).
    pub fn parse(spec: &str, nameservers: &[SocketAddr]) -> Result<Peers, String> {
        if let Some(rest) = spec.strip_prefix("dns:") {
            let (name, port) = rest.rsplit_once(':').ok_or_else(|| format!("--peers {spec}: dns:NAME:PORT"))?;
            let port: u16 = port.parse().map_err(|_| format!("--peers {spec}: bad port '{port}'"))?;
            let resolver = if nameservers.is_empty() {
                Resolver::System
            } else {
                let spec = ResolverSpec { from_os: false, nameservers: nameservers.to_vec(), timeout: Some(Duration::from_secs(2)) };
                Resolver::dns(&spec).map_err(|e| format!("--nameserver: {e}"))?
            };
            return Ok(Peers::Dns { name: name.to_string(), port, resolver });
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
        Ok(Peers::File(out))
    }

    /// The nodes now (`host:port`, sorted for DNS answers).
    pub fn nodes(&self) -> Result<Vec<String>, String> {
        match self {
            Peers::File(list) => Ok(list.clone()),
            Peers::Dns { name, port, resolver } => {
                let answer = resolver.lookup(name, *port).map_err(|e| format!("cannot resolve {name}: {e}"))?;
                let set: BTreeSet<String> = answer.addrs.iter().map(|ip| SocketAddr::new(*ip, *port).to_string()).collect();
                Ok(set.into_iter().collect())
            }
        }
    }
}

/// How to run the command on the fleet.
pub struct Plan<'a> {
    pub secret: Option<&'a std::path::Path>,
    pub line: &'a str,
    /// Connecting and each answer.
    pub timeout: Duration,
    pub retry_for: Duration,
    /// Nodes that must answer (`--expect`).
    pub expect: Option<usize>,
}

/// Run the plan's command on every node of `peers` (see the module's
/// text). The outcomes in the order the nodes were found; an error only
/// when the first lookup of the nodes fails.
pub fn run_all(peers: &Peers, plan: &Plan) -> Result<Vec<Outcome>, String> {
    let deadline = Instant::now() + plan.retry_for;
    let mut all: Vec<Outcome> = Vec::new();
    loop {
        let round = Instant::now();
        match peers.nodes() {
            Ok(now) => {
                for n in &now {
                    if !all.iter().any(|o| &o.node == n) {
                        all.push(Outcome::new(n));
                    }
                }
                // Tried, not reached, and no longer listed: left the
                // fleet (back if listed again). A failed lookup keeps the
                // last answer.
                for o in all.iter_mut().filter(|o| o.status.is_none() && o.attempts > 0) {
                    o.gone = !now.contains(&o.node);
                }
            }
            Err(e) if all.is_empty() => return Err(e),
            Err(_) => {}
        }
        one_round(&mut all, plan);
        let answered = all.iter().filter(|o| o.status.is_some()).count();
        let whole = !all.iter().any(Outcome::pending) && plan.expect.is_none_or(|n| answered >= n);
        let next = round + Duration::from_millis(500);
        if whole || next >= deadline {
            return Ok(all);
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// One attempt on each pending node, all at once.
fn one_round(all: &mut [Outcome], plan: &Plan) {
    std::thread::scope(|s| {
        for o in all.iter_mut().filter(|o| o.pending()) {
            s.spawn(move || {
                let t = Target {
                    label: o.node.clone(),
                    addrs: vec![o.node.clone()],
                    secret: plan.secret.map(|p| p.to_path_buf()),
                    fleet: true,
                };
                o.attempts += 1;
                let reached = Conn::open(&t, plan.timeout)
                    .map_err(|e| e.0)
                    .and_then(|mut c| c.call_line(plan.line).map_err(|e| format!("{}: {e}", t.label)));
                match reached {
                    Ok((code, body)) => {
                        o.status = Some(code);
                        o.answer = body;
                        o.error = None;
                    }
                    Err(e) => o.error = Some(e),
                }
            });
        }
    });
}

/// The line printed for a node: `NODE STATUS first-line`, `NODE
/// unreachable: why`, or `NODE gone: no longer in DNS (why)`.
pub fn text_line(o: &Outcome) -> String {
    match o.status {
        Some(code) => {
            let first = o.answer.lines().next().unwrap_or("");
            format!("{} {code} {first}", o.node).trim_end().to_string()
        }
        None if o.gone => format!("{} gone: no longer in DNS ({})", o.node, o.error.as_deref().unwrap_or("")),
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
                "gone": o.gone,
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
        let nodes = |spec: &str| Peers::parse(spec, &[]).and_then(|p| p.nodes());
        assert_eq!(nodes(dir.to_str().unwrap()).unwrap(), ["10.0.0.1:6082", "[::1]:6082"]);
        std::fs::write(&dir, "10.0.0.1\n").unwrap();
        assert!(nodes(dir.to_str().unwrap()).unwrap_err().contains("line 1"));
        let _ = std::fs::remove_file(&dir);
        assert!(nodes("dns:localhost:6082").unwrap().iter().any(|a| a.ends_with(":6082")));
        assert!(nodes("dns:localhost").is_err());
        assert!(nodes("dns:localhost:99999").unwrap_err().contains("bad port"));
    }

    #[test]
    fn lines_say_what_became_of_each_node() {
        let mut o = Outcome::new("10.0.0.1:6082");
        o.error = Some("could not connect".into());
        assert_eq!(text_line(&o), "10.0.0.1:6082 unreachable: could not connect");
        o.gone = true;
        assert_eq!(text_line(&o), "10.0.0.1:6082 gone: no longer in DNS (could not connect)");
        o = Outcome::new("10.0.0.2:6082");
        o.status = Some(200);
        o.answer = "2 object(s) purged\nmore".into();
        assert!(o.ok() && !o.pending());
        assert_eq!(text_line(&o), "10.0.0.2:6082 200 2 object(s) purged");
    }
}
