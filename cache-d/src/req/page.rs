//! Delivering an ESI page: its stored bytes between the includes' bodies,
//! in order, as they become ready. A page kept gzip goes to a client that
//! takes gzip as one gzip stream (its header, its stored segments, each
//! include's deflate data, its end), inflated segment by segment for one
//! that does not; inside another gzip page it adds its segments to that
//! page's stream. A gzip object included in a gzip page is spliced in
//! (Varnish's ESI delivery).

use std::io::Write as _;

use bytes::Bytes;

use crate::esi::gz::{splice, tail, GZIP_HDR};
use crate::esi::{EsiData, Instr};
use crate::gzip::code::inflate_segment;
use crate::req::gather::{Gather, MAX_COPIED, MAX_IOV};
use crate::req::include::Page;
use crate::req::state::Request;
use crate::req::transport::Transport;

/// How a page's own bytes go out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A plain page, or a gzip one inflated for a plain client.
    Plain,
    /// A gzip page's segments as stored; `top` writes the header and end.
    Gzip { top: bool },
}

/// Add a piece to what goes out, framed as a chunk if asked; its body
/// bytes (the framing is not counted, as in Varnish's accounting).
fn put(g: &mut Gather<'_>, part: Bytes, chunked: bool) -> u64 {
    let n = part.len() as u64;
    if part.is_empty() {
        return 0;
    }
    if chunked {
        let _ = write!(g.wire, "{:x}\r\n", part.len());
    }
    g.piece(part);
    if chunked {
        g.wire.extend_from_slice(b"\r\n");
    }
    n
}

/// Send the page `data` describes (its stored `pieces`), chunked if
/// planned; `gzip_client` when the client takes gzip. Returns the body
/// bytes sent (its includes' too) and whether it failed.
pub async fn send_esi<T: Transport>(
    r: &mut Request<'_, T>,
    wire: &mut Vec<u8>,
    data: &EsiData,
    pieces: Vec<Bytes>,
    chunked: bool,
    gzip_client: bool,
) -> (u64, bool) {
    let inside_gzip = r.conn.esi_gzip().is_some();
    let mode = match (&data.gzip, inside_gzip) {
        (Some(_), true) => Mode::Gzip { top: false },
        (Some(_), false) if gzip_client && r.req.esi_level == 0 => Mode::Gzip { top: true },
        _ => Mode::Plain,
    };
    if let (Some(acc), Mode::Gzip { .. }) = (r.conn.esi_gzip(), mode) {
        // The segments are deflate data already: not wrapped again.
        acc.stored = false;
    }
    // The top page holds its parts' writes (see ClientIo::hold).
    let top = r.req.esi_level == 0;
    if top {
        r.conn.hold(true);
    }
    let (sent, failed) = send_page(r, wire, data, pieces, chunked, mode).await;
    if top {
        let flushed = tokio::io::AsyncWriteExt::flush(r.conn.out()).await.is_ok();
        r.conn.hold(false);
        return (sent, failed || !flushed);
    }
    (sent, failed)
}

/// The page's parts and includes, in order (`send_esi`).
async fn send_page<T: Transport>(
    r: &mut Request<'_, T>,
    wire: &mut Vec<u8>,
    data: &EsiData,
    pieces: Vec<Bytes>,
    chunked: bool,
    mode: Mode,
) -> (u64, bool) {
    let mut page = Page::new(pieces);
    let mut g = Gather::new(wire);
    let mut body_tx = 0u64;
    let (mut crc, mut len) = (crate::gzip::code::crc32(0, &[]), 0u64);
    let mut crcs = data.gzip.iter().flatten();
    if mode == (Mode::Gzip { top: true }) {
        body_tx += put(&mut g, Bytes::from_static(&GZIP_HDR), chunked);
    }
    for i in &data.instrs {
        match i {
            Instr::Verbatim(n) => {
                let mut seg = Vec::new();
                page.take(*n, |part| seg.push(part));
                match mode {
                    Mode::Gzip { .. } => {
                        if let Some((c, l)) = crcs.next() {
                            crc = crate::gzip::code::crc32_combine(crc, *c, *l);
                            len += l;
                        }
                        for part in seg {
                            body_tx += put(&mut g, part, chunked);
                        }
                    }
                    Mode::Plain if data.gzip.is_some() => {
                        let joined = crate::gzip::code::join(&seg);
                        let mut out = Vec::new();
                        if inflate_segment(&joined, &mut |b| out.push(b)).is_err() {
                            return (body_tx, true);
                        }
                        for part in out {
                            body_tx += put(&mut g, part, chunked);
                        }
                    }
                    Mode::Plain => {
                        for part in seg {
                            body_tx += put(&mut g, part, chunked);
                        }
                    }
                }
            }
            Instr::Skip(n) => page.take(*n, |_| ()),
            Instr::Include { url, host, abort } => {
                if !g.is_empty() && !g.flush(r.conn.out()).await {
                    return (body_tx, true);
                }
                let gz = matches!(mode, Mode::Gzip { .. });
                let (ok, added, sent) = r.include(url, host.as_deref(), *abort, chunked, gz).await;
                body_tx += sent;
                if let Some((c, l)) = added {
                    crc = crate::gzip::code::crc32_combine(crc, c, l);
                    len += l;
                }
                if !ok {
                    return (body_tx, true);
                }
            }
        }
        if (g.segs.len() >= MAX_IOV || g.wire.len() >= MAX_COPIED) && !g.flush(r.conn.out()).await {
            return (body_tx, true);
        }
    }
    match mode {
        Mode::Gzip { top: true } => body_tx += put(&mut g, Bytes::copy_from_slice(&tail(crc, len)), chunked),
        Mode::Gzip { top: false } => {
            if let Some(acc) = r.conn.esi_gzip() {
                acc.add(crc, len);
            }
        }
        Mode::Plain => {}
    }
    if chunked {
        g.wire.extend_from_slice(b"0\r\n\r\n");
    }
    if !g.is_empty() && !g.flush(r.conn.out()).await {
        return (body_tx, true);
    }
    (body_tx, false)
}

/// A gzip object included in a gzip page: its deflate blocks spliced into
/// the page's stream (final bit cleared, padded to a byte), its CRC and
/// length added to the page's. None when it cannot be (not gzip, or not
/// whole), to be sent another way.
pub async fn send_spliced<T: Transport>(r: &mut Request<'_, T>, obj: &crate::cache::object::Meta, pieces: &[Bytes]) -> Option<(u64, bool)> {
    let info = obj.coding().filter(|c| c.gzip && c.esi_data.get().is_none())?.info.get().copied()?;
    let body = crate::gzip::code::join(pieces);
    let (bytes, crc, len) = splice(&body, info.bits.start, info.bits.last, info.bits.stop)?;
    let acc = r.conn.esi_gzip()?;
    acc.stored = false;
    acc.add(crc, len);
    let n = bytes.len() as u64;
    let ok = tokio::io::AsyncWriteExt::write_all(r.conn.out(), &bytes).await.is_ok();
    Some((n, !ok))
}
