//! The policy: the VCL object model the engine and programs share
//! (`model`), the [`policy::Policy`] interface the request steps call, the
//! built-in policy (`builtin`), and the language, VCL 4.0/4.1 — lexing,
//! parsing (with include files expanded), checking, compiling into an
//! executable policy (`compile`), with errors in Varnish's shape; `load`
//! compiles the `-f` file at start.

pub mod ast;
pub mod builtin;
pub mod check;
pub mod compile;
pub mod diag;
pub mod legacy;
pub mod lex;
pub mod load;
pub mod model;
pub mod parse;
pub mod policy;

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
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error.render(&self.files))
    }
}

fn parse_into(prog: &mut Program, name: String, src: String, dir: Option<&Path>, depth: usize) -> Result<(), VclError> {
    let file = prog.files.len();
    prog.files.push((name, src));
    let src = prog.files[file].1.clone();
    let toks = lex::lex(&src).map_err(|e| VclError { msg: e.msg, pos: Pos { file, at: e.at, len: e.len } })?;
    if depth == 0 && !matches!(toks.first().map(|t| &t.tok), Some(lex::Tok::Ident(w)) if w == "vcl") {
        // A Varnish 2 or 3 file: everything to rewrite, in one message.
        let old = legacy::scan(&src, &toks);
        if !old.is_empty() {
            let name = prog.files[file].0.clone();
            return Err(VclError { msg: legacy::render(&name, &src, &old), pos: Pos { file, at: old[0].at, len: 1 } });
        }
        return Err(VclError {
            msg: "VCL version declaration missing: VCL 4 files start with \"vcl 4.1;\" (is this a Varnish 2 or 3 file? see cache-vcl(7) for the 4.1 spellings)".into(),
            pos: Pos { file, at: 0, len: 1 },
        });
    }
    let items = parse::Parser::new(&toks, file).program()?;
    for item in items {
        if let Item::Include { path, pos } = &item {
            if depth >= 10 {
                return Err(VclError { msg: "Includes nested too deep (a loop?)".into(), pos: *pos });
            }
            let p = match dir {
                Some(d) if !Path::new(path).is_absolute() => d.join(path),
                _ => PathBuf::from(path),
            };
            let text =
                std::fs::read_to_string(&p).map_err(|e| VclError { msg: format!("Cannot read file '{}': {e}", p.display()), pos: *pos })?;
            parse_into(prog, p.display().to_string(), text, p.parent(), depth + 1)?;
            continue;
        }
        prog.items.push(item);
    }
    Ok(())
}

/// Parse VCL source text (`vcl.inline`); includes are read relative to
/// the current directory.
pub fn parse_source(name: &str, src: &str) -> Result<Program, LoadError> {
    let mut prog = Program::default();
    match parse_into(&mut prog, name.to_string(), src.to_string(), None, 0) {
        Ok(()) => Ok(prog),
        Err(error) => Err(LoadError { error, files: prog.files }),
    }
}

/// Parse a VCL file (`-f`, `vcl.load`), includes relative to it.
pub fn parse_file(path: &Path) -> Result<Program, LoadError> {
    let mut prog = Program::default();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            let error = VclError { msg: format!("Cannot read file '{}': {e}", path.display()), pos: Pos::default() };
            return Err(LoadError { error, files: Vec::new() });
        }
    };
    match parse_into(&mut prog, path.display().to_string(), text, path.parent(), 0) {
        Ok(()) => Ok(prog),
        Err(error) => Err(LoadError { error, files: prog.files }),
    }
}

#[cfg(test)]
mod tests;
