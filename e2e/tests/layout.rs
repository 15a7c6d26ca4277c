//! The layout rules of the README's Layout section, checked on the
//! sources: no import circles in any crate, at most 8 loose files in
//! cache-d/src, no function over 100 lines (the VCL front end's dispatch
//! excepted), no file over 800 lines.

use std::path::{Path, PathBuf};

use e2e::layout;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The workspace's crates: (name, src dir).
fn crates() -> Vec<(String, PathBuf)> {
    let r = root();
    let manifest = std::fs::read_to_string(r.join("Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).unwrap().split(']').next().unwrap();
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| (m.to_string(), r.join(m).join("src")))
        .collect()
}

/// Functions allowed past 100 lines: the VCL front end's dispatch (one
/// arm per token, statement, variable or call, read best as one match).
const LONG_ALLOWED: &[(&str, &str)] = &[
    ("cache-d/src/vcl/lex.rs", "lex"),
    ("cache-d/src/vcl/parse.rs", "stmt"),
    ("cache-d/src/vcl/check.rs", "check"),
    ("cache-d/src/vcl/compile/mod.rs", "stmt"),
    ("cache-d/src/vcl/compile/funcs.rs", "call"),
];

#[test]
fn no_import_circles() {
    let mut found = Vec::new();
    for (name, src) in crates() {
        let mods = layout::modules(&name, &src);
        let g = layout::use_graph(&mods);
        for c in layout::circles(&g) {
            found.push(format!("{name}: {}", c.join(" ↔ ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn few_loose_files_in_cache_d() {
    let src = root().join("cache-d/src");
    let loose: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file() && e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(loose.len() <= 8, "{} loose .rs files in cache-d/src (at most 8): {loose:?}", loose.len());
}

fn all_sources() -> Vec<PathBuf> {
    let r = root();
    let mut files = Vec::new();
    for (m, _) in crates() {
        files.extend(layout::rust_files(&r.join(m)));
    }
    files.extend(layout::rust_files(&r.join("fuzz/fuzz_targets")));
    files
}

#[test]
fn no_long_functions() {
    let r = root();
    let mut long = Vec::new();
    for f in all_sources() {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f.strip_prefix(&r).unwrap().to_string_lossy().into_owned();
        for func in layout::functions(&f, &text) {
            if func.lines > 100 && !LONG_ALLOWED.contains(&(rel.as_str(), func.name.as_str())) {
                long.push(format!("{rel}:{} fn {} is {} lines", func.line, func.name, func.lines));
            }
        }
    }
    assert!(long.is_empty(), "functions over 100 lines:\n{}", long.join("\n"));
}

#[test]
fn no_long_files() {
    let r = root();
    let mut long = Vec::new();
    for f in all_sources() {
        let n = std::fs::read_to_string(&f).unwrap().lines().count();
        if n > 800 {
            long.push(format!("{} has {n} lines", f.strip_prefix(&r).unwrap().display()));
        }
    }
    assert!(long.is_empty(), "files over 800 lines:\n{}", long.join("\n"));
}

#[test]
fn the_checker_sees_circles_and_long_functions() {
    let uses = layout::expand_use("crate::{a::{self, B}, c::D as E}");
    assert_eq!(uses, ["crate::a", "crate::a::B", "crate::c::D"]);
    let mut g = std::collections::BTreeMap::new();
    g.insert("a".to_string(), ["b".to_string()].into());
    g.insert("b".to_string(), ["c".to_string()].into());
    g.insert("c".to_string(), ["a".to_string()].into());
    g.insert("d".to_string(), ["a".to_string()].into());
    assert_eq!(layout::circles(&g), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    let body: String = (0..101).map(|i| format!("    let x{i} = {i};\n")).collect();
    let text = format!("fn long() {{\n{body}}}\n\nfn short() {{\n    1\n}}\n");
    let f = layout::functions(Path::new("x.rs"), &text);
    assert_eq!(f.iter().map(|f| (f.name.as_str(), f.lines)).collect::<Vec<_>>(), [("long", 103), ("short", 3)]);
}
