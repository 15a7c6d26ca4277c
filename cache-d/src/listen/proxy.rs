//! The PROXY protocol (versions 1 and 2, haproxy's specification) as a
//! listener with `,PROXY` reads it before the first request: sans-io, fed
//! whatever bytes have arrived. What it accepts, refuses and logs follows
//! Varnish's PROXY transport: a version 1 line of exactly five fields
//! (`TCP4`/`TCP6` and numeric addresses, `UNKNOWN` refused), at most 107
//! bytes; a version 2 header of at most 1,024 bytes, its 16 included,
//! whose LOCAL command, unspecified or unsupported address families and
//! short address blocks keep the connection's own addresses (logged as
//! ProxyGarbage), whose TLVs must be well formed, fit where Varnish keeps
//! them, and whose CRC32C, when sent, must be four bytes and match.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use common::log::vsl::Tag;

/// The version 2 signature.
pub const V2_SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const V1_SIG: &[u8] = b"PROXY";
/// Longest version 1 line, CRLF included (the specification's 107).
const V1_MAX: usize = 107;
/// Longest version 2 header, its 16 bytes included: Varnish reads a
/// PROXY header into at most VPX_MAX_LEN (1,024) bytes, so a block of
/// more than 1,008 overflows there (RX_OVERFLOW, no record).
const V2_MAX: usize = 1024;
/// What Varnish's session workspace (workspace_session, 768 bytes by
/// default) has left when a version 2 header's TLVs are copied into it:
/// the client's address and port, as text, come out of these 416 bytes
/// (each rounded up to 8), then the TLVs with an 8-byte head (rounded up
/// to 8), then an 8-byte pointer to them. Measured against varnishd 7.1
/// with IPv4 and IPv6 addresses of several lengths: 376 bytes of TLVs
/// fit behind `192.0.2.7 40000`, 384 behind `::1 1`, 352 behind a
/// 39-character IPv6 address. More is refused with an Error record, the
/// connection closed (RX_JUNK) — 330 empty TLVs among them.
const V2_TLV_ROOM: usize = 416;
const TLV_CRC32C: u8 = 0x03;
const TLV_SSL: u8 = 0x20;

/// What the bytes so far make.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// Not complete yet: read more.
    More,
    /// Neither signature: the connection is closed (RX_JUNK).
    Junk,
    /// Longer than a header may be (RX_OVERFLOW).
    Overflow,
    /// A whole header of `len` bytes; the rest is the first request.
    Complete { len: usize, header: Result<Header, Garbage> },
}

/// A header that was read.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    /// The client and server addresses it carries; None keeps the
    /// connection's own (version 2 LOCAL, unsupported families).
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    /// The `Proxy` record's payload, when there is one.
    pub record: Option<String>,
    /// `ProxyGarbage` records for what was ignored.
    pub ignored: Option<String>,
    /// The version 2 TLVs as sent (for the policy to read).
    pub tlvs: Vec<u8>,
}

/// A header that closes the connection: the records Varnish writes for
/// it (none for some faults of version 1).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Garbage {
    /// The `Proxy` record of the addresses read before the fault was
    /// found (a version 2 header's TLVs are checked after it).
    pub proxy: Option<String>,
    /// Why: a `ProxyGarbage` record, or an `Error` record when the TLVs
    /// do not fit.
    pub why: Option<(Tag, String)>,
}

/// Look at the bytes received so far.
pub fn scan(buf: &[u8]) -> Scan {
    let v1 = buf.iter().zip(V1_SIG).all(|(a, b)| a == b);
    let v2 = buf.iter().zip(&V2_SIG).all(|(a, b)| a == b);
    if !v1 && !v2 {
        return Scan::Junk;
    }
    if v1 {
        if buf.len() <= V1_SIG.len() {
            return Scan::More;
        }
        return match buf.iter().position(|&b| b == b'\n') {
            Some(nl) if nl > V1_MAX => Scan::Overflow,
            Some(nl) => Scan::Complete { len: nl + 1, header: v1_line(&buf[..=nl]) },
            None if buf.len() > V1_MAX => Scan::Overflow,
            None => Scan::More,
        };
    }
    if buf.len() < 16 {
        return Scan::More;
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if 16 + len > V2_MAX {
        return Scan::Overflow;
    }
    if buf.len() < 16 + len {
        return Scan::More;
    }
    Scan::Complete { len: 16 + len, header: v2_header(&buf[..16 + len]) }
}

fn garbage(why: &str) -> Result<Header, Garbage> {
    Err(Garbage { proxy: None, why: Some((Tag::ProxyGarbage, why.to_string())) })
}

/// `PROXY TCP4 src dst sport dport\r\n` (the line up to its newline).
fn v1_line(line: &[u8]) -> Result<Header, Garbage> {
    // Up to a CR, which a LF must follow.
    let Some(cr) = line.iter().position(|&b| b == b'\r') else { return Err(Garbage::default()) };
    if line.get(cr + 1) != Some(&b'\n') {
        return Err(Garbage::default());
    }
    let mut fields = line[..cr].split(|&b| b == b' ');
    fields.next(); // PROXY
    let fld: Vec<&[u8]> = fields.collect();
    if fld.len() < 5 {
        return garbage("PROXY1: Too few fields");
    }
    if fld.len() > 5 {
        return garbage("PROXY1: Too many fields");
    }
    let v6 = match fld[0] {
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return garbage("PROXY1: Wrong TCP[46] field"),
    };
    let addr = |ip: &[u8], port: &[u8]| -> Option<SocketAddr> {
        let (ip, port) = (std::str::from_utf8(ip).ok()?, std::str::from_utf8(port).ok()?);
        let ip: IpAddr = if v6 { IpAddr::V6(ip.parse().ok()?) } else { IpAddr::V4(ip.parse().ok()?) };
        Some(SocketAddr::new(ip, numeric_port(port)?))
    };
    let Some(client) = addr(fld[1], fld[3]) else { return garbage("PROXY1: Cannot resolve source address") };
    let Some(server) = addr(fld[2], fld[4]) else { return garbage("PROXY1: Cannot resolve destination address") };
    Ok(Header {
        addrs: Some((client, server)),
        // The fields as sent (they parsed as addresses and ports: ASCII).
        record: Some(format!("1 {} {} {} {}", text(fld[1]), text(fld[3]), text(fld[2]), text(fld[4]))),
        ignored: None,
        tlvs: Vec::new(),
    })
}

fn text(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or_default()
}

/// A port as getaddrinfo's numeric service takes it: decimal digits, 0 to 65535.
fn numeric_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A whole version 2 header (16 bytes and its block).
fn v2_header(h: &[u8]) -> Result<Header, Garbage> {
    let keep = |why: String| Ok(Header { addrs: None, record: None, ignored: Some(why), tlvs: Vec::new() });
    if h[12] >> 4 != 2 {
        return garbage(&format!("PROXY2: bad version ({})", h[12] >> 4));
    }
    match h[12] & 0x0f {
        0 => return Ok(Header { addrs: None, record: Some("2 local local local local".into()), ignored: None, tlvs: Vec::new() }),
        1 => {}
        c => return garbage(&format!("PROXY2: bad command ({c})")),
    }
    let alen = match h[13] {
        0x00 => return keep("PROXY2: Ignoring UNSPEC|UNSPEC addresses".into()),
        0x11 => 4,
        0x21 => 16,
        p => return keep(format!("PROXY2: Ignoring unsupported protocol (0x{p:02x})")),
    };
    let block = &h[16..];
    let flen = 2 * alen + 4;
    if block.len() < flen {
        let fam = if alen == 4 { "IPv4" } else { "IPv6" };
        return keep(format!("PROXY2: Ignoring short {fam} addresses ({})", block.len()));
    }
    let ip = |b: &[u8]| -> IpAddr {
        if alen == 4 {
            IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[..16]);
            IpAddr::V6(Ipv6Addr::from(a))
        }
    };
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    let client = SocketAddr::new(ip(&block[..alen]), port(&block[2 * alen..]));
    let server = SocketAddr::new(ip(&block[alen..2 * alen]), port(&block[2 * alen + 2..]));
    let record = format!("2 {} {} {} {}", client.ip(), client.port(), server.ip(), server.port());
    // Varnish logs the addresses, then walks the TLVs.
    let closed = |why: (Tag, String)| Err(Garbage { proxy: Some(record.clone()), why: Some(why) });
    let tlvs = &block[flen..];
    // Each checksum TLV is checked where the walk meets it, with the
    // checksums met so far zeroed, as Varnish zeroes them in place.
    // Varnish reads four bytes whatever the TLV's length: a shorter one
    // is compared with bytes that are not its own, and is refused.
    let mut zeroed = h.to_vec();
    let mut bad_crc = false;
    let walk = walk_tlvs(tlvs, &mut |t, at, v| {
        if t == TLV_SSL {
            if v.len() < 5 {
                return Err("Length Error");
            }
            walk_tlvs(&v[5..], &mut |_, _, _| Ok(()))?;
        } else if t == TLV_CRC32C {
            let at = 16 + flen + at;
            bad_crc = v.len() < 4 || {
                let sent = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
                zeroed[at..at + 4].fill(0);
                // CRC-32C (Castagnoli), as the checksum TLV carries it.
                crc32c::crc32c(&zeroed) != sent
            };
            if bad_crc {
                return Err("CRC error");
            }
        }
        Ok(())
    });
    match walk {
        Err(_) if bad_crc => return closed((Tag::ProxyGarbage, "PROXY2: CRC error".into())),
        Err(e) => return closed((Tag::ProxyGarbage, format!("PROXY2: TLV {e}"))),
        Ok(()) => {}
    }
    let round8 = |n: usize| n.div_ceil(8) * 8;
    let text = round8(client.ip().to_string().len() + 1) + round8(client.port().to_string().len() + 1);
    let room = V2_TLV_ROOM.saturating_sub(text);
    if round8(8 + tlvs.len()) > room {
        return closed((Tag::Error, "insufficient workspace".into()));
    }
    if round8(8 + tlvs.len()) + 8 > room {
        return closed((Tag::Error, "insufficient workspace (proto_priv)".into()));
    }
    Ok(Header { addrs: Some((client, server)), record: Some(record), ignored: None, tlvs: tlvs.to_vec() })
}

/// Called with each TLV's type, offset and value; an error stops the walk.
type EachTlv<'a> = dyn FnMut(u8, usize, &[u8]) -> Result<(), &'static str> + 'a;

/// Each TLV of a block: its type, where its value starts in the block
/// and the value. The first malformed one ends the walk with its error.
fn walk_tlvs(mut b: &[u8], each: &mut EachTlv<'_>) -> Result<(), &'static str> {
    let mut at = 0;
    while !b.is_empty() {
        if b.len() < 3 {
            return Err("Dribble bytes");
        }
        let l = usize::from(u16::from_be_bytes([b[1], b[2]]));
        if l + 3 > b.len() {
            return Err("Length Error");
        }
        each(b[0], at + 3, &b[3..3 + l])?;
        at += 3 + l;
        b = &b[3 + l..];
    }
    Ok(())
}

/// The value of the first TLV of `typ` (looking inside the SSL TLV too),
/// as Varnish's VPX_tlv finds it.
pub fn tlv(tlvs: &[u8], typ: u8) -> Option<&[u8]> {
    let mut found = None;
    let _ = walk_tlvs(tlvs, &mut |t, at, v| {
        if found.is_none() && t == typ {
            found = Some(at..at + v.len());
        } else if found.is_none() && t == TLV_SSL && v.len() >= 5 {
            let _ = walk_tlvs(&v[5..], &mut |t2, at2, v2| {
                if found.is_none() && t2 == typ {
                    found = Some(at + 5 + at2..at + 5 + at2 + v2.len());
                }
                Ok(())
            });
        }
        Ok(())
    });
    found.map(|r| &tlvs[r])
}

#[cfg(test)]
mod tests;
