//! Command lines: bad flags, --help, and man pages that agree with it.

use std::collections::BTreeSet;

use crate::util::*;

pub(crate) const TOOLS: [&str; 6] = ["cache-d", "cache-adm", "cache-stat", "cache-log", "cache-ncsa", "cache-bench"];

#[test]
fn bad_flags_give_usage_and_exit_2() {
    for t in TOOLS {
        let o = run(t, &["--no-such-flag"]);
        assert_eq!(o.status.code(), Some(2), "{t}");
        assert!(stderr(&o).contains("Usage:"), "{t}: {}", stderr(&o));
    }
    let o = run("cache-log", &["-g", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown grouping"));
    let o = run("cache-d", &["-b", "127.0.0.1:1", "-p", "no_such_param=1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Unknown parameter"), "{}", stderr(&o));
    let o = run("cache-ncsa", &["-d", "-F", "%Z", "-n", "/nonexistent/x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("%Z"));
}

/// A program's command lines: itself and, for cache-bench, each
/// subcommand (`["cache-bench", "run"]`...).
pub(crate) fn command_lines(t: &'static str) -> Vec<Vec<&'static str>> {
    let subs: &[&str] = if t == "cache-bench" { &["run", "agent", "merge", "plot", "origin"] } else { &[] };
    std::iter::once(vec![t]).chain(subs.iter().map(|s| vec![t, *s])).collect()
}

/// The flags `--help` shows for one command line.
pub(crate) fn flags_of(words: &[&str]) -> BTreeSet<String> {
    let args: Vec<&str> = words[1..].iter().copied().chain(["--help"]).collect();
    help_flags(&stdout(&run(words[0], &args)))
}

/// Every flag a program's `--help` shows, its subcommands' included.
pub(crate) fn all_flags(t: &'static str) -> BTreeSet<String> {
    command_lines(t).iter().flat_map(|w| flags_of(w)).collect()
}

/// Flags in `--help` output: `-x` and `--long` words at the start of option lines.
pub(crate) fn help_flags(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') {
            continue;
        }
        // The flag column ends at the first run of two spaces.
        let t = t.split("  ").next().unwrap_or(t);
        for word in t.split([',', ' ']).filter(|w| w.starts_with('-')) {
            let w = word.split(['=', '<', '[']).next().unwrap();
            if w != "-h" && w != "--help" && w != "-V" && w != "--version" && w.len() > 1 {
                out.insert(w.to_string());
            }
        }
    }
    out
}

#[test]
fn man_pages_document_every_flag_in_help() {
    let man = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    for t in TOOLS {
        let page = std::fs::read_to_string(man.join(format!("{t}.1"))).unwrap_or_else(|e| panic!("man/{t}.1: {e}"));
        // roff escapes hyphens in option names as \-.
        let page = page.replace("\\-", "-");
        let flags = all_flags(t);
        assert!(!flags.is_empty(), "{t}: no flags found in --help");
        for f in &flags {
            assert!(page.contains(&format!("B{f}")) || page.contains(&format!("{f} ")), "man/{t}.1 does not document {f}");
        }
        // And the other way: every option the page's OPTIONS section
        // lists is one the program has.
        for f in man_options(&page) {
            let known = flags.contains(&f) || ["-h", "--help", "-V", "--version"].contains(&f.as_str());
            assert!(known, "man/{t}.1 documents {f}, which --help does not show");
        }
    }
}

/// The options a man page's OPTIONS section lists: the `-x`/`--long` words
/// of each `.TP` entry's tag line.
fn man_options(page: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let (mut in_options, mut tag) = (false, false);
    for line in page.lines() {
        if let Some(h) = line.strip_prefix(".SH ") {
            in_options = h.trim_matches('"') == "OPTIONS";
        } else if in_options && line.starts_with(".TP") {
            tag = true;
        } else if tag {
            tag = false;
            for w in line.split([' ', '"', ',']).filter(|w| w.starts_with('-') && w.len() > 1) {
                out.insert(w.trim_end_matches(['.', ';', ')']).to_string());
            }
        }
    }
    out
}

/// Every man page renders without a roff warning (a line starting with a
/// dot that is not a macro loses its text, for one). Needs man(1); skipped
/// where it is not installed.
#[test]
fn man_pages_render_without_warnings() {
    let man = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    if std::process::Command::new("man").arg("--version").output().is_err() {
        eprintln!("man is not installed: the pages' rendering is not checked");
        return;
    }
    for page in std::fs::read_dir(&man).unwrap().map(|e| e.unwrap().path()) {
        let o = std::process::Command::new("man")
            .args(["--warnings", "-E", "UTF-8", "-l"])
            .arg(&page)
            .env("MANWIDTH", "80")
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap();
        assert!(o.status.success() && o.stderr.is_empty(), "{}: {}", page.display(), String::from_utf8_lossy(&o.stderr));
    }
}
