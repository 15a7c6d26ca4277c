//! The workspace's source layout, checked: modules and the `use` graph
//! between them (no module may reach itself again through others), the
//! length of every function and file. The rules are in the README's
//! Layout section; `tests/layout.rs` applies them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its crate, its module path (`a::b`, "" for the root)
/// and its text without comments.
pub struct Module {
    pub krate: String,
    pub path: String,
    pub file: PathBuf,
    pub text: String,
}

/// Every `.rs` under `dir`, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name();
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Drop `//` comments (line and doc) and string contents, so that paths in
/// prose or literals do not count as uses.
pub fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '"' && prev != '\\' {
                    in_str = false;
                    kept.push('"');
                }
                prev = if prev == '\\' && c == '\\' { ' ' } else { c };
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\'' {
                in_str = true;
                kept.push('"');
                prev = c;
                continue;
            }
            kept.push(c);
            prev = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// The modules of the crate whose sources are in `src` (the library's;
/// a `main.rs` beside a `lib.rs` is a separate crate using the library).
pub fn modules(krate: &str, src: &Path) -> Vec<Module> {
    let has_lib = src.join("lib.rs").exists();
    rust_files(src)
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src).ok()?.to_string_lossy().replace('\\', "/");
            let rel = rel.strip_suffix(".rs")?;
            if rel == "main" && has_lib || rel.starts_with("bin/") {
                return None;
            }
            let path = match rel {
                "lib" | "main" => String::new(),
                r => r.strip_suffix("/mod").unwrap_or(r).replace('/', "::"),
            };
            let text = strip(&std::fs::read_to_string(&f).ok()?);
            Some(Module { krate: krate.to_string(), path, file: f, text })
        })
        .collect()
}

/// Expand one `use` tree (`a::{b, c::{self, d}}`) into its paths.
pub fn expand_use(tree: &str) -> Vec<String> {
    let alias = regex::Regex::new(r"\s+as\s+[A-Za-z_0-9]+").unwrap();
    let tree: String = alias.replace_all(tree, "").chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand_into("", &tree, &mut out);
    out
}

fn expand_into(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let join = |a: &str, b: &str| if a.is_empty() { b.to_string() } else { format!("{a}::{b}") };
    match tree.find('{') {
        None => {
            let t = tree.strip_suffix("::self").unwrap_or(tree);
            out.push(if t == "self" { prefix.to_string() } else { join(prefix, t) });
        }
        Some(open) => {
            let head = tree[..open].trim_end_matches("::");
            let close = tree.rfind('}').unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let p = join(prefix, head);
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        if i > start {
                            expand_into(&p, &inner[start..i], out);
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            if inner.len() > start {
                expand_into(&p, &inner[start..], out);
            }
        }
    }
}

/// Edges of the `use` graph: module → modules its code names (through
/// `use` or a `crate::`/`super::` path, or a child module's name).
pub fn use_graph(mods: &[Module]) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<&str> = mods.iter().map(|m| m.path.as_str()).collect();
    let use_re = regex::Regex::new(r"(?s)\buse\s+([^;]+);").unwrap();
    let path_re = regex::Regex::new(r"\b((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let mut g = BTreeMap::new();
    for m in mods {
        let inline = inline_mods(&m.text);
        let depth = |at: usize| inline.iter().filter(|(a, b)| (*a..*b).contains(&at)).count();
        let mut to = BTreeSet::new();
        let mut paths: Vec<(usize, String)> = Vec::new();
        for cap in use_re.captures_iter(&m.text) {
            let at = cap.get(0).map_or(0, |c| c.start());
            paths.extend(expand_use(&cap[1]).into_iter().map(|p| (at, p)));
        }
        for cap in path_re.captures_iter(&m.text) {
            paths.push((cap.get(0).map_or(0, |c| c.start()), cap[1].to_string()));
        }
        for (at, p) in paths {
            if let Some(t) = resolve(&m.path, depth(at), &p, &known) {
                if t != m.path {
                    to.insert(t);
                }
            }
        }
        g.insert(m.path.clone(), to);
    }
    g
}

/// Byte ranges of the inline modules (`mod tests { ... }`) in a file.
fn inline_mods(text: &str) -> Vec<(usize, usize)> {
    let re = regex::Regex::new(r"\bmod\s+[a-z_0-9]+\s*\{").unwrap();
    let b = text.as_bytes();
    re.find_iter(text)
        .map(|m| {
            let mut depth = 0usize;
            let mut end = b.len();
            for (i, &c) in b.iter().enumerate().skip(m.end() - 1) {
                match c {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            (m.start(), end)
        })
        .collect()
}

/// The module a path names, if it is one of this crate's. `inline` is how
/// many inline modules deep the path is written in its file.
fn resolve(from: &str, inline: usize, path: &str, known: &BTreeSet<&str>) -> Option<String> {
    let segs: Vec<&str> = path.split("::").collect();
    let here: Vec<&str> = if from.is_empty() { vec![] } else { from.split("::").collect() };
    let (mut base, rest): (Vec<&str>, &[&str]) = match segs[0] {
        "crate" => (vec![], &segs[1..]),
        // Inside an inline module, self:: and super:: stay in this file.
        "self" if inline > 0 => return None,
        "self" => (here.clone(), &segs[1..]),
        "super" => {
            let k = segs.iter().take_while(|s| **s == "super").count();
            if k <= inline {
                return None;
            }
            let mut b = here.clone();
            for _ in 0..k - inline {
                b.pop();
            }
            (b, &segs[k..])
        }
        first => {
            // A child module named without `self::`.
            let mut child = here.clone();
            child.push(first);
            if !known.contains(child.join("::").as_str()) {
                return None;
            }
            (here.clone(), &segs[..])
        }
    };
    let mut found = matches!(segs[0], "crate" | "self" | "super").then(|| base.join("::"));
    for s in rest {
        base.push(s);
        let j = base.join("::");
        if known.contains(j.as_str()) {
            found = Some(j);
        } else {
            break;
        }
    }
    found
}

/// The strongly connected groups of more than one module (import
/// circles), by Tarjan's algorithm.
pub fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        n: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.n);
        t.low.insert(v, t.n);
        t.n += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !g.contains_key(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                t.out.push(group);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), n: 0, out: vec![] };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// A function and its length in lines (from its `fn` line to its closing
/// brace, as rustfmt lays them out).
pub struct FnLen {
    pub file: PathBuf,
    pub line: usize,
    pub name: String,
    pub lines: usize,
}

/// Every function in `text` with its length.
pub fn functions(file: &Path, text: &str) -> Vec<FnLen> {
    let fn_re =
        regex::Regex::new(r"^(\s*)(?:pub(?:\([a-z:]+\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")
            .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(c) = fn_re.captures(l) else { continue };
        let indent = &c[1];
        // A declaration without a body (in a trait) ends with `;`.
        let mut j = i;
        while j < lines.len() && !lines[j].contains('{') && !lines[j].trim_end().ends_with(';') {
            j += 1;
        }
        if j >= lines.len() || lines[j].trim_end().ends_with(';') && !lines[j].contains('{') {
            continue;
        }
        if lines[j].trim_end().ends_with('}') && lines[j].matches('{').count() == lines[j].matches('}').count() {
            continue; // one line
        }
        let close = format!("{indent}}}");
        let end = (j..lines.len()).find(|&k| lines[k].trim_end() == close || lines[k].starts_with(&format!("{indent}}})")));
        if let Some(end) = end {
            out.push(FnLen { file: file.to_path_buf(), line: i + 1, name: c[2].to_string(), lines: end - i + 1 });
        }
    }
    out
}
