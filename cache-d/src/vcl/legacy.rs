//! Varnish 2.x and 3.x files: every construct that needs a VCL 4.1
//! spelling, found in one pass over the tokens (so an operator migrating a
//! file sees the whole list at once, not one error per attempt).

use crate::vcl::diag::line_col;
use crate::vcl::lex::{Tok, Token};

/// One construct to rewrite: where, what, and the 4.1 spelling.
#[derive(Debug, PartialEq)]
pub struct Finding {
    pub at: usize,
    pub what: String,
    pub instead: String,
}

/// Renamed variables: (old, new).
const RENAMED: &[(&str, &str)] = &[
    ("req.request", "req.method"),
    ("bereq.request", "bereq.method"),
    ("req.backend", "req.backend_hint"),
    ("resp.response", "resp.reason"),
    ("beresp.response", "beresp.reason"),
    ("obj.response", "resp.reason (in vcl_synth) or obj.reason (read only)"),
    ("req.hash", "hash_data(...) in vcl_hash"),
    ("obj.lastuse", "(nothing: removed in Varnish 4)"),
    ("beresp.cacheable", "beresp.uncacheable (negated)"),
    ("obj.cacheable", "(nothing: removed in Varnish 4)"),
    ("req.grace", "req.grace in vcl_recv bounds a hit's staleness; beresp.grace sets it"),
    ("client.port", "std.port(client.ip)"),
    ("server.port", "std.port(server.ip)"),
];

/// Old subroutine names: (old, new).
const SUBS: &[(&str, &str)] = &[("vcl_fetch", "vcl_backend_response"), ("vcl_error", "vcl_synth (client side) or vcl_backend_error")];

/// Bare actions of Varnish 2 (`pass;`) and `return (lookup)`.
const ACTIONS: &[&str] = &["pass", "pipe", "lookup", "deliver", "fetch", "hash", "restart", "discard", "keep"];

/// The constructs in `toks` (of `src`) that Varnish 4.1 spells otherwise.
pub fn scan(src: &str, toks: &[Token]) -> Vec<Finding> {
    let mut out = Vec::new();
    let text = |t: &Token| src.get(t.at..t.at + t.len).unwrap_or("").to_string();
    for (i, t) in toks.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| &toks[p].tok);
        let next = toks.get(i + 1).map(|n| &n.tok);
        let Tok::Ident(w) = &t.tok else { continue };
        let mut find = |what: String, instead: &str| out.push(Finding { at: t.at, what, instead: instead.to_string() });
        if let Some((_, new)) = RENAMED.iter().find(|(old, _)| w == old || w.strip_prefix(old).is_some_and(|r| r.starts_with('.'))) {
            // req.grace is still a variable in 4.1 (with a new meaning): only
            // flag the Varnish 3 renames that no longer exist.
            if w != "req.grace" {
                find(text(t), new);
            }
            continue;
        }
        match w.as_str() {
            "sub" => {}
            s if SUBS.iter().any(|(old, _)| *old == s) && matches!(prev, Some(Tok::Ident(k)) if k == "sub" || k == "call") => {
                let new = SUBS.iter().find(|(old, _)| *old == s).map(|(_, n)| *n).unwrap_or_default();
                find(format!("sub {s}"), new);
            }
            "purge" | "purge_url" | "purge_hash" if next == Some(&Tok::Punct("(")) => {
                find(format!("{w}()"), "ban(\"...\") or return (purge) in vcl_recv")
            }
            "error" if matches!(next, Some(Tok::Int(_))) => find("error NNN \"reason\"".into(), "return (synth(NNN, \"reason\"))"),
            "esi" if next == Some(&Tok::Punct(";")) => find("esi;".into(), "set beresp.do_esi = true;"),
            "remove" => find("remove".into(), "unset"),
            "synthetic" if matches!(next, Some(Tok::Str(_))) => find("synthetic \"...\";".into(), "set resp.body = \"...\"; (vcl_synth)"),
            a if ACTIONS.contains(&a) && next == Some(&Tok::Punct(";")) && prev != Some(&Tok::Punct("=")) => {
                find(format!("{a};"), &format!("return ({});", if a == "lookup" { "hash" } else { a }))
            }
            "lookup" if prev == Some(&Tok::Punct("(")) => find("return (lookup)".into(), "return (hash) in vcl_recv"),
            _ => {}
        }
    }
    out
}

/// The findings as lines: `file line L pos C: what -> instead`.
pub fn render(name: &str, src: &str, findings: &[Finding]) -> String {
    let mut s = format!(
        "This looks like a Varnish 2 or 3 file: VCL 4 files start with \"vcl 4.1;\". {} construct(s) need a 4.1 spelling (see cache-vcl(7)):\n",
        findings.len()
    );
    for f in findings {
        let (line, col, _) = line_col(src, f.at);
        s += &format!("('{name}' Line {line} Pos {col}) {} -> {}\n", f.what, f.instead);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_varnish_3_file_is_listed_whole() {
        let src = r#"backend default { .host = "127.0.0.1"; .port = "8080"; }
sub vcl_recv {
    if (req.request == "PURGE") { purge_url(req.url); error 200 "Purged"; }
    set req.backend = default;
    remove req.http.Cookie;
    return (lookup);
}
sub vcl_fetch {
    if (beresp.cacheable) { esi; }
    pass;
}
sub vcl_error {
    set obj.http.x = "1";
    synthetic "oops";
    deliver;
}
"#;
        let toks = crate::vcl::lex::lex(src).unwrap();
        let found: Vec<String> = scan(src, &toks).into_iter().map(|f| f.what).collect();
        assert_eq!(
            found,
            [
                "req.request",
                "purge_url()",
                "error NNN \"reason\"",
                "req.backend",
                "remove",
                "return (lookup)",
                "sub vcl_fetch",
                "beresp.cacheable",
                "esi;",
                "pass;",
                "sub vcl_error",
                "synthetic \"...\";",
                "deliver;"
            ]
        );
        let text = render("old.vcl", src, &scan(src, &toks));
        assert!(text.contains("('old.vcl' Line 3 Pos 9) req.request -> req.method"), "{text}");
        assert!(text.contains("13 construct(s)"), "{text}");
    }

    #[test]
    fn a_clean_file_has_nothing_to_list() {
        let src = "sub vcl_recv { set req.http.x = req.method; return (hash); }";
        assert!(scan(src, &crate::vcl::lex::lex(src).unwrap()).is_empty());
    }
}
