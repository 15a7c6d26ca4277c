//! https for the load generator: a rustls client configuration (trusting
//! `--cacert`, the system's bundle, or with `--insecure` anything) and the
//! name handshakes send in SNI.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

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
    /// Resume sessions across the run's connections (rustls's session
    /// cache); off, every handshake is a full one.
    pub resume: bool,
}

/// The client configuration for `host`: TLS 1.2 and 1.3, ALPN and
/// resumption as `mode` says.
pub fn client(host: &str, cacert: Option<&str>, insecure: bool, mode: Mode) -> Result<TlsClient> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().map_err(|e| anyhow!("TLS: {e}"))?;
    let mut config = if insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(common::tls::AnyCert(provider))).with_no_client_auth()
    } else {
        let file = common::tls::ca_file(cacert);
        let mut roots = RootCertStore::empty();
        let pem = std::fs::read(&file).with_context(|| format!("--cacert {file}"))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| anyhow!("--cacert {file}: {e}"))?;
            roots.add(cert).map_err(|e| anyhow!("--cacert {file}: {e}"))?;
        }
        if roots.is_empty() {
            bail!("--cacert {file}: no certificate in it");
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    // ALPN: the protocol the run speaks (h2 with --h2).
    config.alpn_protocols = vec![if mode.h2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
    if !mode.resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    let name = ServerName::try_from(host.to_string()).map_err(|_| anyhow!("{host}: not a name for TLS"))?;
    Ok(TlsClient { config: Arc::new(config), name })
}
