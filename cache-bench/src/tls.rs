//! https for the load generator: a rustls client configuration (trusting
//! `--cacert`, the system's bundle, or with `--insecure` anything), the
//! verifier that also takes a server certificate found as-is in `--cacert`,
//! and the name handshakes send in SNI.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// What each connection's handshake needs.
#[derive(Clone)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

/// How the run's connections speak TLS.
pub struct Mode {
    /// ALPN h2 (else http/1.1).
    pub h2: bool,
    /// ALPN h3, TLS 1.3 only (QUIC).
    pub h3: bool,
    /// Resume sessions across the run's connections (rustls's session
    /// cache); off, every handshake is a full one.
    pub resume: bool,
}

/// The client configuration for `host`: TLS 1.2 and 1.3, ALPN and
/// resumption as `mode` says.
pub fn client(host: &str, cacert: Option<&str>, insecure: bool, mode: Mode) -> Result<TlsClient> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone());
    let builder =
        if mode.h3 { builder.with_protocol_versions(&[&rustls::version::TLS13]) } else { builder.with_safe_default_protocol_versions() }
            .map_err(|e| anyhow!("TLS: {e}"))?;
    let mut config = if insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(common::tls::AnyCert(provider))).with_no_client_auth()
    } else {
        let file = common::tls::ca_file(cacert);
        let mut roots = RootCertStore::empty();
        let mut pinned = Vec::new();
        let pem = std::fs::read(&file).with_context(|| format!("--cacert {file}"))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| anyhow!("--cacert {file}: {e}"))?;
            roots.add(cert.clone()).map_err(|e| anyhow!("--cacert {file}: {e}"))?;
            pinned.push(cert);
        }
        if roots.is_empty() {
            bail!("--cacert {file}: no certificate in it");
        }
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().map_err(|e| anyhow!("--cacert {file}: {e}"))?;
        let verifier = Arc::new(OrPinned { webpki, pinned });
        builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth()
    };
    // ALPN: the protocol the run speaks (h2 with --h2).
    config.alpn_protocols = vec![match (mode.h2, mode.h3) {
        (_, true) => b"h3".to_vec(),
        (true, _) => b"h2".to_vec(),
        _ => b"http/1.1".to_vec(),
    }];
    if !mode.resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    let name = ServerName::try_from(host.to_string()).map_err(|_| anyhow!("{host}: not a name for TLS"))?;
    Ok(TlsClient { config: Arc::new(config), name })
}

/// rustls's usual verification, and besides it a server certificate that is
/// byte for byte one of the `--cacert` certificates, as curl, wrk and h2load
/// (OpenSSL, which takes a trusted certificate as a chain of its own) accept
/// it: `openssl req -x509` makes CA:TRUE certificates, which webpki refuses
/// as a server's own (`CaUsedAsEndEntity`) even when trusted.
///
/// Such a certificate must still carry the name the handshake asked for
/// (SNI: the URL's host, also with `--resolve`), as curl checks it, and be
/// within its validity period: webpki checks the period (and the encoding)
/// before the two refusals this verifier overrules, the unknown issuer and
/// errors webpki has no rustls name for (CA used as end entity, path
/// constraints), so an expired or misnamed certificate is still refused.
/// Handshake signatures are checked by rustls's verifier in every case.
#[derive(Debug)]
struct OrPinned {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for OrPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Ok(ok) => return Ok(ok),
            Err(e) => e,
        };
        let overruled = matches!(refused, rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::Other(_)));
        if !overruled || !self.pinned.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return Err(refused);
        }
        rustls::client::verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pinned certificate out of its validity period or under another
    /// name is refused; in it, under its name, taken. `now` is passed in, so
    /// no clock is waited on.
    #[test]
    fn a_pinned_certificate_still_needs_its_name_and_period() {
        let tmp = tempfile::tempdir().unwrap();
        let (cert, key) = (tmp.path().join("c.pem"), tmp.path().join("k.pem"));
        let o = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl, which this test needs (apt-get install openssl)");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let der = CertificateDer::pem_file_iter(&cert).unwrap().next().unwrap().unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        let v = OrPinned { webpki, pinned: vec![der.clone()] };
        let check = |name: &str, now: UnixTime| v.verify_server_cert(&der, &[], &ServerName::try_from(name).unwrap(), &[], now);
        let now = UnixTime::now();
        assert!(check("localhost", now).is_ok());
        let later = UnixTime::since_unix_epoch(std::time::Duration::from_secs(now.as_secs() + 10 * 86400));
        let late = check("localhost", later).unwrap_err();
        assert!(
            matches!(late, rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. } | CertificateError::Expired)),
            "{late:?}"
        );
        let misnamed = check("elsewhere.test", now).unwrap_err();
        assert!(matches!(misnamed, rustls::Error::InvalidCertificate(_)), "{misnamed:?}");
    }
}
