//! The Debian package (scripts/package.sh): built from the debug binaries
//! the tests already have, listed (`dpkg -c`) for everything an operator
//! expects, unpacked into a scratch root (`dpkg -x`) where its cache-d
//! checks its own /etc/cachekit/default.vcl, and its shell completions
//! offering every flag `--help` shows, asked of bash and fish themselves.

use std::path::Path;

use crate::cli::{all_flags, command_lines, flags_of, TOOLS};
use crate::util::*;

fn command(cmd: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

#[test]
fn the_package_holds_everything_and_runs_from_a_scratch_root() {
    if !have("dpkg-deb") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let profile = bin("cache-d").parent().unwrap().file_name().unwrap().to_string_lossy().to_string();
    let out = std::process::Command::new("bash")
        .arg(workspace().join("scripts/package.sh"))
        .env("CACHEKIT_PACKAGE_PROFILE", &profile)
        .env("CACHEKIT_PACKAGE_OUT", tmp.path())
        // The debug information's package is scripts/install-test.py's to check.
        .env("CACHEKIT_PACKAGE_DBGSYM", "0")
        // A release build's cache-d would be built profile-guided first
        // (scripts/build-pgo.sh, twenty minutes): the build at hand is packaged.
        .env("CACHEKIT_PACKAGE_PGO", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "package.sh: {}", String::from_utf8_lossy(&out.stderr));
    let deb = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{deb}");
    let name = Path::new(&deb).file_name().unwrap().to_string_lossy().to_string();
    assert!(name.starts_with("cachekit_0.") && name.contains('_'), "cachekit_VERSION_ARCH.deb: {name}");

    // What dpkg -c lists.
    let listing = stdout(&command("dpkg", &["-c", &deb]));
    let mut want: Vec<String> = Vec::new();
    for t in TOOLS {
        want.push(format!("./usr/bin/{t}"));
        want.push(format!("./usr/share/man/man1/{t}.1.gz"));
        want.push(format!("./usr/share/bash-completion/completions/{t}"));
        want.push(format!("./usr/share/zsh/vendor-completions/_{t}"));
        want.push(format!("./usr/share/fish/vendor_completions.d/{t}.fish"));
    }
    for f in [
        "./usr/share/man/man7/cache-vcl.7.gz",
        "./lib/systemd/system/cache-d.service",
        "./lib/systemd/system/cache-ncsa.service",
        "./lib/systemd/system/cache-stat-exporter.service",
        "./etc/cachekit/default.vcl",
        "./etc/default/cachekit",
        "./etc/logrotate.d/cache-ncsa",
    ] {
        want.push(f.to_string());
    }
    for w in &want {
        assert!(listing.lines().any(|l| l.ends_with(&format!(" {w}"))), "dpkg -c lacks {w}:\n{listing}");
    }
    assert!(listing.lines().all(|l| l.contains("root/root")), "files owned by root:\n{listing}");

    // The control part: conffiles, maintainer scripts that parse.
    let control = tmp.path().join("control");
    assert!(command("dpkg-deb", &["-e", &deb, control.to_str().unwrap()]).status.success());
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    assert_eq!(
        conffiles.lines().collect::<Vec<_>>(),
        ["/etc/cachekit/default.vcl", "/etc/default/cachekit", "/etc/logrotate.d/cache-ncsa"]
    );
    for s in ["postinst", "prerm", "postrm"] {
        let o = command("sh", &["-n", control.join(s).to_str().unwrap()]);
        assert!(o.status.success(), "{s}: {}", stderr(&o));
    }
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(postinst.contains("adduser --system") && postinst.contains("/var/lib/cachekit"), "{postinst}");
    let fields = stdout(&command("dpkg-deb", &["-f", &deb, "Package", "Version", "Architecture", "Depends"]));
    // Its changelog's last entry is this version; its copyright has a notice.
    let doc = tmp.path().join("doc");
    assert!(command("dpkg-deb", &["-x", &deb, doc.to_str().unwrap()]).status.success());
    let changelog =
        command("sh", &["-c", "gzip -dc \"$1\" | head -1", "sh", doc.join("usr/share/doc/cachekit/changelog.gz").to_str().unwrap()]);
    let version = fields.lines().find_map(|l| l.strip_prefix("Version: ")).unwrap_or_default().to_string();
    assert!(stdout(&changelog).starts_with(&format!("cachekit ({version}) ")), "changelog: {}", stdout(&changelog));
    let copyright = std::fs::read_to_string(doc.join("usr/share/doc/cachekit/copyright")).unwrap();
    assert!(copyright.contains("\nCopyright: ") && copyright.contains("Redistribution and use"), "{copyright}");
    // Stripped: the debug information is the dbgsym package's.
    let sections = stdout(&command("readelf", &["-S", "-W", doc.join("usr/bin/cache-d").to_str().unwrap()]));
    assert!(!sections.contains(".debug_info") && !sections.contains(".symtab"), "cache-d is not stripped");
    assert!(fields.contains("Package: cachekit"), "{fields}");
    // The libraries the binaries link, versioned by the symbols they use.
    if have("dpkg-shlibdeps") {
        assert!(fields.contains("Depends: libc6 (>= 2.") && fields.contains("libgcc-s1"), "{fields}");
    }

    // Installed in a scratch root: its cache-d checks its own policy.
    let root = tmp.path().join("root");
    assert!(command("dpkg", &["-x", &deb, root.to_str().unwrap()]).status.success());
    let cache_d = root.join("usr/bin/cache-d");
    let o = command(cache_d.to_str().unwrap(), &["-C", "-f", root.join("etc/cachekit/default.vcl").to_str().unwrap()]);
    assert!(o.status.success() && stdout(&o).contains("VCL compiled"), "{}{}", stdout(&o), stderr(&o));
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/cache-d.service")).unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload=/usr/share/cachekit/cachekit-reload"), "{unit}");
    let o = command("sh", &["-n", root.join("usr/share/cachekit/cachekit-reload").to_str().unwrap()]);
    assert!(o.status.success());

    check_completions(&root);
}

/// Completions offer every flag --help shows, asked of the shells
/// themselves: what bash's and fish's completion offer after "-" (for
/// cache-bench, after each subcommand too); zsh's parse and name them.
fn check_completions(root: &Path) {
    let comp = |shell: &str, t: &str| match shell {
        "bash" => root.join(format!("usr/share/bash-completion/completions/{t}")),
        "zsh" => root.join(format!("usr/share/zsh/vendor-completions/_{t}")),
        _ => root.join(format!("usr/share/fish/vendor_completions.d/{t}.fish")),
    };
    for t in TOOLS {
        for words in command_lines(t) {
            let bash = offered_by_bash(&comp("bash", t), &words);
            let fish = have("fish").then(|| offered_by_fish(&comp("fish", t), &words));
            for flag in flags_of(&words) {
                assert!(bash.contains(&flag), "{words:?}: bash does not offer {flag}: {bash:?}");
                if let Some(fish) = &fish {
                    assert!(fish.contains(&flag), "{words:?}: fish does not offer {flag}: {fish:?}");
                }
            }
        }
        if have("zsh") {
            let o = command("zsh", &["-n", comp("zsh", t).to_str().unwrap()]);
            assert!(o.status.success(), "{t}'s zsh completion: {}", stderr(&o));
            let text = std::fs::read_to_string(comp("zsh", t)).unwrap();
            for flag in all_flags(t) {
                assert!(text.contains(&flag), "{t}: the zsh completion lacks {flag}");
            }
        }
    }
}

/// The words bash's completion offers for `words` followed by "-".
fn offered_by_bash(file: &Path, words: &[&str]) -> std::collections::BTreeSet<String> {
    let list = words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" ");
    let script = format!(
        "source \"$1\" || exit 1\n\
         f=$(complete -p {t} | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\n\
         COMP_WORDS=({list} -); COMP_CWORD={n}; COMP_LINE='{line} -'; COMP_POINT=${{#COMP_LINE}}\n\
         \"$f\" {t} - '{prev}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        t = words[0],
        n = words.len(),
        line = words.join(" "),
        prev = words[words.len() - 1],
    );
    let o = command("bash", &["-c", &script, "bash", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}: {}", file.display(), stderr(&o));
    stdout(&o).lines().map(str::to_string).collect()
}

/// The words fish's completion offers for `words` followed by "-".
fn offered_by_fish(file: &Path, words: &[&str]) -> std::collections::BTreeSet<String> {
    let script = format!("source '{}'; complete -C '{} -'", file.display(), words.join(" "));
    let o = command("fish", &["-c", &script]);
    assert!(o.status.success(), "{}: {}", file.display(), stderr(&o));
    stdout(&o).lines().map(|l| l.split('\t').next().unwrap_or("").to_string()).collect()
}
