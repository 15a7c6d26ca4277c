//! The admin socket: Varnish's CLI protocol (challenge–response
//! authentication, framed responses, limits on sessions and time), and
//! the room kept for the operator while connections that never
//! authenticate pile up ([`Gate`]). What each command does is in
//! [`crate::mgt::commands`].

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::adm::{self, status};
use common::bounded::{Deadline, Deadlined};

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

fn session(mgr: Arc<Mgr>, s: TcpStream, mut ticket: Ticket) {
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    // Answers are single writes; never hold one back for an ACK.
    let _ = s.set_nodelay(true);
    let Ok(out) = s.try_clone() else { return };
    let authed = mgr.secret.is_none();
    let until = Deadline::at((!authed).then(|| Instant::now() + AUTH_DEADLINE));
    let input = BufReader::new(Deadlined::new(s, until.clone(), Some(IDLE)));
    serve(&mgr, input, out, authed, &mut || {
        until.set(None);
        ticket.authenticated()
    });
}

/// `-d`: the CLI on standard input and output, already authenticated.
/// Returns when standard input ends.
pub fn stdin_session(mgr: Arc<Mgr>) {
    serve(&mgr, BufReader::new(std::io::stdin()), std::io::stdout(), true, &mut || true);
}

/// Run the protocol on one connection. `on_auth` is told of a good
/// `auth` answer and may refuse it (the connection was closed meanwhile
/// to make room).
fn serve(mgr: &Arc<Mgr>, mut input: impl std::io::BufRead, mut out: impl Write, authed: bool, on_auth: &mut dyn FnMut() -> bool) {
    let mut authed = authed;
    let challenge = adm::challenge();
    let hello = if authed { adm::frame(status::OK, &banner(mgr)) } else { adm::frame(status::AUTH, &adm::auth_request_body(&challenge)) };
    if out.write_all(&hello).and_then(|_| out.flush()).is_err() {
        return;
    }
    loop {
        // Before authentication, lines are cut at 80 characters and only
        // help, ping, auth and quit exist.
        let max = if authed { 1 << 20 } else { 80 };
        let args = match adm::read_command(&mut input, max, authed) {
            Ok(None) | Err(_) => return,
            Ok(Some(Err(e))) => {
                let code = status::SYNTAX;
                if out.write_all(&adm::frame(code, &format!("Syntax Error: {e}"))).is_err() || !authed {
                    return;
                }
                continue;
            }
            Ok(Some(Ok(a))) => a,
        };
        if args.is_empty() {
            continue; // Empty lines get no reply.
        }
        let (code, body) = if !authed {
            match args[0].as_str() {
                "auth" if args.len() == 2 => {
                    let want = adm::auth_response(&challenge, mgr.secret.as_deref().unwrap_or_default());
                    if !args[1].eq_ignore_ascii_case(&want) {
                        mgr.log("admin authentication failed");
                        (status::CLOSE, "Authentication failed".into())
                    } else if on_auth() {
                        authed = true;
                        (status::OK, banner(mgr))
                    } else {
                        (status::CLOSE, "Closed to make room".into())
                    }
                }
                "ping" | "help" | "quit" => commands::run(mgr, &args),
                _ => (status::AUTH, adm::auth_request_body(&challenge)),
            }
        } else {
            commands::run(mgr, &args)
        };
        if out.write_all(&adm::frame(code, &body)).and_then(|_| out.flush()).is_err()
            || code == status::CLOSE
            || (!authed && code != status::OK)
        {
            return;
        }
    }
}
