//! The shared end-to-end harness (the workspace's `e2e` crate).

pub use e2e::harness::*;

/// A port free on every one of `ips` (loopback addresses) when this
/// returns: several nodes on 127.0.0.2, .3 ... can then share it.
pub fn free_port_on(ips: &[&str]) -> u16 {
    loop {
        let p = std::net::TcpListener::bind((ips[0], 0)).unwrap().local_addr().unwrap().port();
        if ips[1..].iter().all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok()) {
            return p;
        }
    }
}

/// A self-signed certificate for `names`, written into `dir` as
/// `STEM.pem` (certificate and key, as hitch and `-A` take them) and
/// `STEM-ca.pem` (the certificate alone, for a client to trust).
pub struct SelfSigned {
    pub bundle: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    /// The certificate, DER (what a client sees on the wire).
    pub der: Vec<u8>,
}

pub fn self_signed(dir: &std::path::Path, names: &[&str], stem: &str) -> SelfSigned {
    let (text, cert, der) = pem_bundle(names);
    let (bundle, ca) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}-ca.pem")));
    std::fs::write(&bundle, text).unwrap();
    std::fs::write(&ca, cert).unwrap();
    SelfSigned { bundle, ca, der }
}

/// A self-signed certificate for `names`: the PEM bundle (certificate and
/// key), the certificate's PEM, and its DER.
pub fn pem_bundle(names: &[&str]) -> (String, String, Vec<u8>) {
    let ck = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    (format!("{}{}", ck.cert.pem(), ck.key_pair.serialize_pem()), ck.cert.pem(), ck.cert.der().to_vec())
}
