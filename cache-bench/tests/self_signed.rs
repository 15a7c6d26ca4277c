//! Issue 35: `cache-bench --cacert cert.pem` takes a server whose
//! certificate is exactly one of the `--cacert` certificates, also the
//! CA:TRUE self-signed kind `openssl req -x509` makes (webpki alone refuses
//! a CA certificate as a server's own), as curl, wrk and h2load do; the
//! name is still checked and any other certificate is still refused. The
//! real executable against `openssl s_server -www` on a free loopback port.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// `openssl req -x509` with its defaults (CA:TRUE) for localhost: the
/// certificate and key files in `dir`, named after `stem`.
fn self_signed(dir: &Path, stem: &str) -> (String, String) {
    let (cert, key) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl, which this test needs (apt-get install openssl)");
    assert!(o.status.success(), "openssl req: {}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&cert).unwrap();
    assert!(text.contains("BEGIN CERTIFICATE"), "{text}");
    (cert.to_str().unwrap().to_string(), key.to_str().unwrap().to_string())
}

/// `openssl s_server -www` with this certificate, on a port it chose.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(cert: &str, key: &str) -> Server {
        let mut child = Command::new("openssl")
            .args(["s_server", "-www", "-accept", "0", "-cert", cert, "-key", key])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        // It says "ACCEPT [::]:PORT" once it listens.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("ACCEPT").and_then(|a| a.rsplit(':').next()?.trim().parse().ok()))
            .expect("s_server's ACCEPT line");
        // Keep its stdout drained so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three requests over one connection at a time to `host` (resolved to
/// 127.0.0.1), trusting `cacert`: the run's JSON report.
fn bench(port: u16, host: &str, cacert: &str) -> Value {
    let url = format!("https://{host}:{port}/");
    let o = Command::new(env!("CARGO_BIN_EXE_cache-bench"))
        .args(["run", "-q", "--json", "-c", "1", "-n", "3", "--resolve", &format!("{host}:127.0.0.1"), "--cacert", cacert, &url])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {}", String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn issue_35_a_server_certificate_given_as_cacert_is_trusted_as_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(tmp.path(), "server");
    let (other, _) = self_signed(tmp.path(), "other");
    let server = Server::start(&cert, &key);
    // Its own certificate as --cacert: every request answered.
    let v = bench(server.port, "localhost", &cert);
    assert_eq!((v["requests"].as_u64(), v["errors"]["total"].as_u64()), (Some(3), Some(0)), "{v}");
    // Another self-signed certificate for the same name: refused.
    let v = bench(server.port, "localhost", &other);
    assert_eq!(v["requests"].as_u64(), Some(0), "{v}");
    assert_eq!(v["errors"]["connect"].as_u64(), Some(3), "{v}");
    // The right certificate under a name it does not carry: refused too.
    let v = bench(server.port, "elsewhere.test", &cert);
    assert_eq!(v["requests"].as_u64(), Some(0), "{v}");
    assert_eq!(v["errors"]["connect"].as_u64(), Some(3), "{v}");
}
