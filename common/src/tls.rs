//! What the programs share about TLS clients: where the trusted roots are
//! ([`ca_file`]), and a certificate verifier that accepts any certificate (cache-bench's `--insecure`, a backend's
//! `.ssl_verify_peer = 0`, tests that look at which certificate came).
//! The handshake's signatures are still checked, so the peer holds the
//! key of the certificate it showed.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The PEM file of trusted roots: `file` if given, else the system bundle
/// (SSL_CERT_FILE, else Debian's /etc/ssl/certs/ca-certificates.crt).
pub fn ca_file(file: Option<&str>) -> String {
    match file {
        Some(f) => f.to_string(),
        None => std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| "/etc/ssl/certs/ca-certificates.crt".into()),
    }
}

/// Any certificate passes; signatures are checked with the provider's
/// algorithms.
#[derive(Debug)]
pub struct AnyCert(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
