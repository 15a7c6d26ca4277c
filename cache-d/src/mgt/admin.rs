//! The admin socket: Varnish's CLI protocol (challenge–response
//! authentication, framed responses, limits on sessions and time), the
//! fleet's node secrets and `node.proof` (why: common/src/adm.rs), and
//! the room kept for the operator while connections that never
//! authenticate pile up ([`Gate`]). What each command does is in
//! [`crate::mgt::commands`].

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::adm::{self, status};
use common::bounded::{Deadline, Deadlined};

use crate::mgt::commands::call::{too_few, too_many, Reply};
use crate::mgt::commands::{self, basic::banner};
use crate::mgt::state::Mgr;

/// Admin sessions served at once; past that a new connection is told so
/// and closed (each costs a manager thread).
pub const MAX_SESSIONS: usize = 32;
/// Of those, the most that may not have authenticated yet: the rest are
/// kept for sessions that have, so connections that never authenticate
/// cannot take every place (issue 32).
pub const MAX_UNAUTHENTICATED: usize = 8;
/// Time a connection has to authenticate, from connect to `auth`.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(10);
/// Idle time an authenticated session may wait between commands, and the
/// longest a write to a session may block.
const IDLE: Duration = Duration::from_secs(3600);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest `node.proof` nonce taken.
const MAX_NONCE: usize = 128;

/// The places of a listener's sessions. An authenticated session keeps
/// its place until it ends; a connection still to authenticate holds one
/// of [`MAX_UNAUTHENTICATED`] places, and when a new connection finds
/// them all taken, one of the waiting is closed to make room: the oldest
/// from the address that holds the most. An idle flood thus only ever
/// pushes out its own connections, and the operator's, which
/// authenticates within a round trip, gets through; even from the
/// flood's own address it has as long as eight new connections take.
#[derive(Default)]
struct Gate {
    inner: Mutex<Places>,
}

#[derive(Default)]
struct Places {
    authed: usize,
    /// Oldest first.
    waiting: VecDeque<Waiting>,
    next_id: u64,
    /// Connections closed to make room since the last log line, and when
    /// that was (a flood is logged every 10 s, not once a connection).
    dropped: u64,
    logged: Option<Instant>,
}

struct Waiting {
    id: u64,
    ip: IpAddr,
    /// A handle on the socket, to close it from here.
    sock: TcpStream,
}

/// A connection's place; given back when dropped.
struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    authed: bool,
}

impl Gate {
    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection from `ip` (`sock` a handle on it),
    /// authenticated from the start or not; None when authenticated
    /// sessions hold every place. The second value, when set, is a line
    /// for the log about connections closed to make room.
    fn admit(self: &Arc<Self>, ip: IpAddr, sock: TcpStream, authed: bool) -> (Option<Ticket>, Option<String>) {
        let mut p = self.places();
        let full = |p: &Places| p.authed + p.waiting.len() >= MAX_SESSIONS || (!authed && p.waiting.len() >= MAX_UNAUTHENTICATED);
        while full(&p) {
            let Some(victim) = p.victim() else { return (None, None) };
            if let Some(w) = p.waiting.remove(victim) {
                let _ = w.sock.shutdown(Shutdown::Both);
                p.dropped += 1;
            }
        }
        let id = p.next_id;
        p.next_id += 1;
        if authed {
            p.authed += 1;
        } else {
            p.waiting.push_back(Waiting { id, ip, sock });
        }
        let log = (p.dropped > 0 && p.logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(10))).then(|| {
            let n = std::mem::take(&mut p.dropped);
            p.logged = Some(Instant::now());
            format!("admin: closed {n} connection(s) that had not authenticated, to make room (at most {MAX_UNAUTHENTICATED} wait at once)")
        });
        (Some(Ticket { gate: self.clone(), id, authed }), log)
    }
}

impl Places {
    /// Which waiting connection to close: the oldest from the address
    /// that holds the most.
    fn victim(&self) -> Option<usize> {
        let count = |ip: &IpAddr| self.waiting.iter().filter(|w| w.ip == *ip).count();
        let most = self.waiting.iter().map(|w| count(&w.ip)).max()?;
        self.waiting.iter().position(|w| count(&w.ip) == most)
    }
}

impl Ticket {
    /// The connection authenticated: it moves to the authenticated
    /// places. False when it had been closed to make room meanwhile.
    fn authenticated(&mut self) -> bool {
        let mut p = self.gate.places();
        let Some(i) = p.waiting.iter().position(|w| w.id == self.id) else { return self.authed };
        p.waiting.remove(i);
        p.authed += 1;
        self.authed = true;
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut p = self.gate.places();
        if self.authed {
            p.authed -= 1;
        } else if let Some(i) = p.waiting.iter().position(|w| w.id == self.id) {
            p.waiting.remove(i);
        }
    }
}

/// Accept admin connections forever.
pub fn accept_loop(mgr: Arc<Mgr>, l: TcpListener) {
    let gate = Arc::new(Gate::default());
    for mut s in l.incoming().flatten() {
        let ip = s.peer_addr().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
        let Ok(handle) = s.try_clone() else { continue };
        let (ticket, log) = gate.admit(ip, handle, mgr.secret.is_none());
        if let Some(line) = log {
            mgr.log(&line);
        }
        let Some(ticket) = ticket else {
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = s.write_all(&adm::frame(status::CLOSE, "Too many CLI sessions"));
            mgr.log("admin connection refused: too many sessions");
            continue;
        };
        let m = mgr.clone();
        let _ = std::thread::Builder::new().name("cache-admin-sess".into()).spawn(move || session(m, s, ticket));
    }
}

/// A secret a session may authenticate with; a node secret is one that
/// `node.proof` then proves.
struct Key {
    secret: Vec<u8>,
    node: bool,
}

/// The secrets a connection that arrived at `local` may answer with: the
/// local one (-S or DIR/_.secret), and with --fleet-secret the node
/// secrets of `local` and of each --fleet-address. Never the fleet's
/// secret itself.
fn keys(mgr: &Mgr, local: Option<SocketAddr>) -> Vec<Key> {
    let mut keys: Vec<Key> = mgr.secret.iter().map(|s| Key { secret: s.clone(), node: false }).collect();
    if let Some(f) = &mgr.fleet {
        for a in local.iter().chain(&f.addresses) {
            keys.push(Key { secret: adm::node_secret(&f.secret, *a), node: true });
        }
    }
    keys
}

fn session(mgr: Arc<Mgr>, s: TcpStream, mut ticket: Ticket) {
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    // Answers are single writes; never hold one back for an ACK.
    let _ = s.set_nodelay(true);
    let Ok(out) = s.try_clone() else { return };
    let keys = keys(&mgr, s.local_addr().ok());
    let authed = mgr.secret.is_none();
    let until = Deadline::at((!authed).then(|| Instant::now() + AUTH_DEADLINE));
    let input = BufReader::new(Deadlined::new(s, until.clone(), Some(IDLE)));
    serve(&mgr, input, out, &keys, authed, &mut || {
        until.set(None);
        ticket.authenticated()
    });
}

/// `-d`: the CLI on standard input and output, already authenticated.
/// Returns when standard input ends.
pub fn stdin_session(mgr: Arc<Mgr>) {
    serve(&mgr, BufReader::new(std::io::stdin()), std::io::stdout(), &[], true, &mut || true);
}

/// A session's authentication: the challenge it was sent, whether it
/// answered, and with which node secret (for `node.proof`).
struct Auth<'a> {
    challenge: String,
    keys: &'a [Key],
    authed: bool,
    node_secret: Option<&'a [u8]>,
}

impl<'a> Auth<'a> {
    /// Answer a line before authentication: only help, ping, auth and
    /// quit exist. `on_auth` is told of a good answer and may refuse it
    /// (the connection was closed meanwhile).
    fn before(&mut self, mgr: &Mgr, args: &[String], on_auth: &mut dyn FnMut() -> bool) -> Reply {
        match args[0].as_str() {
            "auth" if args.len() == 2 => {
                let keys: &'a [Key] = self.keys;
                let good = keys.iter().find(|k| args[1].eq_ignore_ascii_case(&adm::auth_response(&self.challenge, &k.secret)));
                match good {
                    Some(k) if on_auth() => {
                        self.authed = true;
                        self.node_secret = k.node.then_some(k.secret.as_slice());
                        (status::OK, banner(mgr))
                    }
                    Some(_) => (status::CLOSE, "Closed to make room".into()),
                    None => {
                        mgr.log("admin authentication failed");
                        (status::CLOSE, "Authentication failed".into())
                    }
                }
            }
            "ping" | "help" | "quit" => commands::run(mgr, args),
            _ => (status::AUTH, adm::auth_request_body(&self.challenge)),
        }
    }

    /// `node.proof NONCE`: proof that this node holds the node secret the
    /// session authenticated with (`common::adm::node_proof`).
    fn proof(&self, args: &[String]) -> Reply {
        match (&args[1..], self.node_secret) {
            ([], _) => too_few(),
            ([_, _, ..], _) => too_many(),
            ([nonce], _) if nonce.len() > MAX_NONCE => (status::PARAM, format!("A nonce is at most {MAX_NONCE} bytes")),
            ([nonce], Some(s)) => (status::OK, adm::node_proof(s, &self.challenge, nonce)),
            ([_], None) => (status::CANT, "This session did not authenticate with a node secret (cache-d --fleet-secret)".into()),
        }
    }
}

/// Run the protocol on one connection.
fn serve(
    mgr: &Arc<Mgr>,
    mut input: impl std::io::BufRead,
    mut out: impl Write,
    keys: &[Key],
    authed: bool,
    on_auth: &mut dyn FnMut() -> bool,
) {
    let mut auth = Auth { challenge: adm::challenge(), keys, authed, node_secret: None };
    let hello =
        if authed { adm::frame(status::OK, &banner(mgr)) } else { adm::frame(status::AUTH, &adm::auth_request_body(&auth.challenge)) };
    if out.write_all(&hello).and_then(|_| out.flush()).is_err() {
        return;
    }
    loop {
        // Before authentication, lines are cut at 80 characters.
        let max = if auth.authed { 1 << 20 } else { 80 };
        let args = match adm::read_command(&mut input, max, auth.authed) {
            Ok(None) | Err(_) => return,
            Ok(Some(Err(e))) => {
                let code = status::SYNTAX;
                if out.write_all(&adm::frame(code, &format!("Syntax Error: {e}"))).is_err() || !auth.authed {
                    return;
                }
                continue;
            }
            Ok(Some(Ok(a))) => a,
        };
        if args.is_empty() {
            continue; // Empty lines get no reply.
        }
        // A leading '-' (a CLI script's "ignore failure" mark) goes, as in
        // Varnish: "-" alone is then an empty command.
        let mut args = args;
        if let Some(rest) = args[0].strip_prefix('-') {
            match rest {
                "" => drop(args.remove(0)),
                r => args[0] = r.to_string(),
            }
        }
        if args.is_empty() {
            if out.write_all(&adm::frame(status::SYNTAX, "Empty CLI command.")).and_then(|_| out.flush()).is_err() || !auth.authed {
                return;
            }
            continue;
        }
        let was_authed = auth.authed;
        let (code, body) = match args[0].as_str() {
            _ if !was_authed => auth.before(mgr, &args, on_auth),
            "node.proof" => auth.proof(&args),
            _ => commands::run(mgr, &args),
        };
        // Before authentication any answer but 200 ends the session.
        let limit = mgr.params().cli_limit;
        if out.write_all(&adm::frame_limited(code, &body, limit)).and_then(|_| out.flush()).is_err()
            || code == status::CLOSE
            || (!was_authed && code != status::OK)
        {
            return;
        }
    }
}
