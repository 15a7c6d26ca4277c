//! Certificates: PEM bundles good and bad, SNI choosing among them,
//! staging and committing; the -A file's syntax.

use super::config::parse;
use super::*;

/// A self-signed bundle (certificate then key) for these names.
fn bundle(names: &[&str]) -> String {
    let ck = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    format!("{}{}", ck.cert.pem(), ck.key_pair.serialize_pem())
}

#[test]
fn bundles_need_a_certificate_and_its_own_key() {
    let a = bundle(&["a.test"]);
    assert!(Cert::from_pem("a", a.as_bytes()).is_ok());
    // Key first works too (hitch takes any order).
    let (cert, key) = a.split_at(a.find("-----BEGIN PRIVATE KEY").unwrap());
    assert!(Cert::from_pem("a", format!("{key}{cert}").as_bytes()).is_ok());
    assert!(Cert::from_pem("a", key.as_bytes()).unwrap_err().contains("no certificate"));
    assert!(Cert::from_pem("a", cert.as_bytes()).unwrap_err().contains("no usable private key"));
    let other = bundle(&["b.test"]);
    let other_key = &other[other.find("-----BEGIN PRIVATE KEY").unwrap()..];
    assert!(Cert::from_pem("a", format!("{cert}{other_key}").as_bytes()).unwrap_err().contains("does not belong"));
    assert!(Cert::from_pem("x", b"not pem at all").is_err());
    assert!(Cert::from_pem("x", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
}

#[test]
fn sni_picks_the_certificate_and_the_first_is_the_default() {
    let set = CertSet {
        certs: vec![
            Arc::new(Cert::from_pem("a", bundle(&["a.test"]).as_bytes()).unwrap()),
            Arc::new(Cert::from_pem("b", bundle(&["b.test", "*.wild.test"]).as_bytes()).unwrap()),
        ],
    };
    let id = |sni: Option<&str>| set.pick(sni).map(|c| c.id.clone());
    assert_eq!(id(Some("a.test")).as_deref(), Some("a"));
    assert_eq!(id(Some("b.test")).as_deref(), Some("b"));
    assert_eq!(id(Some("x.wild.test")).as_deref(), Some("b"));
    assert_eq!(id(Some("y.x.wild.test")).as_deref(), Some("a"), "a wildcard covers one label");
    assert_eq!(id(Some("unknown.test")).as_deref(), Some("a"));
    assert_eq!(id(None).as_deref(), Some("a"));
    assert!(CertSet::default().pick(Some("a.test")).is_none());
}

#[test]
fn staged_certificates_take_effect_on_commit() {
    let t = Tls::new();
    t.load("a", bundle(&["a.test"]).as_bytes()).unwrap();
    assert!(t.live_ids().is_empty(), "nothing live before commit");
    t.commit();
    assert_eq!(t.live_ids(), ["a"]);
    // A new set: staged from scratch, live only on commit.
    t.clear_staged();
    t.load("b", bundle(&["b.test"]).as_bytes()).unwrap();
    assert!(t.load("bad", b"junk").is_err());
    assert_eq!(t.live_ids(), ["a"]);
    // Loading an id again replaces it in place.
    t.load("c", bundle(&["c.test"]).as_bytes()).unwrap();
    t.load("b", bundle(&["b2.test"]).as_bytes()).unwrap();
    t.commit();
    assert_eq!(t.live_ids(), ["b", "c"]);
}

#[test]
fn tls_files_in_hitch_syntax() {
    let f = parse(
        "# certificates\npem-file = \"/etc/ssl/a.pem\"\n\nfrontend = {\n  host = \"*\"\n  port = \"443\"\n  pem-file = \"/etc/ssl/b.pem\" # b\n}\nfrontend = {\n  host = \"127.0.0.1\"\n  port = \"8443\"\n}\n",
    )
    .unwrap();
    assert_eq!(f.pem_files, [std::path::PathBuf::from("/etc/ssl/a.pem"), "/etc/ssl/b.pem".into()]);
    assert_eq!(f.frontends, [":443", "127.0.0.1:8443"]);
    let err = |t: &str| parse(t).unwrap_err();
    assert_eq!(err("pem-file = /a.pem\n"), (1, "the value of pem-file must be in double quotes".into()));
    assert_eq!(err("\nciphers = \"x\"\n"), (2, "unknown key 'ciphers'".into()));
    assert_eq!(err("port = \"443\"\n"), (1, "port belongs in a frontend section".into()));
    assert_eq!(err("frontend = {\nport = \"443\"\n"), (1, "frontend not closed with '}'".into()));
    assert_eq!(err("frontend = {\nhost = \"*\"\n}\n"), (3, "a frontend needs a port".into()));
    assert_eq!(err("frontend = {\nport = \"99999\"\n}\n"), (2, "bad port \"99999\"".into()));
    assert_eq!(err("}\n"), (1, "'}' outside a frontend".into()));
    assert_eq!(err("frontend = {\nfrontend = {\n"), (2, "a frontend inside a frontend".into()));
    assert_eq!(err("pem-file\n"), (1, "expected key = value, found 'pem-file'".into()));
}
