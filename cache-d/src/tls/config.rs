//! The `-A` file, in hitch's syntax (which Varnish Enterprise's `-A` also
//! reads): `pem-file = "PATH"` lines, one per certificate, and
//! `frontend = { host = "H" port = "P" pem-file = "PATH" }` sections, each
//! an `https` listener. `#` starts a comment. Keys this reader does not act
//! on are refused with their line, not ignored.

use std::path::{Path, PathBuf};

/// What an `-A` file asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TlsFile {
    /// Certificate bundles in the order given (the first is the default).
    pub pem_files: Vec<PathBuf>,
    /// `host:port` of each frontend (`*` or empty host: every address).
    pub frontends: Vec<String>,
}

/// Read and parse `path`; errors name the file and line.
pub fn read(path: &Path) -> Result<TlsFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("-A {}: {e}", path.display()))?;
    parse(&text).map_err(|(line, why)| format!("-A {}:{line}: {why}", path.display()))
}

/// Parse the text of an `-A` file; an error gives its line number.
pub fn parse(text: &str) -> Result<TlsFile, (usize, String)> {
    let mut out = TlsFile::default();
    // Inside a frontend: its line, host and port so far.
    let mut frontend: Option<(usize, String, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if line == "}" {
            let Some((_, host, port)) = frontend.take() else { return Err((n, "'}' outside a frontend".into())) };
            if port.is_empty() {
                return Err((n, "a frontend needs a port".into()));
            }
            let host = if host == "*" { String::new() } else { host };
            out.frontends.push(format!("{host}:{port}"));
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { return Err((n, format!("expected key = value, found '{line}'"))) };
        let (key, value) = (key.trim(), value.trim());
        if key == "frontend" {
            if value != "{" {
                return Err((n, "only frontend = { ... } sections are understood".into()));
            }
            if frontend.is_some() {
                return Err((n, "a frontend inside a frontend".into()));
            }
            frontend = Some((n, String::new(), String::new()));
            continue;
        }
        let value = unquote(value).ok_or_else(|| (n, format!("the value of {key} must be in double quotes")))?;
        match (key, frontend.as_mut()) {
            ("pem-file", _) => out.pem_files.push(PathBuf::from(value)),
            ("host", Some(f)) => f.1 = value,
            ("port", Some(f)) => {
                value.parse::<u16>().map_err(|_| (n, format!("bad port \"{value}\"")))?;
                f.2 = value
            }
            ("host" | "port", None) => return Err((n, format!("{key} belongs in a frontend section"))),
            _ => return Err((n, format!("unknown key '{key}'"))),
        }
    }
    if let Some((line, _, _)) = frontend {
        return Err((line, "frontend not closed with '}'".into()));
    }
    Ok(out)
}

fn unquote(v: &str) -> Option<String> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('"')).then(|| inner.to_string())
}
