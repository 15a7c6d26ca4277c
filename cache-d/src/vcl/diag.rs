//! Compiler messages in Varnish's shape: what went wrong, then the file,
//! line and column, the source line, and a marker under the culprit.

use super::ast::Pos;

/// A compile error.
#[derive(Clone, Debug, PartialEq)]
pub struct VclError {
    pub msg: String,
    pub pos: Pos,
}

/// Fail compiling with `msg` at `pos`.
pub fn err<T>(msg: impl Into<String>, pos: Pos) -> Result<T, VclError> {
    Err(VclError { msg: msg.into(), pos })
}

/// A construct cache-d does not implement yet: a compile error that says
/// so, never a silent no-op.
pub fn unsupported<T>(what: &str, pos: Pos) -> Result<T, VclError> {
    Err(VclError { msg: format!("{what} is not supported yet by cache-d's VCL"), pos })
}

/// Line (1-based), column (1-based) and the text of the line holding `at`.
pub fn line_col(src: &str, at: usize) -> (usize, usize, &str) {
    let at = at.min(src.len());
    let start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = src[at..].find('\n').map_or(src.len(), |i| at + i);
    let line = src[..at].matches('\n').count() + 1;
    (line, src[start..at].chars().count() + 1, &src[start..end])
}

impl VclError {
    /// Render with the source (files as in [`super::ast::Program::files`]).
    pub fn render(&self, files: &[(String, String)]) -> String {
        let (name, src) = files.get(self.pos.file).map(|(n, s)| (n.as_str(), s.as_str())).unwrap_or(("<input>", ""));
        let (line, col, text) = line_col(src, self.pos.at);
        let mark = "-".repeat(col.saturating_sub(1)) + &"#".repeat(self.pos.len.max(1).min(text.len().saturating_sub(col - 1).max(1)));
        format!("{}\n('{name}' Line {line} Pos {col})\n{text}\n{mark}\n", self.msg)
    }

    /// Render with the file, line and column but none of the source (for
    /// a file that is not known to be VCL: see `Failed` in vcl/mod.rs).
    pub fn render_position(&self, files: &[(String, String)]) -> String {
        match files.get(self.pos.file) {
            Some((name, src)) => {
                let (line, col, _) = line_col(src, self.pos.at);
                format!("{}\n('{name}' Line {line} Pos {col})\n", self.msg)
            }
            None => format!("{}\n", self.msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_vcc() {
        let src = "vcl 4.1;\nsub vcl_recv {\n    set req.url = \"x\" xyz;\n}\n";
        let at = src.find("xyz").unwrap();
        let e = VclError { msg: "Expected ';' got 'xyz'".into(), pos: Pos { file: 0, at, len: 3 } };
        let out = e.render(&[("test.vcl".into(), src.into())]);
        assert_eq!(out, "Expected ';' got 'xyz'\n('test.vcl' Line 3 Pos 23)\n    set req.url = \"x\" xyz;\n----------------------###\n");
    }
}
