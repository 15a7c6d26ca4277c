//! Where VCL files are read from: the vcl_path parameter's directories
//! and vcc_unsafe_path, process settings (as vcc_err_unref's) that the
//! parameters set, and the lookup of a name along them.

static VCL_PATH: std::sync::RwLock<Vec<std::path::PathBuf>> = std::sync::RwLock::new(Vec::new());
static UNSAFE_PATH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// The vcl_path parameter: directories separated by ':'.
pub fn set_vcl_path(v: &str) {
    let dirs = v.split(':').filter(|d| !d.is_empty()).map(std::path::PathBuf::from).collect();
    *VCL_PATH.write().unwrap_or_else(|e| e.into_inner()) = dirs;
}

pub fn vcl_path() -> String {
    let dirs = VCL_PATH.read().unwrap_or_else(|e| e.into_inner());
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
}

/// The vcc_unsafe_path parameter.
pub fn set_unsafe_path(on: bool) {
    UNSAFE_PATH.store(on, std::sync::atomic::Ordering::Relaxed);
}

pub fn unsafe_path() -> bool {
    UNSAFE_PATH.load(std::sync::atomic::Ordering::Relaxed)
}

/// The file a VCL name (an include, or what vcl.load names) is read
/// from, as Varnish's compiler finds it: "./name" next to the including
/// file, an absolute name as it is, a relative one in the first vcl_path
/// directory that has it. With vcc_unsafe_path off a name with a '/' is
/// refused. A relative name no vcl_path directory has is looked for next
/// to the including file (else from the current directory): cachekit's
/// own, so configurations written for that keep working.
pub fn find_vcl(name: &str, dir: Option<&std::path::Path>) -> Result<std::path::PathBuf, String> {
    use std::path::Path;
    let local = |rest: &str| dir.map_or_else(|| Path::new(rest).to_path_buf(), |d| d.join(rest));
    let path = match name.strip_prefix("./") {
        Some(rest) => local(rest),
        None if Path::new(name).is_absolute() => Path::new(name).to_path_buf(),
        None => {
            let dirs = VCL_PATH.read().unwrap_or_else(|e| e.into_inner());
            dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()).unwrap_or_else(|| local(name))
        }
    };
    if !unsafe_path() && name.contains('/') {
        return Err(format!("VCL filename '{name}' is unsafe."));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_as_varnish_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("x.vcl"), "").unwrap();
        let before = (vcl_path(), unsafe_path());
        set_vcl_path(&format!("{}:{}", a.display(), b.display()));
        assert_eq!(find_vcl("x.vcl", Some(&a)).unwrap(), b.join("x.vcl"), "along vcl_path");
        assert_eq!(find_vcl("./x.vcl", Some(&a)).unwrap(), a.join("x.vcl"), "./ next to the includer");
        assert_eq!(find_vcl("y.vcl", Some(&a)).unwrap(), a.join("y.vcl"), "else next to the includer");
        set_unsafe_path(false);
        assert!(find_vcl("/etc/x.vcl", None).unwrap_err().contains("is unsafe"));
        assert!(find_vcl("x.vcl", None).is_ok());
        set_vcl_path(&before.0);
        set_unsafe_path(before.1);
    }
}
