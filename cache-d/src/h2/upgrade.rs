//! Answering an `Upgrade: h2c` request (RFC 7540 §3.2) with [`switch`]. The crate has no
//! way to start a server connection with stream 1 already open, so the
//! upgrade request is handed to it as the client would have sent it on
//! HTTP/2: a HEADERS frame (HPACK literals, never indexed) placed right
//! after the client's preface and first SETTINGS frame.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::io::Rewind;
use crate::http1::head::Head;
use crate::req::reason::Reason;

/// Answer an upgrade with 101 and have its request arrive on stream 1,
/// after the client's preface and first SETTINGS frame; an
/// HTTP2-Settings field that is not base64url SETTINGS closes the
/// connection instead, as Varnish does.
pub async fn switch<S: AsyncRead + AsyncWrite + Unpin>(io: &mut Rewind<S>, head: &Head) -> Result<(), Reason> {
    if !settings_field_ok(head.get("http2-settings").unwrap_or_default()) {
        return Err(Reason::RxJunk);
    }
    let answer = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
    io.get_mut().write_all(answer).await.map_err(|_| Reason::TxError)?;
    io.inject_after_settings(request_frames(head));
    Ok(())
}

/// Is this HTTP2-Settings value base64url (RFC 4648 §5, padding
/// optional) of whole SETTINGS entries (six bytes each)?
pub fn settings_field_ok(v: &[u8]) -> bool {
    let v = v.trim_ascii();
    let body = v.strip_suffix(b"==").or_else(|| v.strip_suffix(b"=")).unwrap_or(v);
    let alphabet = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    body.iter().all(alphabet) && (body.len() * 6 / 8) % 6 == 0 && body.len() % 4 != 1
}

/// Fields that do not go on a stream (RFC 9113 §8.2.2), with those of the
/// upgrade itself.
const NOT_ON_STREAM: [&str; 8] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "http2-settings", "host", "te"];

/// The upgrade request as HEADERS (and CONTINUATION) frames on stream 1,
/// END_STREAM set: pseudo-fields, then the fields in order, names in
/// lower case.
pub fn request_frames(head: &Head) -> Vec<u8> {
    let mut block = Vec::with_capacity(head.raw.len() + 64);
    literal(&mut block, b":method", head.method());
    literal(&mut block, b":scheme", b"http");
    literal(&mut block, b":path", head.url());
    if let Some(host) = head.get("host") {
        literal(&mut block, b":authority", host.trim_ascii());
    }
    for (name, value) in head.iter() {
        if NOT_ON_STREAM.iter().any(|n| name.eq_ignore_ascii_case(n.as_bytes())) {
            continue;
        }
        literal(&mut block, &name.to_ascii_lowercase(), value);
    }
    let mut frames = Vec::with_capacity(block.len() + 32);
    let pieces: Vec<&[u8]> = if block.is_empty() { vec![&[][..]] } else { block.chunks(16_384).collect() };
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        let (kind, mut flags) = if i == 0 { (0x1, 0x1) } else { (0x9, 0x0) };
        if last {
            flags |= 0x4;
        }
        let len = piece.len();
        frames.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags, 0, 0, 0, 1]);
        frames.extend_from_slice(piece);
    }
    frames
}

/// An HPACK literal field without indexing, with a new name (RFC 7541
/// §6.2.2), neither string Huffman-coded.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    int(out, 7, name.len());
    out.extend_from_slice(name);
    int(out, 7, value.len());
    out.extend_from_slice(value);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); the prefix's
/// other bits are 0 (the H flag is off).
fn int(out: &mut Vec<u8>, n: u32, v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(v as u8);
        return;
    }
    out.push(max as u8);
    let mut v = v - max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}
