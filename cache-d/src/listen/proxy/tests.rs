//! The PROXY parser: good headers of both versions, and a table of
//! hostile ones with the answer each must get.

use super::*;

fn v2(cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
    let mut h = V2_SIG.to_vec();
    h.push(cmd);
    h.push(fam);
    h.extend_from_slice(&(block.len() as u16).to_be_bytes());
    h.extend_from_slice(block);
    h
}

fn v4_block() -> Vec<u8> {
    let mut b = vec![192, 0, 2, 7, 198, 51, 100, 9];
    b.extend_from_slice(&40000u16.to_be_bytes());
    b.extend_from_slice(&443u16.to_be_bytes());
    b
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn complete(buf: &[u8]) -> (usize, Result<Header, Garbage>) {
    match scan(buf) {
        Scan::Complete { len, header } => (len, header),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

#[test]
fn version_1_gives_both_addresses_and_leaves_the_request() {
    let buf = b"PROXY TCP4 192.0.2.7 198.51.100.9 40000 443\r\nGET / HTTP/1.1\r\n\r\n";
    let (len, h) = complete(buf);
    assert_eq!(&buf[len..len + 3], b"GET");
    let h = h.unwrap();
    assert_eq!(h.addrs, Some((sa("192.0.2.7:40000"), sa("198.51.100.9:443"))));
    assert_eq!(h.record.as_deref(), Some("1 192.0.2.7 40000 198.51.100.9 443"));
    let (_, h) = complete(b"PROXY TCP6 2001:db8::1 ::1 5 80\r\n");
    assert_eq!(h.unwrap().addrs, Some((sa("[2001:db8::1]:5"), sa("[::1]:80"))));
}

#[test]
fn version_2_gives_both_addresses_and_keeps_its_tlvs() {
    let mut block = v4_block();
    block.extend_from_slice(&[0x02, 0, 3, b'a', b'.', b'b']); // authority
    let mut buf = v2(0x21, 0x11, &block);
    let n = buf.len();
    buf.extend_from_slice(b"GET /");
    let (len, h) = complete(&buf);
    assert_eq!(len, n);
    let h = h.unwrap();
    assert_eq!(h.addrs, Some((sa("192.0.2.7:40000"), sa("198.51.100.9:443"))));
    assert_eq!(h.record.as_deref(), Some("2 192.0.2.7 40000 198.51.100.9 443"));
    assert_eq!(tlv(&h.tlvs, 0x02), Some(&b"a.b"[..]));
    assert_eq!(tlv(&h.tlvs, 0x01), None);
    // IPv6
    let mut b6 = vec![0u8; 36];
    b6[15] = 1;
    b6[31] = 2;
    b6[32..34].copy_from_slice(&1234u16.to_be_bytes());
    b6[34..36].copy_from_slice(&80u16.to_be_bytes());
    let (_, h) = complete(&v2(0x21, 0x21, &b6));
    assert_eq!(h.unwrap().addrs, Some((sa("[::1]:1234"), sa("[::2]:80"))));
}

#[test]
fn a_sound_checksum_passes_and_a_wrong_one_closes() {
    let mut block = v4_block();
    block.extend_from_slice(&[TLV_CRC32C, 0, 4, 0, 0, 0, 0]);
    let mut buf = v2(0x21, 0x11, &block);
    let crc = crc32c::crc32c(&buf).to_be_bytes();
    let at = buf.len() - 4;
    buf[at..].copy_from_slice(&crc);
    assert!(complete(&buf).1.is_ok());
    buf[at] ^= 1;
    let closed =
        Garbage { proxy: Some("2 192.0.2.7 40000 198.51.100.9 443".into()), why: Some((Tag::ProxyGarbage, "PROXY2: CRC error".into())) };
    assert_eq!(complete(&buf).1, Err(closed));
    // The standard check value of CRC-32C.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn bytes_arriving_one_at_a_time_make_the_same_header() {
    let mut v2buf = v2(0x21, 0x11, &v4_block());
    v2buf.extend_from_slice(b"GET");
    for whole in [&b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET"[..], &v2buf] {
        let end = whole.len() - 3;
        for cut in 0..end {
            assert_eq!(scan(&whole[..cut]), Scan::More, "cut at {cut}");
        }
        assert!(matches!(scan(whole), Scan::Complete { len, header: Ok(_) } if len == end));
    }
}

/// Hostile headers and what each gets: (bytes, the answer).
#[test]
fn hostile_headers() {
    let junk = |b: &[u8]| scan(b) == Scan::Junk;
    let overflow = |b: &[u8]| scan(b) == Scan::Overflow;
    let garbage = |b: &[u8], why: Option<&str>| matches!(scan(b), Scan::Complete { header: Err(Garbage { why: g, .. }), .. } if g.as_ref().map(|(_, w)| w.as_str()) == why);
    let ignored = |b: &[u8], why: &str| matches!(scan(b), Scan::Complete { header: Ok(Header { addrs: None, ignored: Some(g), .. }), .. } if g == why);
    // Not PROXY at all: a plain request, TLS, one wrong byte of each signature.
    assert!(junk(b"GET / HTTP/1.1\r\n"));
    assert!(junk(&[0x16, 0x03, 0x01]));
    assert!(junk(b"PROXz"));
    assert!(junk(b"\r\n\r\n\0\r\nQUIt"));
    assert!(junk(b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n"));
    // Version 1.
    assert!(overflow(&[b"PROXY ".as_slice(), &[b'A'; 200]].concat()));
    assert!(overflow(&[b"PROXY TCP4 ".as_slice(), &[b'1'; 120], b"\r\n"].concat()));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", None), "LF without CR");
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX\n", None), "CR not followed by LF");
    assert!(garbage(b"PROXY UNKNOWN\r\n", Some("PROXY1: Too few fields")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", Some("PROXY1: Too few fields")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", Some("PROXY1: Too many fields")));
    assert!(garbage(b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", Some("PROXY1: Too many fields")));
    assert!(garbage(b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", Some("PROXY1: Wrong TCP[46] field")));
    assert!(garbage(b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", Some("PROXY1: Cannot resolve source address")));
    assert!(garbage(b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", Some("PROXY1: Cannot resolve source address")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", Some("PROXY1: Cannot resolve source address")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", Some("PROXY1: Cannot resolve source address")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 http\r\n", Some("PROXY1: Cannot resolve destination address")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 example.com 1 2\r\n", Some("PROXY1: Cannot resolve destination address")));
    assert!(garbage(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \xff\r\n", Some("PROXY1: Cannot resolve destination address")));
    // Version 2.
    let mut long = V2_SIG.to_vec();
    long.extend_from_slice(&[0x21, 0x11, 0x03, 0xf1]); // 1,009 bytes announced: 1,025 in all
    assert!(overflow(&long));
    let mut filled = v2(0x21, 0x11, &[v4_block(), vec![0xe0, 0x03, 0xe1], vec![b'a'; 993]].concat());
    assert_eq!(filled.len(), 1024);
    assert_eq!(scan(&filled[..1000]), Scan::More);
    assert!(matches!(scan(&filled), Scan::Complete { len: 1024, .. }), "1,024 bytes in all is not too long");
    filled[15] += 1;
    assert!(overflow(&filled));
    assert!(garbage(&v2(0x11, 0x11, &v4_block()), Some("PROXY2: bad version (1)")));
    assert!(garbage(&v2(0x22, 0x11, &v4_block()), Some("PROXY2: bad command (2)")));
    assert!(ignored(&v2(0x21, 0x00, &[]), "PROXY2: Ignoring UNSPEC|UNSPEC addresses"));
    assert!(ignored(&v2(0x21, 0x31, &[0; 216]), "PROXY2: Ignoring unsupported protocol (0x31)"));
    assert!(ignored(&v2(0x21, 0x12, &v4_block()), "PROXY2: Ignoring unsupported protocol (0x12)"));
    assert!(ignored(&v2(0x21, 0x11, &[1, 2, 3]), "PROXY2: Ignoring short IPv4 addresses (3)"));
    assert!(ignored(&v2(0x21, 0x21, &[0; 35]), "PROXY2: Ignoring short IPv6 addresses (35)"));
    let local = scan(&v2(0x20, 0x00, &[]));
    assert!(
        matches!(local, Scan::Complete { header: Ok(Header { addrs: None, record: Some(r), .. }), .. } if r == "2 local local local local")
    );
    let with = |tlvs: &[u8]| [v4_block(), tlvs.to_vec()].concat();
    assert!(garbage(&v2(0x21, 0x11, &with(&[0x02, 0])), Some("PROXY2: TLV Dribble bytes")));
    assert!(garbage(&v2(0x21, 0x11, &with(&[0x02, 0, 9, b'x'])), Some("PROXY2: TLV Length Error")));
    assert!(garbage(&v2(0x21, 0x11, &with(&[TLV_SSL, 0, 2, 1, 2])), Some("PROXY2: TLV Length Error")));
    assert!(garbage(&v2(0x21, 0x11, &with(&[TLV_SSL, 0, 7, 1, 0, 0, 0, 0, 0x21, 0])), Some("PROXY2: TLV Dribble bytes")));
    assert!(garbage(&v2(0x21, 0x11, &with(&[TLV_SSL, 0, 8, 1, 0, 0, 0, 0, 0x21, 0, 5])), Some("PROXY2: TLV Length Error")));
    // A short checksum TLV is compared by Varnish with bytes not its own: refused.
    assert!(garbage(&v2(0x21, 0x11, &with(&[TLV_CRC32C, 0, 2, 0, 0])), Some("PROXY2: CRC error")));
    assert!(garbage(&v2(0x21, 0x11, &with(&[TLV_CRC32C, 0, 0, 0xe0, 0, 0])), Some("PROXY2: CRC error")));
    // The first fault met ends the walk: a checksum after a bad TLV is not read.
    assert!(garbage(&v2(0x21, 0x11, &with(&[TLV_SSL, 0, 0, TLV_CRC32C, 0, 0])), Some("PROXY2: TLV Length Error")));
}

/// TLVs fit in what Varnish's session workspace has left after the
/// client's address and port as text (the limits measured on varnishd
/// 7.1): past it, an Error record after the Proxy record.
#[test]
fn tlvs_past_the_session_workspace_close_as_varnish_does() {
    let fill = |n: usize| [vec![0xe0], (n as u16 - 3).to_be_bytes().to_vec(), vec![b'a'; n - 3]].concat();
    let why = |buf: &[u8]| match complete(buf).1 {
        Ok(_) => None,
        Err(Garbage { proxy, why }) => {
            assert!(proxy.is_some(), "the Proxy record comes first");
            why
        }
    };
    let v4 = |tlvs: &[u8]| v2(0x21, 0x11, &[v4_block(), tlvs.to_vec()].concat());
    assert_eq!(why(&v4(&fill(376))), None);
    assert_eq!(why(&v4(&fill(377))), Some((Tag::Error, "insufficient workspace (proto_priv)".into())));
    assert_eq!(why(&v4(&fill(385))), Some((Tag::Error, "insufficient workspace".into())));
    assert_eq!(why(&v4(&[0xe0, 0, 0].repeat(125))), None);
    assert_eq!(why(&v4(&[0xe0, 0, 0].repeat(330))), Some((Tag::Error, "insufficient workspace".into())));
    // A shorter address leaves more room, a longer one less.
    let v6 = |src: Ipv6Addr, port: u16, tlvs: &[u8]| {
        let mut b = src.octets().to_vec();
        b.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        b.extend_from_slice(&port.to_be_bytes());
        b.extend_from_slice(&80u16.to_be_bytes());
        b.extend_from_slice(tlvs);
        v2(0x21, 0x21, &b)
    };
    assert_eq!(why(&v6(Ipv6Addr::LOCALHOST, 1, &fill(384))), None);
    assert!(why(&v6(Ipv6Addr::LOCALHOST, 1, &fill(385))).is_some());
    let long: Ipv6Addr = "2001:db8:1234:5678:9abc:def0:1234:5678".parse().unwrap();
    assert_eq!(why(&v6(long, 40000, &fill(352))), None);
    assert!(why(&v6(long, 40000, &fill(353))).is_some());
}

#[test]
fn no_prefix_of_any_byte_string_panics() {
    // Every cut of every hostile row, and random bytes behind each signature.
    let mut state = 1u64;
    for _ in 0..2000 {
        let mut b = if state % 2 == 0 { b"PROXY ".to_vec() } else { V2_SIG.to_vec() };
        let n = (state % 300) as usize;
        for _ in 0..n {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            b.push((state >> 56) as u8);
        }
        for cut in 0..=b.len() {
            let _ = scan(&b[..cut]);
        }
    }
}
