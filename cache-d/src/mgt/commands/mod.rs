//! The admin commands as one table, as Varnish's `cli_proto` tables: each
//! row has the verb, its syntax and help, its arity and its handler (one
//! function per command). [`run`] checks a line against the table and
//! calls the handler; `help` prints the table.

pub mod basic;
pub mod call;
pub mod param;
pub mod tls;
pub mod vcl;

use std::fmt::Write as _;

use common::adm::status;

use self::call::{too_few, too_many, unknown, Call, Reply};
use crate::mgt::state::Mgr;

/// One admin command.
pub struct Command {
    pub name: &'static str,
    pub syntax: &'static str,
    pub help: &'static str,
    /// Arguments allowed, not counting a leading `-j`.
    pub min: usize,
    pub max: usize,
    pub run: fn(&Call) -> Reply,
}

const MANY: usize = usize::MAX;

const fn cmd(name: &'static str, syntax: &'static str, help: &'static str, min: usize, max: usize, run: fn(&Call) -> Reply) -> Command {
    Command { name, syntax, help, min, max, run }
}

/// Every command, in `help` order (Varnish's names, syntax and help text).
pub const COMMANDS: &[Command] = &[
    cmd("auth", "auth <response>", "Authenticate.", 1, 1, already_authenticated),
    cmd("backend.list", "backend.list [-j] [-p] [<backend_pattern>]", "List backends.", 0, 3, basic::relay),
    cmd(
        "backend.set_health",
        "backend.set_health <backend_pattern> [auto|healthy|sick]",
        "Set health status of backend(s).",
        2,
        2,
        basic::relay,
    ),
    cmd(
        "ban",
        "ban <field> <operator> <arg> [&& <field> <oper> <arg> ...]",
        "Mark obsolete all objects where all the conditions match.",
        3,
        MANY,
        basic::relay,
    ),
    cmd("ban.list", "ban.list [-j]", "List the active bans.", 0, 1, basic::relay),
    cmd("banner", "banner", "Print welcome banner.", 0, 0, basic::banner_cmd),
    cmd("help", "help [-j] [<command>]", "Show command/protocol help.", 0, 2, help),
    cmd(
        "node.proof",
        "node.proof <nonce>",
        "Prove this node holds the node secret this session authenticated with (cache-adm --peers asks).",
        1,
        1,
        in_session,
    ),
    cmd(
        "panic.clear",
        "panic.clear [-z]",
        "Clear the last panic, if any, -z will clear related varnishstat counter(s)",
        0,
        1,
        basic::panic_clear,
    ),
    cmd("panic.show", "panic.show [-j]", "Return the last panic, if any.", 0, 1, basic::panic_show),
    cmd("param.reset", "param.reset [-j] <param>", "Reset parameter to default value.", 1, 2, param::reset),
    cmd("param.set", "param.set [-j] <param> <value>", "Set parameter value.", 2, 3, param::set),
    cmd("param.show", "param.show [-l|-j] [<param>|changed]", "Show parameters and their values.", 0, 2, param::show),
    cmd("pid", "pid [-j]", "Show the pid of the master process, and the worker if it's running.", 0, 0, basic::pid),
    cmd("ping", "ping [-j] [<timestamp>]", "Keep connection alive.", 0, 2, basic::ping),
    cmd("quit", "quit", "Close connection.", 0, 0, basic::quit),
    cmd("start", "start", "Start the Varnish cache process.", 0, 0, basic::start),
    cmd("status", "status [-j]", "Check status of Varnish cache process.", 0, 1, basic::status),
    cmd("stop", "stop", "Stop the Varnish cache process.", 0, 0, basic::stop),
    cmd("storage.list", "storage.list [-j]", "List storage devices.", 0, 1, basic::storage_list),
    cmd("tls.cert.commit", "tls.cert.commit", "Make the staged certificates the ones new TLS handshakes use.", 0, 0, tls::commit),
    cmd("tls.cert.discard", "tls.cert.discard <id>", "Stage the removal of a certificate.", 1, 1, tls::discard),
    cmd("tls.cert.list", "tls.cert.list [-j]", "List the certificates, live and staged.", 0, 1, tls::list),
    cmd(
        "tls.cert.load",
        "tls.cert.load <id> <filename>",
        "Stage a certificate (PEM: certificate, chain and key) under an id.",
        2,
        2,
        tls::load,
    ),
    cmd("tls.cert.rollback", "tls.cert.rollback", "Drop the staged certificate changes.", 0, 0, tls::rollback),
    cmd("vcl.discard", "vcl.discard <name_pattern>...", "Unload the named configurations (when possible).", 1, MANY, vcl::discard),
    cmd(
        "vcl.inline",
        "vcl.inline <configname> <quoted_VCLstring> [auto|cold|warm]",
        "Compile and load the VCL data under the name provided.",
        2,
        3,
        vcl::load,
    ),
    cmd("vcl.label", "vcl.label <label> <configname>", "Apply label to configuration.", 2, 2, vcl::label),
    cmd("vcl.list", "vcl.list [-j]", "List all loaded configuration.", 0, 1, vcl::list),
    cmd(
        "vcl.load",
        "vcl.load <configname> <filename> [auto|cold|warm]",
        "Compile and load the VCL file under the name provided.",
        2,
        3,
        vcl::load,
    ),
    cmd("vcl.show", "vcl.show [-v] [<configname>]", "Display the source code for the specified configuration.", 0, 2, vcl::show),
    cmd("vcl.state", "vcl.state <configname> [auto|cold|warm]", "Force the state of the named configuration.", 1, 2, vcl::state),
    cmd("vcl.use", "vcl.use <configname|label>", "Switch to the named configuration immediately.", 1, 1, vcl::use_),
    cmd(
        "xkey.purge",
        "xkey.purge [-s] <key>...",
        "Remove (-s: make stale, keeping grace and keep) the objects tagged with any of the surrogate keys.",
        1,
        MANY,
        basic::relay,
    ),
];

/// Run one command line (already split into words, at least one).
pub fn run(mgr: &Mgr, argv: &[String]) -> Reply {
    let typed = argv[0].as_str();
    if typed.starts_with(|c: char| c.is_ascii_uppercase()) {
        return (status::UNKNOWN, "all commands are in lower-case.".into());
    }
    // Varnish 2 habit: purge means ban.
    let name = match typed {
        "purge" => "ban",
        "purge.list" => "ban.list",
        n => n,
    };
    let rest = &argv[1..];
    let call = Call { mgr, argv, name, rest, json: rest.first().is_some_and(|a| a == "-j") };
    match COMMANDS.iter().find(|c| c.name == name) {
        Some(c) => {
            let n = rest.len() - usize::from(call.json);
            if n < c.min {
                return too_few();
            }
            if n > c.max {
                return too_many();
            }
            (c.run)(&call)
        }
        // Debugging commands are the child's.
        None if name.starts_with("debug.") => mgr.relay(argv),
        None => unknown(),
    }
}

/// `auth` once authenticated: Varnish answers as for an unknown request.
fn already_authenticated(_: &Call) -> Reply {
    unknown()
}

/// `node.proof` is answered by the session, which knows its challenge
/// and key (`crate::mgt::admin`); it never gets here.
fn in_session(_: &Call) -> Reply {
    unknown()
}

/// The child's debugging commands (relayed), which `help -d` and
/// `help -a` list.
const DEBUG_COMMANDS: &[&str] = &["debug.panic.request", "debug.panic.worker"];

fn help(c: &Call) -> Reply {
    if c.json {
        let list = COMMANDS
            .iter()
            .map(|x| {
                let max = if x.max == MANY { serde_json::json!(-1) } else { serde_json::json!(x.max) };
                serde_json::json!({"request": x.name, "syntax": x.syntax, "help": x.help, "minarg": x.min, "maxarg": max, "flags": "", "json": x.syntax.contains("-j")})
            })
            .collect();
        return c.json_items(list);
    }
    // Flags first, as Varnish: -a everything, -d the debugging commands.
    let (mut plain, mut debug) = (true, false);
    let mut words = c.rest.iter().peekable();
    while let Some(f) = words.next_if(|w| w.starts_with('-')) {
        match f.as_str() {
            "-a" => (plain, debug) = (true, true),
            "-d" => (plain, debug) = (false, true),
            _ => return (status::UNKNOWN, "Unknown flag".into()),
        }
    }
    match words.next() {
        Some(w) => match COMMANDS.iter().find(|x| x.name == w) {
            Some(x) => (status::OK, format!("{}\n  {}", x.syntax, x.help)),
            None => unknown(),
        },
        None => {
            let mut s = String::new();
            for x in COMMANDS.iter().filter(|_| plain) {
                let _ = writeln!(s, "{}", x.syntax);
            }
            for syntax in DEBUG_COMMANDS.iter().filter(|_| debug) {
                let _ = writeln!(s, "{syntax}");
            }
            (status::OK, s)
        }
    }
}
