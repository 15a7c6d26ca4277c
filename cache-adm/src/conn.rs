//! Talking to an admin socket: where it is (an instance dir's `_.admin`,
//! or `-T`/`-S`), connecting and authenticating (with the secret as it
//! is, or for a fleet node with the node secret of the address reached,
//! which the node then proves it holds), one command at a time.

use std::io::{BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::adm::{self, status};

use crate::cli::Args;

/// Where to connect, how to authenticate, and what to call it in output.
#[derive(Clone, Debug)]
pub struct Target {
    pub label: String,
    pub addrs: Vec<String>,
    pub secret: Option<PathBuf>,
    /// `secret` is the fleet's (`--peers`): answer with the node secret of
    /// the address connected to, and have the node prove it holds it.
    pub fleet: bool,
}

/// Why a target could not be used (exit status 2).
#[derive(Debug)]
pub struct ConnectError(pub String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Read a cache-d instance's `_.admin` file.
pub fn target_from_dir(dir: &Path) -> Result<Target, ConnectError> {
    let path = dir.join("_.admin");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ConnectError(format!("{}: {e} (is cache-d running with -n {}?)", path.display(), dir.display())))?;
    let addrs: Vec<String> = text.lines().filter_map(|l| l.strip_prefix("T ")).map(|a| a.replacen(' ', ":", 1)).collect();
    if addrs.is_empty() {
        return Err(ConnectError(format!("{}: the admin socket is disabled (-T none)", path.display())));
    }
    let secret = text.lines().find_map(|l| l.strip_prefix("S ")).map(PathBuf::from);
    Ok(Target { label: dir.display().to_string(), addrs, secret, fleet: false })
}

/// An authenticated admin connection.
pub struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Conn {
    /// Connect to the first address that answers and authenticate.
    pub fn open(t: &Target, timeout: Duration) -> Result<Conn, ConnectError> {
        let mut last = String::from("no address");
        for a in &t.addrs {
            let sock = match a.to_socket_addrs().map(|mut i| i.next()) {
                Ok(Some(s)) => s,
                _ => {
                    last = format!("{a}: not an address");
                    continue;
                }
            };
            match TcpStream::connect_timeout(&sock, timeout) {
                Ok(s) => return Conn::handshake(s, t, timeout),
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        Err(ConnectError(format!("{}: could not connect: {last}", t.label)))
    }

    fn handshake(s: TcpStream, t: &Target, timeout: Duration) -> Result<Conn, ConnectError> {
        let err = |e: std::io::Error| ConnectError(format!("{}: {e}", t.label));
        s.set_read_timeout(Some(timeout)).map_err(err)?;
        s.set_write_timeout(Some(timeout)).map_err(err)?;
        // Each command is one small write answered before the next: no
        // Nagle delay waiting on the server's delayed ACK.
        s.set_nodelay(true).map_err(err)?;
        let peer = s.peer_addr().map_err(err)?;
        let mut c = Conn { w: s.try_clone().map_err(err)?, r: BufReader::new(s) };
        let fail = |why: String| ConnectError(format!("{}: {why}", t.label));
        let (code, body) = adm::read_response(&mut c.r).map_err(|e| fail(e.to_string()))?;
        match code {
            status::OK if t.fleet => Err(fail("answered without asking for authentication: not a fleet node".into())),
            status::OK | status::TRUNCATED => Ok(c),
            status::AUTH => {
                let path = t.secret.as_ref().ok_or_else(|| fail("Authentication required (give -S)".into()))?;
                let mut secret = adm::read_file(path, adm::MAX_SECRET).map_err(|e| ConnectError(e.to_string()))?;
                if t.fleet {
                    secret = adm::node_secret(&secret, peer);
                }
                let challenge = body.get(..adm::CHALLENGE_LEN).ok_or_else(|| fail("bad challenge".into()))?;
                let (code, _) =
                    c.call_line(&format!("auth {}", adm::auth_response(challenge, &secret))).map_err(|e| fail(e.to_string()))?;
                match code {
                    // A banner longer than cli_limit comes as 201, which
                    // varnishadm takes too.
                    status::OK | status::TRUNCATED if t.fleet => c.check_proof(&secret, challenge, peer).map_err(fail).map(|()| c),
                    status::OK | status::TRUNCATED => Ok(c),
                    code if t.fleet => Err(fail(format!(
                        "Rejected {code}: the node at {} did not take its node secret (see cache-adm(1), FLEET AUTHENTICATION)",
                        adm::node_id(peer)
                    ))),
                    code => Err(fail(format!("Rejected {code}"))),
                }
            }
            other => Err(fail(format!("Rejected {other}"))),
        }
    }

    /// Have a fleet node prove it holds the node secret we answered with:
    /// a listener that took our answer without being the node (and so
    /// without that secret) cannot make this up.
    fn check_proof(&mut self, secret: &[u8], challenge: &str, peer: std::net::SocketAddr) -> Result<(), String> {
        let nonce = adm::challenge();
        let (code, body) = self.call_line(&format!("node.proof {nonce}")).map_err(|e| e.to_string())?;
        if code != status::OK || !body.trim().eq_ignore_ascii_case(&adm::node_proof(secret, challenge, &nonce)) {
            return Err(format!("took the answer but did not prove it is the node at {} (node.proof: {code})", adm::node_id(peer)));
        }
        Ok(())
    }

    /// Send one raw command line and read its answer.
    pub fn call_line(&mut self, line: &str) -> Result<(u16, String), adm::ReadError> {
        // The line and its newline in one write: two small writes would
        // wait out the server's delayed ACK (40 ms) on every command.
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.w.write_all(&buf)?;
        adm::read_response(&mut self.r)
    }
}

/// Commands read from stdin: one a line, except that a line ending in
/// `<< TAG` takes the lines after it up to one equal to TAG (a here
/// document), sent as one command as varnishadm passes them on.
pub fn stdin_commands(mut lines: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        let tag = match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, .., "<<", tag] => Some(tag.to_string()),
            _ => None,
        };
        let mut cmd = line;
        if let Some(tag) = tag {
            for more in lines.by_ref() {
                cmd.push('\n');
                cmd.push_str(&more);
                if more == tag {
                    break;
                }
            }
        }
        out.push(cmd);
    }
    out
}

/// The line to send for command words given on our command line: the
/// words joined with spaces, as varnishadm joins them, so runbook lines
/// (`ban 'req.url ~ ^/a/'`) work unchanged; quote inside an argument what
/// must stay one word (`vcl.inline x '"vcl 4.1; ..."'`).
pub fn command_line(words: &[String]) -> String {
    words.join(" ")
}

/// Targets from the arguments (the default instance when none is given).
pub fn targets(args: &Args) -> Result<Vec<Target>, ConnectError> {
    let mut out = Vec::new();
    for n in &args.name {
        out.push(target_from_dir(&common::instance::resolve(Some(n)))?);
    }
    for t in &args.target {
        out.push(Target { label: t.clone(), addrs: vec![t.clone()], secret: args.secret.clone(), fleet: false });
    }
    if out.is_empty() {
        out.push(target_from_dir(&common::instance::resolve(None))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{command_line, stdin_commands};

    #[test]
    fn here_documents_from_stdin_are_one_command() {
        let lines = ["ping", "", "ban req.url ~ << foo", "\\.bar", "", "foo", "status"].map(String::from);
        assert_eq!(stdin_commands(lines.into_iter()), vec!["ping", "ban req.url ~ << foo\n\\.bar\n\nfoo", "status"]);
    }

    #[test]
    fn command_lines() {
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(command_line(&w(&["ping"])), "ping");
        assert_eq!(command_line(&w(&["ban req.url ~ \"/a b\""])), "ban req.url ~ \"/a b\"");
        // As varnishadm: joined with spaces, nothing quoted.
        assert_eq!(command_line(&w(&["ban", "req.url ~ ^/a/"])), "ban req.url ~ ^/a/");
        assert_eq!(command_line(&w(&["ban", "req.url", "~", "\"/a b\""])), "ban req.url ~ \"/a b\"");
    }
}
