//! What an operator needs to know of a certificate, read from its PEM
//! bundle: the names it serves (its subject's CN and its subjectAltName
//! DNS names and addresses) and when it expires. `tls.cert.list` shows
//! them; the manager counts and warns about live certificates close to
//! their end (`tls_cert_warn`).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A certificate's names and end of validity.
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    /// CN first, then the SANs not already named (in their order).
    pub names: Vec<String>,
    /// notAfter, in seconds since the epoch.
    pub not_after: i64,
}

impl Info {
    /// Whole days from `now` to the end (negative once expired).
    pub fn days_left(&self, now: i64) -> i64 {
        (self.not_after - now).div_euclid(86_400)
    }

    /// Within `warn` seconds of its end, or past it (never with `warn` 0).
    pub fn close_to_end(&self, now: i64, warn: i64) -> bool {
        warn > 0 && self.not_after - now <= warn
    }
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// The first certificate of a PEM bundle, described; None if there is
/// none or it cannot be read (tls.cert.load refuses those already).
pub fn of_pem(pem: &[u8]) -> Option<Info> {
    let der = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    of_der(&der)
}

/// A DER certificate, described.
pub fn of_der(der: &[u8]) -> Option<Info> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: String| {
        if !n.is_empty() && !names.contains(&n) {
            names.push(n);
        }
    };
    for cn in cert.subject().iter_common_name() {
        if let Ok(s) = cn.as_str() {
            add(s.to_string());
        }
    }
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => add(d.to_string()),
                GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => <[u8; 4]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_string()),
                        16 => <[u8; 16]>::try_from(*b).ok().map(|a| std::net::IpAddr::from(a).to_string()),
                        _ => None,
                    };
                    if let Some(ip) = ip {
                        add(ip);
                    }
                }
                _ => {}
            }
        }
    }
    Some(Info { names, not_after: cert.validity().not_after.timestamp() })
}

/// A time in seconds since the epoch as `2026-12-03T17:33:28Z`.
pub fn utc(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let (y, m, d) = common::httpdate::civil(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_end_of_a_certificate() {
        let mut p = rcgen::CertificateParams::new(vec!["www.example.com".into(), "*.example.com".into(), "127.0.0.1".into()]).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, "example.com");
        p.not_after = rcgen::date_time_ymd(2030, 6, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        let info = of_pem(cert.pem().as_bytes()).expect("described");
        assert_eq!(info.names, ["example.com", "www.example.com", "*.example.com", "127.0.0.1"]);
        assert_eq!(utc(info.not_after), "2030-06-01T00:00:00Z");
        assert_eq!(info.days_left(info.not_after - 86_400 * 3), 3);
        assert!(info.days_left(info.not_after + 1) < 0);
        assert_eq!(of_pem(b"not a certificate"), None);
        assert_eq!(of_der(b"\x30\x03\x02\x01\x01"), None, "DER that is no certificate");
    }

    #[test]
    fn dates_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_326_408), "2026-12-03T19:33:28Z");
    }
}
