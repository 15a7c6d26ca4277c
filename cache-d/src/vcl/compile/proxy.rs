//! `import proxy;`: Varnish 7.1's bundled vmod_proxy. It reads the TLVs
//! of the connection's PROXY version 2 header (kept on the session's
//! [`Ends`]), as a TLS terminator in front sends them: ALPN, authority
//! (SNI), and the SSL TLV's client flags, verify result and sub-TLVs
//! (version, cipher, key and signature algorithms, client certificate's
//! CN). Without the TLV asked for, the strings are unset, the flags
//! false and the verify result 0 (X509_V_OK), as vmod_proxy.
//!
//! [`Ends`]: crate::vcl::model::Ends

use super::program::*;
use super::vmod::one_arg;
use crate::listen::proxy::tlv;
use crate::vcl::ast::*;
use crate::vcl::diag::VclError;
use crate::vcl::model::Task;

const PP2_TYPE_ALPN: u8 = 0x01;
const PP2_TYPE_AUTHORITY: u8 = 0x02;
const PP2_TYPE_SSL: u8 = 0x20;
const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;
const PP2_SUBTYPE_SSL_SIG_ALG: u8 = 0x24;
const PP2_SUBTYPE_SSL_KEY_ALG: u8 = 0x25;
const PP2_CLIENT_SSL: u8 = 0x01;
const PP2_CLIENT_CERT_CONN: u8 = 0x02;
const PP2_CLIENT_CERT_SESS: u8 = 0x04;

/// The value of the TLV `typ` of the client connection's PROXY header
/// (the client side only: Varnish reads it through the request).
fn value(t: &Task<'_>, typ: u8) -> Option<Vec<u8>> {
    t.req.as_ref()?;
    let tlvs = t.ends.as_ref()?.proxy_tlvs.as_deref()?;
    tlv(tlvs, typ).map(<[u8]>::to_vec)
}

/// A TLV as a string: its bytes up to a NUL (Varnish copies it into a C
/// string).
fn string(t: &Task<'_>, typ: u8) -> Val {
    match value(t, typ) {
        Some(v) => {
            let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
            Val::Str(String::from_utf8_lossy(&v[..end]).into_owned())
        }
        None => Val::None,
    }
}

/// A function of vmod_proxy; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("proxy.")?;
    let typ = match f {
        "alpn" => PP2_TYPE_ALPN,
        "authority" => PP2_TYPE_AUTHORITY,
        "ssl_version" => PP2_SUBTYPE_SSL_VERSION,
        "ssl_cipher" => PP2_SUBTYPE_SSL_CIPHER,
        "cert_sign" => PP2_SUBTYPE_SSL_SIG_ALG,
        "cert_key" => PP2_SUBTYPE_SSL_KEY_ALG,
        "client_cert_cn" => PP2_SUBTYPE_SSL_CN,
        "is_ssl" | "client_has_cert_sess" | "client_has_cert_conn" | "ssl_verify_result" => PP2_TYPE_SSL,
        _ => return None,
    };
    if let Err(e) = one_arg(args, name, 0, pos, sc) {
        return Some(Err(e));
    }
    let flag = match f {
        "is_ssl" => PP2_CLIENT_SSL,
        "client_has_cert_sess" => PP2_CLIENT_CERT_SESS,
        "client_has_cert_conn" => PP2_CLIENT_CERT_CONN,
        _ => 0,
    };
    Some(Ok(match f {
        // The SSL TLV: a client flags byte, then the verify result (four
        // bytes, big-endian), then its sub-TLVs.
        "ssl_verify_result" => Box::new(|t, _| {
            let v = value(t, PP2_TYPE_SSL).unwrap_or_default();
            Val::Int(v.get(1..5).map_or(0, |b| i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))))
        }),
        _ if flag != 0 => {
            Box::new(move |t, _| Val::Bool(value(t, PP2_TYPE_SSL).and_then(|v| v.first().copied()).is_some_and(|c| c & flag == flag)))
        }
        _ => Box::new(move |t, _| string(t, typ)),
    }))
}
