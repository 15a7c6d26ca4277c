//! HTTPS backends (`.ssl = 1`): the origin is a cache-d with an https
//! listener in front of the test origin (a real TLS server, certificate
//! by SNI); a second cache-d fetches from it over TLS — verified chain and
//! name, pooled connections, probes over TLS — and refuses what its
//! settings say it must.

use std::path::Path;

use crate::listeners::tls_daemon;
use crate::util::*;

/// The TLS origin's certificate for `origin.test` (its PEM bundle and the
/// certificate alone, the CA to trust).
fn origin_cert(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let c = self_signed(dir, &["origin.test"], "origin");
    (c.bundle, c.ca)
}

/// A backend on the TLS origin with these extra fields.
fn backend(name: &str, port: u16, fields: &str) -> String {
    format!("backend {name} {{ .host = \"127.0.0.1\"; .port = \"{port}\"; .ssl = 1; {fields} }}\n")
}

#[test]
fn https_backends_verify_pool_and_probe_over_tls() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let (bundle, ca) = origin_cert(tmp.path());
    let odir = tmp.path().join("o");
    std::fs::create_dir_all(&odir).unwrap();
    let (o, tls_port) = tls_daemon(&odir, &["-b", &format!("127.0.0.1:{}", origin.port)], &bundle);
    let ca = ca.display();
    let trust = format!(".ssl_ca_file = \"{ca}\"; .host_header = \"origin.test\";");
    let mut vcl = String::from("vcl 4.1;\n");
    vcl += &backend(
        "good",
        tls_port,
        &format!("{trust} .ssl_verify_host = 1; .probe = {{ .url = \"/size/1\"; .interval = 0.5s; .window = 3; .threshold = 2; }}"),
    );
    vcl += &backend("wrongname", tls_port, &format!(".ssl_ca_file = \"{ca}\"; .host_header = \"other.test\"; .ssl_verify_host = 1;"));
    vcl += &backend("anyname", tls_port, &format!(".ssl_ca_file = \"{ca}\"; .host_header = \"other.test\";"));
    vcl += &backend("untrusted", tls_port, ".host_header = \"origin.test\";");
    vcl += &backend("unverified", tls_port, ".host_header = \"origin.test\"; .ssl_verify_peer = 0;");
    vcl += "sub vcl_recv {\n";
    for b in ["wrongname", "anyname", "untrusted", "unverified"] {
        vcl += &format!("\tif (req.url ~ \"^/{b}/\") {{ set req.backend_hint = {b}; set req.url = regsub(req.url, \"^/{b}\", \"\"); return (pass); }}\n");
    }
    vcl += "\tif (req.url ~ \"^/pass/\") { set req.url = regsub(req.url, \"^/pass\", \"\"); return (pass); }\n}\n";
    let f = tmp.path().join("tls-backends.vcl");
    std::fs::write(&f, &vcl).unwrap();
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", f.to_str().unwrap()]);
    let ds = d.dir.to_str().unwrap();
    // The probe speaks TLS: the backend turns healthy (it starts sick,
    // as in Varnish, with .initial below .threshold).
    let health = || stdout(&run("cache-adm", &["-n", ds, "backend.list"]));
    wait_for(10, "the probe to call it healthy", || health().lines().any(|l| l.contains("good") && l.contains("healthy")).then_some(()));
    let mut c = Client::connect(d.port);
    // Verified chain and name: a miss, then a hit.
    let r = c.get("/size/100?max_age=60", "");
    let errors = || stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "FetchError", "-n", ds]));
    assert_eq!((r.status, r.body.len()), (200, 100), "{}", errors());
    assert_eq!(c.get("/size/100?max_age=60", "").status, 200);
    assert_eq!(counter(&stat(&d.dir), "MAIN.cache_hit"), Some(1), "a hit");
    // Twenty passes reuse pooled TLS connections: the origin sees a
    // handshake or two for them (and one per probe meanwhile), not twenty.
    let handshakes = || counter(&stat(&o.dir), "MAIN.tls_handshakes").unwrap_or(0);
    let (before, t0) = (handshakes(), std::time::Instant::now());
    for i in 0..20 {
        assert_eq!(c.get(&format!("/pass/size/{i}"), "").status, 200);
    }
    let ours = stat(&d.dir);
    assert!(counter(&ours, "MAIN.backend_reuse") >= Some(19), "{ours}");
    let probes = (t0.elapsed().as_secs_f64() / 0.5).ceil() as u64 + 1;
    let during = handshakes() - before;
    assert!(during <= 2 + probes, "{during} handshakes for 20 passes and {probes} probes");

    // What each backend's settings allow.
    assert_eq!(c.get("/wrongname/size/5", "").status, 503, "the name is checked");
    assert_eq!(c.get("/anyname/size/5", "").status, 200, "the chain only");
    assert_eq!(c.get("/untrusted/size/5", "").status, 503, "not in the system's roots");
    assert_eq!(c.get("/unverified/size/5", "").status, 200, ".ssl_verify_peer = 0");
    let log = errors();
    assert!(log.contains("NotValidForName") || log.contains("not valid for name"), "{log}");
    assert!(log.contains("UnknownIssuer") || log.contains("unknown issuer"), "{log}");
    // The probe's requests reached the origin.
    let urls = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "ReqURL", "-n", o.dir.to_str().unwrap()]));
    assert!(urls.lines().filter(|l| l.ends_with(" /size/1")).count() >= 2, "{urls}");
}

#[test]
fn tls_backend_fields_are_checked_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    for (fields, want) in [
        (".ssl = 2;", "'.ssl' takes 0 or 1 (or true or false)"),
        (".ssl = 1; .ssl_ca_file = \"/nonexistent/ca.pem\";", "cannot read CA file /nonexistent/ca.pem"),
        (".ssl = 1; .ssl_verify_host = \"yes\";", "'.ssl_verify_host' takes 0 or 1"),
    ] {
        let f = tmp.path().join("bad.vcl");
        std::fs::write(&f, format!("vcl 4.1;\nbackend b {{\n\t.host = \"127.0.0.1\";\n\t{fields}\n}}\n")).unwrap();
        let o = run("cache-d", &["-C", "-f", f.to_str().unwrap()]);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{fields}");
        assert!(err.contains(want) && err.contains("Line 4"), "{fields}: {err}");
    }
}
