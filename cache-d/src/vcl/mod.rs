//! The policy: the VCL object model the engine and programs share
//! (`model`), the [`policy::Policy`] interface the request steps call, the
//! built-in policy (`builtin`), and the language, VCL 4.0/4.1 — lexing,
//! parsing (with include files expanded), checking, compiling into an
//! executable policy (`compile`), with errors in Varnish's shape; `load`
//! compiles the `-f` file at start.

pub mod ast;
pub mod builtin;
pub mod builtin_rfc;
pub mod check;
pub mod compile;
pub mod diag;
pub mod filters;
pub mod legacy;
pub mod lex;
pub mod load;
pub mod model;
pub mod parse;
pub mod paths;
pub mod policy;
pub mod types;
pub mod xref;

use std::path::{Path, PathBuf};

/// The built-in policy as VCL text (what `vcl.show -v` prints after a
/// program); cache-d runs the same decisions natively ([`crate::vcl::builtin`]).
pub const BUILTIN_VCL: &str = include_str!("builtin.vcl");

use ast::{Item, Pos, Program};
use diag::VclError;

/// A failed load: the error and the files read so far (for rendering).
#[derive(Debug)]
pub struct LoadError {
    pub error: VclError,
    pub files: Vec<(String, String)>,
    /// May the message quote the line at fault? Not from a file that was
    /// not recognized as VCL (see [`Failed`]).
    pub quote: bool,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.quote {
            true => f.write_str(&self.error.render(&self.files)),
            false => f.write_str(&self.error.render_position(&self.files)),
        }
    }
}

/// Most files in one program, the includes counted.
pub const MAX_FILES: usize = 1024;

/// Why parsing stopped, and whether the message may quote the line at
/// fault. Admin sessions name the files a program is read from, and the
/// manager may read what they may not: a file's lines are quoted only
/// once the file is known to be VCL — the main file by its `vcl 4.x;`
/// declaration, an included file by lexing as VCL from end to end (a
/// password file does not). Otherwise the message names the file, line
/// and column, and nothing of the text.
struct Failed {
    error: VclError,
    quote: bool,
}

impl From<VclError> for Failed {
    fn from(error: VclError) -> Failed {
        Failed { error, quote: true }
    }
}

/// Does `src` begin with the `vcl` keyword (after white space and
/// comments)? Checked on the text, before lexing, so a file that is not
/// VCL is never quoted.
fn declares_vcl(src: &str) -> bool {
    let mut rest = src;
    loop {
        rest = rest.trim_start();
        if rest.starts_with('#') || rest.starts_with("//") {
            rest = rest.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, r)| r);
        } else {
            return rest.strip_prefix("vcl").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_whitespace()));
        }
    }
}

/// Read an include (or the main file): a regular file, within what is
/// left of the program's [`common::adm::MAX_VCL`]. The message is the
/// same whatever the reason (see [`common::adm::unreadable`]).
fn read_vcl(prog: &Program, p: &Path) -> Result<String, String> {
    let used: u64 = prog.files.iter().map(|(_, s)| s.len() as u64).sum();
    let refused = || common::adm::unreadable(&p.display().to_string(), "a VCL file (with the files it includes)", common::adm::MAX_VCL);
    let bytes = common::adm::read_file(p, common::adm::MAX_VCL.saturating_sub(used)).map_err(|_| refused())?;
    String::from_utf8(bytes).map_err(|_| format!("'{}' is not VCL: it is not UTF-8 text", p.display()))
}

fn lex_failed(file: usize, name: &str, e: lex::LexError, quote: bool) -> Failed {
    let pos = Pos { file, at: e.at, len: e.len };
    // The messages that hold no text of the file pass as they are.
    let msg = match quote || e.msg.starts_with("Unterminated") {
        true => e.msg,
        false => format!("'{name}' is not VCL: what is at the position below is no VCL token"),
    };
    Failed { error: VclError { msg, pos }, quote }
}

fn parse_into(prog: &mut Program, name: String, src: String, dir: Option<&Path>, depth: usize) -> Result<(), Failed> {
    let file = prog.files.len();
    let declared = depth == 0 && declares_vcl(&src);
    prog.files.push((name.clone(), src));
    let src = prog.files[file].1.clone();
    // Quoted from here on: the main file declared itself VCL, or an
    // include lexed.
    let toks = lex::lex(&src).map_err(|e| lex_failed(file, &name, e, declared))?;
    if depth == 0 && !matches!(toks.first().map(|t| &t.tok), Some(lex::Tok::Ident(w)) if w == "vcl") {
        // A Varnish 2 or 3 file: everything to rewrite, in one message
        // (the lines it quotes are the old VCL it found).
        let old = legacy::scan(&src, &toks);
        if !old.is_empty() {
            return Err(VclError { msg: legacy::render(&name, &src, &old), pos: Pos { file, at: old[0].at, len: 1 } }.into());
        }
        let error = VclError {
            msg: "VCL version declaration missing: VCL 4 files start with \"vcl 4.1;\" (is this a Varnish 2 or 3 file? see cache-vcl(7) for the 4.1 spellings)".into(),
            pos: Pos { file, at: 0, len: 1 },
        };
        return Err(Failed { error, quote: false });
    }
    let v41 = match depth {
        0 => matches!(toks.get(1), Some(lex::Token { tok: lex::Tok::Real(v), .. }) if *v > 4.05),
        _ => prog.items.iter().any(|i| matches!(i, Item::Version { version, .. } if version == "4.1")),
    };
    lex::check_header_names(&src, &toks, v41).map_err(|e| lex_failed(file, &name, e, true))?;
    let items = parse::Parser::new(&toks, file).program()?;
    for mut item in items {
        if let Item::Include { path, glob, pos } = &item {
            let found = resolve_include(path, dir, *pos)?;
            let paths = match glob {
                true => glob_files(&found),
                false => vec![found],
            };
            if paths.is_empty() {
                return Err(VclError { msg: "glob pattern matched no files.".into(), pos: *pos }.into());
            }
            for p in paths {
                let text = read_include(prog, &p, *pos, depth)?;
                parse_into(prog, p.display().to_string(), text, p.parent(), depth + 1)?;
            }
            continue;
        }
        if let Item::Acl { entries, .. } = &mut item {
            *entries = acl_includes(prog, std::mem::take(entries), dir, depth)?;
        }
        prog.items.push(item);
    }
    Ok(())
}

/// An included file's text, within the limits on nesting and file count.
fn read_include(prog: &Program, p: &Path, pos: Pos, depth: usize) -> Result<String, Failed> {
    if depth >= 10 {
        return Err(VclError { msg: "Includes nested too deep (a loop?)".into(), pos }.into());
    }
    if prog.files.len() >= MAX_FILES {
        return Err(VclError { msg: format!("More than {MAX_FILES} files in one program"), pos }.into());
    }
    Ok(read_vcl(prog, p).map_err(|msg| VclError { msg, pos })?)
}

/// An include's path (see [`paths::find_vcl`]).
fn resolve_include(path: &str, dir: Option<&Path>, pos: Pos) -> Result<PathBuf, VclError> {
    paths::find_vcl(path, dir).map_err(|msg| VclError { msg, pos })
}

/// The files a glob pattern names, in name order (as glob(3); the
/// wildcards `*`, `?` in the last component only, and neither matches
/// a leading dot).
fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(pat)) = (pattern.parent(), pattern.file_name().and_then(|f| f.to_str())) else { return Vec::new() };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let Ok(list) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = list
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| (pat.starts_with('.') || !n.starts_with('.')) && glob_match(pat.as_bytes(), n.as_bytes()))
        })
        .map(|e| pattern.with_file_name(e.file_name()))
        .collect();
    out.sort();
    out
}

fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob_match(&pat[1..], name) || (!name.is_empty() && glob_match(pat, &name[1..])),
        (Some(b'?'), Some(_)) => glob_match(&pat[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob_match(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// An ACL's entries with its `include "file";` lines replaced by the
/// entries the files hold.
fn acl_includes(prog: &mut Program, entries: Vec<ast::AclEntry>, dir: Option<&Path>, depth: usize) -> Result<Vec<ast::AclEntry>, Failed> {
    let mut out = Vec::new();
    for e in entries {
        if !e.include {
            out.push(e);
            continue;
        }
        let p = resolve_include(&e.addr, dir, e.pos)?;
        let text = read_include(prog, &p, e.pos, depth)?;
        let name = p.display().to_string();
        let file = prog.files.len();
        prog.files.push((name.clone(), text));
        let src = prog.files[file].1.clone();
        let toks = lex::lex(&src).map_err(|err| lex_failed(file, &name, err, false))?;
        let v41 = prog.items.iter().any(|i| matches!(i, Item::Version { version, .. } if version == "4.1"));
        lex::check_header_names(&src, &toks, v41).map_err(|err| lex_failed(file, &name, err, true))?;
        let inner = parse::Parser::new(&toks, file).acl_entries("")?;
        out.extend(acl_includes(prog, inner, p.parent(), depth + 1)?);
    }
    Ok(out)
}

/// Parse VCL source text (`vcl.inline`); includes are read relative to
/// the current directory.
pub fn parse_source(name: &str, src: &str) -> Result<Program, LoadError> {
    let mut prog = Program::default();
    match parse_into(&mut prog, name.to_string(), src.to_string(), None, 0) {
        Ok(()) => Ok(prog),
        Err(Failed { error, quote }) => Err(LoadError { error, files: prog.files, quote }),
    }
}

/// Parse a VCL file (`-f`, `vcl.load`), includes relative to it; the
/// main file's text is the program's first file.
pub fn parse_file(path: &Path) -> Result<Program, LoadError> {
    let mut prog = Program::default();
    let text = match read_vcl(&prog, path) {
        Ok(t) => t,
        Err(msg) => return Err(LoadError { error: VclError { msg, pos: Pos::default() }, files: Vec::new(), quote: false }),
    };
    match parse_into(&mut prog, path.display().to_string(), text, path.parent(), 0) {
        Ok(()) => Ok(prog),
        Err(Failed { error, quote }) => Err(LoadError { error, files: prog.files, quote }),
    }
}

#[cfg(test)]
mod tests;
