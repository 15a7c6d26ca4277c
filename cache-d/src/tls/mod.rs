//! TLS termination (rustls, no OpenSSL): the certificates a child serves,
//! chosen by SNI, and the server configuration its `https` listeners
//! share. Certificates arrive from the manager over the control channel
//! (the manager reads the PEM files and keeps the live and staged sets;
//! private keys are never written to the shared segment or the log): it
//! sends `tls.cert.clear`, then `tls.cert.load ID PEM` for each certificate
//! of the set, then `tls.cert.commit`, which makes that set the one new
//! handshakes use (connections already open keep theirs).

pub mod config;
pub mod info;

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

/// One certificate: its id (the manager's name for it), the chain and key
/// rustls signs with, and the end-entity certificate for SNI matching.
pub struct Cert {
    pub id: String,
    key: Arc<CertifiedKey>,
    leaf: CertificateDer<'static>,
}

impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cert").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Cert {
    /// A PEM bundle as hitch takes it: the certificate, its chain, and its
    /// private key (PKCS#8, PKCS#1 or SEC1), in any order.
    pub fn from_pem(id: &str, pem: &[u8]) -> Result<Cert, String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{id}: bad certificate PEM ({})", pem_fault(&e)))?;
        let Some(leaf) = chain.first().cloned() else { return Err(format!("{id}: no certificate in the PEM")) };
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("{id}: no usable private key in the PEM ({})", pem_fault(&e)))?;
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let signer = provider.key_provider.load_private_key(key).map_err(|e| format!("{id}: private key not supported ({e})"))?;
        let key = CertifiedKey::new(chain, signer);
        key.keys_match().map_err(|e| format!("{id}: the private key does not belong to the certificate ({e})"))?;
        webpki::EndEntityCert::try_from(&leaf).map_err(|e| format!("{id}: unreadable certificate ({e})"))?;
        Ok(Cert { id: id.to_string(), key: Arc::new(key), leaf })
    }

    /// Is this certificate valid for `name` (its SANs, wildcards included)?
    fn serves(&self, name: &str) -> bool {
        let (Ok(ee), Ok(sn)) = (webpki::EndEntityCert::try_from(&self.leaf), ServerName::try_from(name)) else { return false };
        ee.verify_is_valid_for_subject_name(&sn).is_ok()
    }
}

/// What is wrong with a PEM file, in words that quote none of it: the
/// parser's own messages hold the line at fault, and `tls.cert.load`
/// answers an admin session about a file the manager may read and the
/// session may not.
fn pem_fault(e: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { .. } => "a section without its END line",
        Error::IllegalSectionStart { .. } => "a malformed BEGIN line",
        Error::Base64Decode(_) => "a section that is not base64",
        Error::NoItemsFound => "no PEM section",
        Error::SectionTooLarge => "a section too large",
        _ => "unreadable",
    }
}

/// The certificates handshakes choose from: the first that serves the
/// client's SNI name, else the first loaded (the default, as hitch).
#[derive(Debug, Default)]
pub struct CertSet {
    pub certs: Vec<Arc<Cert>>,
}

impl CertSet {
    pub fn pick(&self, sni: Option<&str>) -> Option<&Arc<Cert>> {
        sni.and_then(|n| self.certs.iter().find(|c| c.serves(n))).or_else(|| self.certs.first())
    }
}

/// The child's TLS state: the live set (what handshakes use), the staged
/// one (what `tls.cert.commit` makes live), and the server configuration.
pub struct Tls {
    resolver: Arc<Resolver>,
    staged: Mutex<Vec<Arc<Cert>>>,
    /// ALPN offering http/1.1, and h2 then http/1.1 (feature http2).
    http1: Arc<ServerConfig>,
    http2: Arc<ServerConfig>,
    /// QUIC's: TLS 1.3 only, ALPN h3, no early data (0-RTT can be
    /// replayed); and with it (h3_0rtt).
    http3: Arc<ServerConfig>,
    http3_early: Arc<ServerConfig>,
}

#[derive(Debug)]
struct Resolver {
    live: ArcSwap<CertSet>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.live.load().pick(hello.server_name()).map(|c| c.key.clone())
    }
}

impl Default for Tls {
    fn default() -> Tls {
        Tls::new()
    }
}

impl Tls {
    pub fn new() -> Tls {
        let resolver = Arc::new(Resolver { live: ArcSwap::from_pointee(CertSet::default()) });
        // TLS 1.2 and 1.3 with rustls's default (safe) suites, AES-128-GCM
        // first and in our order (as Cloudflare and Google choose): the
        // same security in TLS, and its SHA-256 key schedule runs on the
        // CPU's SHA extensions where SHA-384 (AES-256-GCM's) runs scalar
        // on AMD CPUs — a third of a resumed handshake's cost (measured
        // with ring). The provider is aws-lc-rs, not ring (issue 37): its
        // RSA-2048 signatures made full handshakes 1.25x nginx's per
        // CPU-second where ring's gave 0.94x; ECDSA and the record layer
        // cost the same with either (scripts/bench-cpu.sh handshake tls).
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.cipher_suites.sort_by_key(|s| match s.suite() {
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 | rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 1,
            _ => 2,
        });
        let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("TLS 1.2 and 1.3 with the aws-lc-rs provider")
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.ignore_client_order = true;
        // One TLS 1.3 ticket per handshake (rustls sends two by default,
        // for clients that open parallel connections): each costs an
        // encryption here and a session stored by the client.
        config.send_tls13_tickets = 1;
        // Resumption: session ids (TLS 1.2) and stateless tickets.
        config.session_storage = ServerSessionMemoryCache::new(20_000);
        if let Ok(t) = rustls::crypto::aws_lc_rs::Ticketer::new() {
            config.ticketer = t;
        }
        let mut http2 = config.clone();
        http2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let quic = || {
            let mut c = ServerConfig::builder_with_provider(config.crypto_provider().clone())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .expect("TLS 1.3 with the aws-lc-rs provider")
                .with_no_client_auth()
                .with_cert_resolver(resolver.clone());
            c.alpn_protocols = vec![b"h3".to_vec()];
            c.ignore_client_order = true;
            c.send_tls13_tickets = 1;
            c.session_storage = config.session_storage.clone();
            c
        };
        let mut http3 = quic();
        http3.ticketer = config.ticketer.clone();
        http3.max_early_data_size = 0;
        // 0-RTT: rustls takes early data only on stateful resumption, each
        // session id used once (its anti-replay), so no stateless tickets;
        // quinn takes all or nothing (the stream limits bound it).
        let mut early = quic();
        early.max_early_data_size = u32::MAX;
        Tls {
            resolver,
            staged: Mutex::new(Vec::new()),
            http1: Arc::new(config),
            http2: Arc::new(http2),
            http3: Arc::new(http3),
            http3_early: Arc::new(early),
        }
    }

    /// The configuration of QUIC handshakes (the same certificates, session
    /// cache and ticket keys as TCP's), taking 0-RTT data when `early`.
    pub fn quic_config(&self, early: bool) -> Arc<ServerConfig> {
        if early {
            self.http3_early.clone()
        } else {
            self.http3.clone()
        }
    }

    /// The configuration for a handshake: ALPN offers h2 when `h2`. Both
    /// share certificates, session cache and ticket keys.
    pub fn config(&self, h2: bool) -> Arc<ServerConfig> {
        if h2 {
            self.http2.clone()
        } else {
            self.http1.clone()
        }
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Cert>>> {
        self.staged.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stage a certificate (replacing a staged one with the same id).
    pub fn load(&self, id: &str, pem: &[u8]) -> Result<(), String> {
        let cert = Arc::new(Cert::from_pem(id, pem)?);
        let mut s = self.staged();
        match s.iter_mut().find(|c| c.id == id) {
            Some(slot) => *slot = cert,
            None => s.push(cert),
        }
        Ok(())
    }

    /// Start staging a new set.
    pub fn clear_staged(&self) {
        self.staged().clear();
    }

    /// New handshakes use the staged set from now on.
    pub fn commit(&self) {
        let certs = self.staged().clone();
        self.resolver.live.store(Arc::new(CertSet { certs }));
    }

    /// Ids of the live certificates, default first.
    pub fn live_ids(&self) -> Vec<String> {
        self.resolver.live.load().certs.iter().map(|c| c.id.clone()).collect()
    }
}

#[cfg(test)]
mod tests;
