//! HTTPS backends (Varnish Enterprise's `.ssl = 1`, `.ssl_sni`,
//! `.ssl_verify_peer`, `.ssl_verify_host`, with rustls): the client
//! settings a backend declaration makes ([`BeTls`]), and the connection a
//! fetch, a pipe or a pool holds, plain or TLS, or on a Unix socket
//! ([`BeStream`]).
//!
//! Defaults as Varnish Enterprise's: SNI on, the peer's chain verified,
//! its name not (`.ssl_verify_host = 1` asks for that). The name sent in
//! SNI and checked is `.host_header` (without a port) if set, else
//! `.host`. Trusted roots: `.ssl_ca_file` (cachekit's own), else the
//! system bundle (SSL_CERT_FILE, else /etc/ssl/certs/ca-certificates.crt).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A backend's TLS settings, ready to connect with.
#[derive(Debug)]
pub struct BeTls {
    pub config: Arc<ClientConfig>,
    /// The name for SNI and for the host check.
    pub name: ServerName<'static>,
    /// What the declaration asked (backend.list shows it).
    pub sni: bool,
    pub verify_peer: bool,
    pub verify_host: bool,
}

/// What a declaration says about TLS.
#[derive(Debug, Clone, Default)]
pub struct TlsAsk {
    pub sni: Option<bool>,
    pub verify_peer: Option<bool>,
    pub verify_host: Option<bool>,
    pub ca_file: Option<String>,
}

impl BeTls {
    /// Settings for a backend reached as `host` (the declaration's
    /// `.host_header` or `.host`); an error names what is wrong.
    pub fn new(host: &str, ask: &TlsAsk) -> Result<BeTls, String> {
        let (sni, verify_peer, verify_host) = (ask.sni.unwrap_or(true), ask.verify_peer.unwrap_or(true), ask.verify_host.unwrap_or(false));
        let bare = crate::util::host_name(host);
        let name = ServerName::try_from(bare.to_string()).map_err(|_| format!("'{bare}' is not a name or address for TLS"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder =
            ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().map_err(|e| format!("TLS: {e}"))?;
        let mut config = if verify_peer {
            let roots = Arc::new(roots(ask.ca_file.as_deref())?);
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| format!("TLS: {e}"))?;
            if verify_host {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            } else {
                builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(webpki))).with_no_client_auth()
            }
        } else {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(common::tls::AnyCert(provider))).with_no_client_auth()
        };
        config.enable_sni = sni;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(BeTls { config: Arc::new(config), name, sni, verify_peer, verify_host })
    }

    /// The idle pool key: connections made with other settings are not
    /// shared.
    pub fn pool_key(&self) -> String {
        format!("tls {:?} {} {} {}", self.name, self.sni, self.verify_peer, self.verify_host)
    }

    /// Shake hands on `tcp`.
    pub async fn connect(&self, tcp: TcpStream) -> io::Result<BeStream> {
        let c = tokio_rustls::TlsConnector::from(self.config.clone());
        Ok(BeStream::Tls(Box::new(c.connect(self.name.clone(), tcp).await?)))
    }
}

/// The roots in `file`, or in the system bundle.
fn roots(file: Option<&str>) -> Result<rustls::RootCertStore, String> {
    let path = common::tls::ca_file(file);
    let pem = std::fs::read(&path).map_err(|e| format!("cannot read CA file {path}: {e}"))?;
    let mut store = rustls::RootCertStore::empty();
    for c in rustls_pemfile_certs(&pem) {
        let _ = store.add(c);
    }
    if store.is_empty() {
        return Err(format!("no CA certificate in {path}"));
    }
    Ok(store)
}

/// The certificates of a PEM text.
fn rustls_pemfile_certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect()
}

/// `.ssl_verify_host = 0`: the chain must verify, the name need not match.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end: &CertificateDer<'_>,
        inter: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end, inter, name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A backend connection: plain or TLS over TCP, or plain on a Unix
/// domain socket (`.path`).
pub enum BeStream {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Unix(Box<tokio::net::UnixStream>),
}

/// What a connection on a Unix socket shows as its addresses (Varnish's
/// "bogo IP": `0.0.0.0 0` in BackendOpen).
const UNIX_ADDR: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));

impl BeStream {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            BeStream::Tcp(s) => Some(s),
            BeStream::Tls(s) => Some(s.get_ref().0),
            BeStream::Unix(_) => None,
        }
    }

    pub fn as_raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            BeStream::Unix(s) => s.as_raw_fd(),
            _ => self.tcp().map_or(-1, AsRawFd::as_raw_fd),
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().map_or(Ok(UNIX_ADDR), TcpStream::peer_addr)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().map_or(Ok(UNIX_ADDR), TcpStream::local_addr)
    }

    /// Is an idle connection still usable: not closed by the backend, no
    /// stray bytes on a plain one (on TLS, records may wait — a session
    /// ticket — and are the TLS layer's to read).
    pub fn alive(&self) -> bool {
        let Some(tcp) = self.tcp() else {
            // A Unix socket: peek without waiting; only "nothing to read
            // yet" means alive.
            let mut b = 0u8;
            // SAFETY: a one-byte buffer we own, on the socket's open fd.
            let n = unsafe { libc::recv(self.as_raw_fd(), (&mut b as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
            return n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock;
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut probe = [0u8; 1];
        let mut buf = ReadBuf::new(&mut probe);
        match (self, tcp.poll_peek(&mut cx, &mut buf)) {
            (_, Poll::Pending) => true,
            (BeStream::Tls(_), Poll::Ready(Ok(n))) => n > 0,
            _ => false,
        }
    }
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self.get_mut() {
            BeStream::Tcp($s) => $e,
            BeStream::Tls($s) => $e,
            BeStream::Unix($s) => $e,
        }
    };
}

impl AsyncRead for BeStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for BeStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}
