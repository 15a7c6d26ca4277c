//! Certificates changed at runtime: tls.cert.load/commit through the admin
//! socket serve new handshakes the new certificate while a connection
//! opened before keeps going, and a restarted child keeps the change.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use crate::listeners::tls_daemon;
use crate::util::*;

/// A kept-alive TLS connection to `name` on `port`.
pub(crate) struct Conn(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl Conn {
    pub(crate) fn open(port: u16, name: &str) -> Conn {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(common::tls::AnyCert(provider)))
            .with_no_client_auth();
        let conn = rustls::ClientConnection::new(Arc::new(config), ServerName::try_from(name.to_string()).unwrap()).unwrap();
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        Conn(rustls::StreamOwned::new(conn, tcp))
    }

    /// GET /size/5 on the connection; the body.
    pub(crate) fn get(&mut self) -> String {
        self.0.write_all(b"GET /size/5?max_age=60 HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"01234") {
            let n = self.0.read(&mut buf).unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// The certificate the server presented.
    fn cert(&self) -> Vec<u8> {
        self.0.conn.peer_certificates().unwrap()[0].to_vec()
    }
}

/// A certificate for `name` in `dir` as `stem.pem`: its path and DER.
fn cert(name: &str, dir: &Path, stem: &str) -> (std::path::PathBuf, Vec<u8>) {
    let c = self_signed(dir, &[name], stem);
    (c.bundle, c.der)
}

fn adm(dir: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["-n", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = run("cache-adm", &all);
    (o.status.success(), format!("{}{}", stdout(&o), stderr(&o)))
}

#[test]
fn a_certificate_committed_at_runtime_serves_new_connections_while_old_ones_go_on() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let (old_pem, old_der) = cert("a.test", tmp.path(), "old");
    let (new_pem, new_der) = cert("a.test", tmp.path(), "new");
    let (d, port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port)], &old_pem);
    let mut before = Conn::open(port, "a.test");
    assert!(before.get().starts_with("HTTP/1.1 200"));
    assert_eq!(before.cert(), old_der);
    let (ok, list) = adm(&d.dir, &["tls.cert.list"]);
    assert!(ok && list.contains("old") && list.contains("live"), "{list}");
    // Staged, not yet live.
    let (ok, out) = adm(&d.dir, &["tls.cert.load", "old", new_pem.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(adm(&d.dir, &["tls.cert.list"]).1.contains("replaced"));
    let mut c = Conn::open(port, "a.test");
    c.get();
    assert_eq!(c.cert(), old_der, "nothing changes before the commit");
    let (ok, out) = adm(&d.dir, &["tls.cert.commit"]);
    assert!(ok, "{out}");
    let mut after = Conn::open(port, "a.test");
    assert!(after.get().starts_with("HTTP/1.1 200"));
    assert_eq!(after.cert(), new_der, "new handshakes get the new certificate");
    // The connection opened before goes on, on its own session.
    assert!(before.get().starts_with("HTTP/1.1 200"));
    assert_eq!(before.cert(), old_der);
    // Bad input changes nothing.
    let conf = tmp.path().join("tls.conf");
    let (ok, out) = adm(&d.dir, &["tls.cert.load", "x", conf.to_str().unwrap()]);
    assert!(!ok && out.contains("no certificate"), "{out}");
    let (ok, out) = adm(&d.dir, &["tls.cert.load", "x", "/no/such/file.pem"]);
    assert!(!ok && out.contains("Cannot read"), "{out}");
    let (ok, out) = adm(&d.dir, &["tls.cert.discard", "old"]);
    assert!(!ok && out.contains("last one"), "{out}");
    // A restarted child serves the committed certificate.
    assert!(adm(&d.dir, &["stop"]).0);
    assert!(adm(&d.dir, &["start"]).0);
    let mut restarted = wait_for(10, "the restarted child", || {
        std::panic::catch_unwind(|| {
            let mut c = Conn::open(port, "a.test");
            c.get();
            c
        })
        .ok()
    });
    assert_eq!(restarted.cert(), new_der);
    assert!(restarted.get().starts_with("HTTP/1.1 200"));
    // Changes made while the child is stopped reach it when it starts.
    let (c_pem, c_der) = cert("c.test", tmp.path(), "c");
    assert!(adm(&d.dir, &["stop"]).0);
    assert!(adm(&d.dir, &["tls.cert.load", "c", c_pem.to_str().unwrap()]).0);
    assert!(adm(&d.dir, &["tls.cert.commit"]).0);
    assert!(adm(&d.dir, &["start"]).0);
    let c = wait_for(10, "the restarted child", || {
        std::panic::catch_unwind(|| {
            let mut c = Conn::open(port, "c.test");
            c.get();
            c
        })
        .ok()
    });
    assert_eq!(c.cert(), c_der);
    let mut a = Conn::open(port, "a.test");
    a.get();
    assert_eq!(a.cert(), new_der, "the first is still the default and a.test's");
    // No private key in the shared memory log.
    let ds = d.dir.to_str().unwrap();
    let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-n", ds]));
    assert!(!raw.contains("PRIVATE KEY"));
}

/// tls.cert.list shows what an operator needs of each certificate: when
/// it expires, the days left (marked within tls_cert_warn of its end),
/// the https listeners and the names it serves; `-j` the same for a
/// script; MAIN.tls_cert_expiring counts the live ones close to their end.
#[test]
fn tls_cert_list_shows_names_expiry_and_listeners_and_counts_the_expiring() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["a.test".to_string(), "*.b.test".to_string()]).unwrap();
    let end = std::time::SystemTime::now() + std::time::Duration::from_secs(10 * 86_400);
    p.not_after = end.into();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::CommonName, "a.test");
    let key = rcgen::KeyPair::generate().unwrap();
    let c = p.self_signed(&key).unwrap();
    let soon = tmp.path().join("soon.pem");
    std::fs::write(&soon, format!("{}{}", c.pem(), key.serialize_pem())).unwrap();
    let (d, _port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port)], &soon);
    let (ok, list) = adm(&d.dir, &["tls.cert.list"]);
    assert!(ok, "{list}");
    let row = list.lines().find(|l| l.starts_with("soon ")).unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains(" live ") && row.contains("a.test,*.b.test") && row.contains(" tls "), "{row}");
    assert!(row.contains("!9") || row.contains("!10"), "10 days left, within the 30 of tls_cert_warn: {row}");
    let (ok, json) = adm(&d.dir, &["tls.cert.list", "-j"]);
    assert!(ok, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    // Varnish's JSON frame: [2, [argv], time, the list].
    let cert = v[3].as_array().and_then(|a| a.iter().find(|c| c["id"] == "soon")).unwrap_or_else(|| panic!("{json}"));
    assert_eq!(cert["names"], serde_json::json!(["a.test", "*.b.test"]));
    assert_eq!((cert["expiring"].as_bool(), cert["state"].as_str()), (Some(true), Some("live")), "{cert}");
    assert_eq!(cert["listeners"], serde_json::json!(["tls"]));
    assert!(cert["not_after"].as_str().is_some_and(|t| t.ends_with('Z')), "{cert}");
    wait_for(10, "MAIN.tls_cert_expiring", || (counter(&stat(&d.dir), "MAIN.tls_cert_expiring") == Some(1)).then_some(()));
    // Warned about 5 days before the end only: not yet.
    assert!(adm(&d.dir, &["param.set", "tls_cert_warn", "432000"]).0);
    let (_, list) = adm(&d.dir, &["tls.cert.list"]);
    assert!(!list.contains('!'), "{list}");
}
