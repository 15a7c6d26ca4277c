//! Storage specifications: `-s [name=]kind[,options]` as varnishd takes
//! them, given any number of times. Parsed here (the manager, the child
//! and `cache-d -C` all need the names: VCL names a store as
//! `storage.<name>`); the stores themselves live in [`crate::cache`].

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::params::parse_size;

/// What a store keeps its objects in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Memory, up to `size` bytes.
    Malloc { size: u64 },
    /// Bodies in a file of `size` bytes, forgotten at every start
    /// (Varnish's `file`).
    File { path: PathBuf, size: u64 },
    /// Objects in a file of `size` bytes that outlive the process;
    /// `wipe`: a file this version cannot use is emptied, not refused.
    Persistent { path: PathBuf, size: u64, wipe: bool },
}

impl Kind {
    /// The name storage.list and the Storage log record give the kind.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Malloc { .. } => "malloc",
            Kind::File { .. } => "file",
            Kind::Persistent { .. } => "persistent",
        }
    }

    /// The counters' group: `SMA.<name>.*`, `SMF.<name>.*`, `SMP.<name>.*`.
    pub fn group(&self) -> &'static str {
        match self {
            Kind::Malloc { .. } => "SMA",
            Kind::File { .. } => "SMF",
            Kind::Persistent { .. } => "SMP",
        }
    }

    /// A disk store's file path, size, whether it is persistent, and
    /// whether to wipe it (None for memory).
    pub fn disk(&self) -> Option<(&std::path::Path, u64, bool, bool)> {
        match self {
            Kind::Malloc { .. } => None,
            Kind::File { path, size } => Some((path, *size, false, false)),
            Kind::Persistent { path, size, wipe } => Some((path, *size, true, *wipe)),
        }
    }

    /// Its size in bytes (u64::MAX: unbounded, the default Transient).
    pub fn size(&self) -> u64 {
        match self {
            Kind::Malloc { size } | Kind::File { size, .. } | Kind::Persistent { size, .. } => *size,
        }
    }
}

/// One `-s` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Empty until [`resolve`] names it (s0, s1… in order, as varnishd).
    pub name: String,
    pub kind: Kind,
}

/// The name of the store for short-lived and uncacheable objects.
pub const TRANSIENT: &str = "Transient";

/// The default size of a malloc store (varnishd's 100M).
const DEFAULT_MALLOC: u64 = 100 << 20;
/// The smallest store accepted.
const MIN_SIZE: u64 = 64 * 1024;
/// The smallest disk store: a header and sixteen 64 KiB segments.
const MIN_DISK: u64 = 4096 + 16 * 64 * 1024;

/// Parse `[name=]malloc[,SIZE]`, `[name=]file,PATH,SIZE`,
/// `[name=]persistent,PATH,SIZE[,wipe]` (and `default[,SIZE]`, which is
/// malloc).
pub fn parse(s: &str) -> Result<Spec, String> {
    let (name, spec) = match s.split_once('=') {
        Some((n, rest)) if !n.contains(',') => (n, rest),
        _ => ("", s),
    };
    // Varnish's VCT_invalid_name: '-' is allowed too (storage.my-store).
    if !name.is_empty() && !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Err(format!("storage name \"{name}\": letters, digits, _ and - only (VCL names it storage.{name})"));
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("storage name \"{name}\" must not start with a digit"));
    }
    let parts: Vec<&str> = spec.split(',').collect();
    let size = |i: usize, what: &str, min: u64| -> Result<u64, String> {
        let t = parts.get(i).ok_or_else(|| format!("\"{s}\": {what} needs a SIZE"))?;
        let n = parse_size(t).map_err(|e| format!("\"{s}\": {e}"))?;
        if n < min {
            return Err(format!("\"{s}\": storage size {n} is too small (at least {min})"));
        }
        Ok(n)
    };
    let path = |what: &str| -> Result<PathBuf, String> {
        match parts.get(1) {
            Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
            _ => Err(format!("\"{s}\": {what} needs a PATH (a file, or a directory to make it in)")),
        }
    };
    let kind = match parts[0] {
        "malloc" | "default" => {
            if parts.len() > 2 {
                return Err(format!("\"{s}\": malloc takes one size"));
            }
            Kind::Malloc { size: if parts.len() == 2 { size(1, "malloc", MIN_SIZE)? } else { DEFAULT_MALLOC } }
        }
        "file" => {
            if parts.len() != 3 {
                return Err(format!("\"{s}\": use file,PATH,SIZE"));
            }
            Kind::File { path: path("file")?, size: size(2, "file", MIN_DISK)? }
        }
        "persistent" => {
            let wipe = match parts.get(3) {
                None => false,
                Some(&"wipe") if parts.len() == 4 => true,
                Some(_) => return Err(format!("\"{s}\": use persistent,PATH,SIZE[,wipe]")),
            };
            Kind::Persistent { path: path("persistent")?, size: size(2, "persistent", MIN_DISK)?, wipe }
        }
        "" => return Err("empty storage specification".into()),
        k => return Err(format!("storage kind \"{k}\" is not supported; use malloc, file or persistent")),
    };
    Ok(Spec { name: name.to_string(), kind })
}

/// Name the unnamed stores s0, s1… in order, refuse names given twice, and
/// add the Transient store (unbounded malloc) unless one was given. No
/// `-s` at all is `-s malloc,100M`.
pub fn resolve(specs: &[Spec]) -> Result<Vec<Spec>, String> {
    let mut out: Vec<Spec> = Vec::new();
    let mut seq = 0;
    let given: Vec<Spec> =
        if specs.is_empty() { vec![Spec { name: String::new(), kind: Kind::Malloc { size: DEFAULT_MALLOC } }] } else { specs.to_vec() };
    for mut s in given {
        if s.name.is_empty() {
            s.name = format!("s{seq}");
            seq += 1;
        }
        if out.iter().any(|o| o.name == s.name) {
            return Err(format!("storage name \"{}\" given twice", s.name));
        }
        if s.name == TRANSIENT && !matches!(s.kind, Kind::Malloc { .. }) {
            return Err("the Transient store can only be malloc".into());
        }
        out.push(s);
    }
    if !out.iter().any(|s| s.name == TRANSIENT) {
        out.push(Spec { name: TRANSIENT.into(), kind: Kind::Malloc { size: u64::MAX } });
    }
    let mut paths: Vec<&PathBuf> = Vec::new();
    for s in &out {
        if let Kind::File { path, .. } | Kind::Persistent { path, .. } = &s.kind {
            if paths.contains(&path) && !path.is_dir() {
                return Err(format!("{}: two stores in one file", path.display()));
            }
            paths.push(path);
        }
    }
    Ok(out)
}

/// The text of a spec as `-s` takes it (the manager hands the child its
/// stores this way).
pub fn render(s: &Spec) -> String {
    let name = if s.name.is_empty() { String::new() } else { format!("{}=", s.name) };
    match &s.kind {
        Kind::Malloc { size } => format!("{name}malloc,{size}"),
        Kind::File { path, size } => format!("{name}file,{},{size}", path.display()),
        Kind::Persistent { path, size, wipe } => {
            format!("{name}persistent,{},{size}{}", path.display(), if *wipe { ",wipe" } else { "" })
        }
    }
}

/// The stores objects VCL does not place go to, round robin (indexes
/// into resolved `specs`). Varnish's rule, every store but Transient,
/// unless a store is persistent: then the persistent ones only, so a
/// cache of `-s mem=malloc -s disk=persistent` is all on disk (and
/// survives a restart), the malloc store its memory tier in front, not
/// half of it in memory. VCL that sets beresp.storage decides itself.
pub fn unplaced(specs: &[Spec]) -> Vec<usize> {
    let others = || specs.iter().enumerate().filter(|(_, s)| s.name != TRANSIENT);
    let disk: Vec<usize> = others().filter(|(_, s)| matches!(s.kind, Kind::Persistent { .. })).map(|(i, _)| i).collect();
    if !disk.is_empty() {
        return disk;
    }
    let all: Vec<usize> = others().map(|(i, _)| i).collect();
    if all.is_empty() {
        specs.iter().position(|s| s.name == TRANSIENT).into_iter().collect()
    } else {
        all
    }
}

/// The line the manager logs at start when [`unplaced`] departs from
/// Varnish's round robin (a persistent store beside other stores).
pub fn placement_note(specs: &[Spec]) -> Option<String> {
    let others = specs.iter().filter(|s| s.name != TRANSIENT).count();
    let to = unplaced(specs);
    if to.len() == others || !matches!(specs.get(*to.first()?)?.kind, Kind::Persistent { .. }) {
        return None;
    }
    let names: Vec<&str> = to.iter().map(|&i| specs[i].name.as_str()).collect();
    Some(format!(
        "objects VCL does not place (no beresp.storage) go to the persistent store{} {}, not round robin over all stores \
         as in Varnish; set beresp.storage in vcl_backend_response to choose",
        if names.len() > 1 { "s" } else { "" },
        names.join(", ")
    ))
}

static NAMES: OnceLock<Vec<String>> = OnceLock::new();

/// Tell the VCL compiler which stores this process has (once, at start).
pub fn set_names(specs: &[Spec]) {
    let _ = NAMES.set(specs.iter().map(|s| s.name.clone()).collect());
}

/// The stores VCL may name (s0 and Transient when none were set).
pub fn names() -> Vec<String> {
    NAMES.get().cloned().unwrap_or_else(|| vec!["s0".into(), TRANSIENT.into()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_as_varnishd_takes_them() {
        assert_eq!(parse("malloc,1G").unwrap().kind, Kind::Malloc { size: 1 << 30 });
        assert_eq!(parse("default").unwrap().kind, Kind::Malloc { size: 100 << 20 });
        let d = parse("disk=file,/var/cache/x,100G").unwrap();
        assert_eq!((d.name.as_str(), d.kind.name(), d.kind.size()), ("disk", "file", 100 << 30));
        let p = parse("p=persistent,/tmp/p,2G,wipe").unwrap();
        assert!(matches!(p.kind, Kind::Persistent { wipe: true, .. }));
        for bad in [
            "",
            "umem",
            "malloc,1G,2",
            "file,/x",
            "file,,1G",
            "persistent,/x,1G,other",
            "malloc,1k",
            "a.b=malloc",
            "1a=malloc",
            "file,/x,1M",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unnamed_stores_are_numbered_and_transient_is_added() {
        let all = resolve(&[parse("malloc,1M").unwrap(), parse("d=file,/tmp/a,2G").unwrap(), parse("malloc,2M").unwrap()]).unwrap();
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["s0", "d", "s1", "Transient"]);
        assert_eq!(all[3].kind.size(), u64::MAX);
        assert_eq!(resolve(&[]).unwrap()[0], Spec { name: "s0".into(), kind: Kind::Malloc { size: 100 << 20 } });
        assert!(resolve(&[parse("a=malloc").unwrap(), parse("a=malloc").unwrap()]).is_err());
        assert!(resolve(&[parse("Transient=file,/tmp/t,1G").unwrap()]).is_err());
        for a in ["malloc,1048576", "d=file,/tmp/a,2147483648", "p=persistent,/tmp/p,2147483648,wipe"] {
            assert_eq!(render(&parse(a).unwrap()), a);
        }
    }

    #[test]
    fn unplaced_objects_go_to_persistent_stores_when_there_are_any() {
        let r = |a: &[&str]| resolve(&a.iter().map(|s| parse(s).unwrap()).collect::<Vec<_>>()).unwrap();
        // Varnish's round robin: every store but Transient.
        let two = r(&["a=malloc", "Transient=malloc,1M", "b=file,/tmp/x,2G"]);
        assert_eq!(unplaced(&two), [0, 2]);
        assert_eq!(placement_note(&two), None);
        // A persistent store: unplaced objects go there (both, in turn).
        let tier = r(&["mem=malloc", "d1=persistent,/tmp/d1,2G", "f=file,/tmp/f,2G", "d2=persistent,/tmp/d2,2G"]);
        assert_eq!(unplaced(&tier), [1, 3]);
        assert!(placement_note(&tier).unwrap().contains("persistent stores d1, d2,"));
        // Persistent stores only: round robin over them, as Varnish's.
        let disks = r(&["d1=persistent,/tmp/d1,2G", "d2=persistent,/tmp/d2,2G"]);
        assert_eq!((unplaced(&disks), placement_note(&disks)), (vec![0, 1], None));
        assert_eq!(unplaced(&r(&["Transient=malloc,1M"])), [0]);
    }
}
