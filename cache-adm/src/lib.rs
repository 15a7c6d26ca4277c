//! cache-adm: the admin client. Connects, authenticates with the secret,
//! runs commands and prints the answers; drives cache-d and varnishd alike.

pub mod cli;
pub mod conn;
pub mod peers;
pub mod shell;

use std::io::{BufRead, Write};
use std::time::Duration;

use common::adm::status;

use crate::cli::Args;
use crate::conn::{command_line, targets, Conn};

/// Run; returns the exit status (0 all OK, 1 a command failed, 2 a target
/// could not be reached or authenticated).
pub fn run(args: Args, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let timeout = Duration::from_secs_f64(args.timeout.clamp(0.001, 3600.0));
    if let (Some(node), Some(fleet)) = (args.node_secret, &args.secret) {
        return match common::adm::read_file(fleet, common::adm::MAX_SECRET) {
            Ok(s) => i32::from(out.write_all(&common::adm::node_secret(&s, node)).is_err()),
            Err(e) => {
                let _ = writeln!(err, "cache-adm: -S {e}");
                2
            }
        };
    }
    if let Some(spec) = &args.peers {
        return fleet(&args, spec, timeout, out, err);
    }
    let targets = match targets(&args) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "cache-adm: {e}");
            return 2;
        }
    };
    // No command and a terminal: the interactive shell.
    if args.command.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        let mut conns = Vec::new();
        for t in &targets {
            match Conn::open(t, timeout) {
                Ok(c) => conns.push((t.clone(), c)),
                Err(e) => {
                    let _ = writeln!(err, "cache-adm: {e}");
                    return 2;
                }
            }
        }
        return shell::run(&mut conns, out);
    }
    let lines: Vec<String> = if args.command.is_empty() {
        conn::stdin_commands(std::io::stdin().lock().lines().map_while(Result::ok))
    } else {
        vec![command_line(&args.command)]
    };
    let many = targets.len() > 1;
    let mut worst = 0;
    for t in &targets {
        if many {
            let _ = writeln!(out, "== {}", t.label);
        }
        let mut conn = match Conn::open(t, timeout) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(err, "cache-adm: {e}");
                worst = 2;
                continue;
            }
        };
        for line in &lines {
            match conn.call_line(line) {
                Ok((code, body)) => {
                    if args.raw {
                        let _ = writeln!(out, "{code:<3} {:<8}", body.len());
                    }
                    let _ = writeln!(out, "{body}");
                    if code == status::TRUNCATED {
                        let _ = writeln!(out, "[response was truncated]");
                    }
                    if code != status::OK && code != status::TRUNCATED {
                        let _ = writeln!(
                            err,
                            "cache-adm: {}Command failed with error code {code}",
                            if many { format!("{}: ", t.label) } else { String::new() }
                        );
                        worst = worst.max(1);
                    }
                }
                Err(e) => {
                    let _ = writeln!(err, "cache-adm: {}: {e}", t.label);
                    worst = 2;
                    break;
                }
            }
        }
    }
    worst
}

/// `--peers`: the command on every node at once; 0 only when all said 200
/// (and at least `--expect` answered).
fn fleet(args: &Args, spec: &str, timeout: Duration, out: &mut impl Write, err: &mut impl Write) -> i32 {
    if args.command.is_empty() {
        let _ = writeln!(
            err,
            "cache-adm: --peers needs a command\nUsage: cache-adm --peers FILE|dns:NAME:PORT [-S FILE] [--retry-for DURATION] [--expect N] [--nameserver IP[:PORT]] [-j] COMMAND..."
        );
        return 2;
    }
    let line = command_line(&args.command);
    let plan = peers::Plan {
        secret: args.secret.as_deref(),
        line: &line,
        timeout,
        retry_for: args.retry_for.unwrap_or_default(),
        expect: args.expect.map(|n| n as usize),
    };
    let outcomes = match peers::Peers::parse(spec, &args.nameserver).and_then(|p| peers::run_all(&p, &plan)) {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(err, "cache-adm: {e}");
            return 2;
        }
    };
    if args.json {
        let _ = writeln!(out, "{}", peers::json(&outcomes));
    } else {
        for o in &outcomes {
            let _ = writeln!(out, "{}", peers::text_line(o));
        }
    }
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.ok() && !o.gone).map(|o| o.node.as_str()).collect();
    let answered = outcomes.iter().filter(|o| o.status.is_some()).count();
    let mut code = 0;
    if !failed.is_empty() {
        let _ = writeln!(err, "cache-adm: {} of {} node(s) failed: {}", failed.len(), outcomes.len(), failed.join(" "));
        code = 1;
    }
    if let Some(n) = plan.expect.filter(|n| answered < *n) {
        let _ = writeln!(err, "cache-adm: expected {n} node(s), {answered} answered");
        code = 1;
    }
    code
}
