//! Log files: golden outputs of cache-log and cache-ncsa for a recorded log
//! (tests/golden/session.vsl: a miss, a hit, HEAD, a pass with a cookie, a
//! 404, a POST, a range, a 400, a pipe, basic auth), checked byte for byte —
//! and, where Varnish is installed, against varnishlog and varnishncsa
//! reading the same file. Then -w/-a/-r against a live daemon.

use std::path::{Path, PathBuf};

use crate::util::*;

/// Every varnishncsa format letter (and every %{...}t and %{...}T form).
const LETTERS: &str = "%b %D %H %h %I %{Referer}i %l %m %{Content-Type}o %O %q %r %s %t %{%d/%b/%Y %T}t %T %{us}T %{ms}T %{s}T %U %u \
%{Varnish:time_firstbyte}x %{Varnish:hitmiss}x %{Varnish:handling}x %{Varnish:side}x %{Varnish:vxid}x \
%{sec}t %{msec}t %{usec}t %{msec_frac}t %{usec_frac}t";

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn expect(name: &str, got: &str) {
    let want = std::fs::read_to_string(golden(name)).unwrap();
    assert!(got == want, "output differs from tests/golden/{name}:\n--- got\n{got}\n--- want\n{want}");
}

fn reference(tool: &str, args: &[&str]) -> Option<String> {
    let path = ["/usr/bin", "/usr/local/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists())?;
    let o = std::process::Command::new(path).args(args).output().unwrap();
    assert!(o.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8(o.stdout).unwrap())
}

#[test]
fn golden_outputs_match_byte_for_byte() {
    let log = golden("session.vsl");
    let log = log.to_str().unwrap();
    for g in ["raw", "vxid", "request"] {
        let ours = stdout(&run("cache-log", &["-r", log, "-g", g]));
        expect(&format!("log-{g}.txt"), &ours);
        if let Some(theirs) = reference("varnishlog", &["-r", log, "-g", g]) {
            assert!(ours == theirs, "cache-log -g {g} and varnishlog disagree on the same file");
        }
    }
    let ours = stdout(&run("cache-ncsa", &["-r", log]));
    expect("ncsa-default.txt", &ours);
    if let Some(theirs) = reference("varnishncsa", &["-r", log]) {
        assert_eq!(ours, theirs, "the default format");
    }
    let ours = stdout(&run("cache-ncsa", &["-F", LETTERS, "-r", log]));
    expect("ncsa-letters.txt", &ours);
    if let Some(theirs) = reference("varnishncsa", &["-F", LETTERS, "-r", log]) {
        assert_eq!(ours, theirs, "every format letter");
    }
    // Queries work on files too.
    let q = stdout(&run("cache-ncsa", &["-F", "%s %U", "-q", "RespStatus >= 400", "-r", log]));
    assert_eq!(q, "404 /size/3\n400 /\n");
}

#[test]
fn write_append_and_read_back() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap();
    let mut c = Client::connect(d.port);
    for u in ["/size/1", "/size/2?status=404", "/size/1"] {
        c.get(u, "");
    }
    let f = tmp.path().join("cap.vsl");
    let fs = f.to_str().unwrap();
    let o = run("cache-log", &["-d", "-w", fs, "-n", ds]);
    assert!(o.status.success() && stdout(&o).is_empty(), "-w writes the file, not stdout: {}", stderr(&o));
    assert_eq!(stdout(&run("cache-log", &["-r", fs, "-g", "request"])), stdout(&run("cache-log", &["-d", "-g", "request", "-n", ds])));
    let live = stdout(&run("cache-ncsa", &["-d", "-n", ds]));
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs])), live);
    // -a appends; without it the file starts over.
    run("cache-log", &["-d", "-w", fs, "-a", "-n", ds]);
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs])), format!("{live}{live}"));
    run("cache-log", &["-d", "-w", fs, "-n", ds]);
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs])), live);
    // Only what the query selects is written.
    run("cache-log", &["-d", "-w", fs, "-q", "RespStatus == 404", "-n", ds]);
    assert_eq!(stdout(&run("cache-ncsa", &["-F", "%U", "-r", fs])), "/size/2\n");
    // Not a log file: a clear error, exit 2.
    std::fs::write(&f, "hello").unwrap();
    let o = run("cache-log", &["-r", fs]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a log file"), "{}", stderr(&o));
}
