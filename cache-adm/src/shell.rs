//! The interactive shell: line editing, history, and tab completion of
//! command names (asked of the instance with `help`).

use std::io::Write;

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Context, Editor};

use crate::conn::{Conn, Target};

#[derive(rustyline::Helper, rustyline::Hinter, rustyline::Highlighter, rustyline::Validator)]
struct Names {
    names: Vec<String>,
}

impl Completer for Names {
    type Candidate = String;
    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<String>)> {
        let head = &line[..pos];
        if head.contains(char::is_whitespace) {
            return Ok((pos, Vec::new()));
        }
        Ok((0, self.names.iter().filter(|n| n.starts_with(head)).cloned().collect()))
    }
}

/// Command names from a `help` answer: the first word of each line.
pub fn names_from_help(help: &str) -> Vec<String> {
    let mut v: Vec<String> = help.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect();
    v.sort();
    v.dedup();
    v
}

/// Run the shell over open connections until `quit` or end of input.
pub fn run(conns: &mut [(Target, Conn)], out: &mut impl Write) -> i32 {
    let names = conns.first_mut().and_then(|(_, c)| c.call_line("help").ok()).map(|(_, h)| names_from_help(&h)).unwrap_or_default();
    let Ok(mut rl) = Editor::<Names, FileHistory>::new() else { return 2 };
    rl.set_helper(Some(Names { names }));
    let history = std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache-adm_history"));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    let many = conns.len() > 1;
    let mut worst = 0;
    loop {
        let line = match rl.readline("varnish> ") {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(_) => break,
        };
        if line.trim().is_empty() {
            continue;
        }
        let _ = rl.add_history_entry(line.as_str());
        for (t, c) in conns.iter_mut() {
            if many {
                let _ = writeln!(out, "== {}", t.label);
            }
            match c.call_line(&line) {
                Ok((code, body)) => {
                    let _ = writeln!(out, "{code}\n{body}\n");
                    if code != 200 && code != 201 {
                        worst = worst.max(1);
                    }
                }
                Err(e) => {
                    let _ = writeln!(out, "cache-adm: {}: {e}", t.label);
                    worst = 2;
                }
            }
        }
        if line.trim() == "quit" {
            break;
        }
    }
    if let Some(h) = &history {
        let _ = rl.save_history(h);
    }
    worst
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_from_help_output() {
        let help = "auth <response>\nban <field> <operator> <arg>\nban.list [-j]\n\nping [-j]\n";
        assert_eq!(super::names_from_help(help), vec!["auth", "ban", "ban.list", "ping"]);
    }
}
