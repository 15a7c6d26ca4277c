//! The admin socket: Varnish's CLI protocol (challenge–response
//! authentication, framed responses, limits on sessions and time). What
//! each command does is in [`crate::mgt::commands`].

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::adm::{self, status};
use common::bounded::{Deadline, Deadlined, Slots};

use crate::mgt::commands::{self, basic::banner};
use crate::mgt::state::Mgr;

/// Admin sessions served at once; more are told so and closed (each costs
/// a manager thread).
pub const MAX_SESSIONS: usize = 32;
/// Time a connection has to authenticate, from connect to `auth`.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(10);
/// Idle time an authenticated session may wait between commands, and the
/// longest a write to a session may block.
const IDLE: Duration = Duration::from_secs(3600);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Accept admin connections forever.
pub fn accept_loop(mgr: Arc<Mgr>, l: TcpListener) {
    let slots = Slots::new(MAX_SESSIONS);
    for mut s in l.incoming().flatten() {
        let Some(slot) = slots.take() else {
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = s.write_all(&adm::frame(status::CLOSE, "Too many CLI sessions"));
            mgr.log("admin connection refused: too many sessions");
            continue;
        };
        let m = mgr.clone();
        let _ = std::thread::Builder::new().name("cache-admin-sess".into()).spawn(move || {
            session(m, s);
            drop(slot);
        });
    }
}

fn session(mgr: Arc<Mgr>, s: TcpStream) {
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    // Answers are single writes; never hold one back for an ACK.
    let _ = s.set_nodelay(true);
    let Ok(out) = s.try_clone() else { return };
    let authed = mgr.secret.is_none();
    let until = Deadline::at((!authed).then(|| Instant::now() + AUTH_DEADLINE));
    let input = BufReader::new(Deadlined::new(s, until.clone(), Some(IDLE)));
    serve(&mgr, input, out, authed, &|| until.set(None));
}

/// `-d`: the CLI on standard input and output, already authenticated.
/// Returns when standard input ends.
pub fn stdin_session(mgr: Arc<Mgr>) {
    serve(&mgr, BufReader::new(std::io::stdin()), std::io::stdout(), true, &|| {});
}

/// Run the protocol on one connection.
fn serve(mgr: &Arc<Mgr>, mut input: impl std::io::BufRead, mut out: impl Write, authed: bool, on_auth: &dyn Fn()) {
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
                    if args[1].eq_ignore_ascii_case(&want) {
                        authed = true;
                        on_auth();
                        (status::OK, banner(mgr))
                    } else {
                        mgr.log("admin authentication failed");
                        (status::CLOSE, "Authentication failed".into())
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
