//! The admin (CLI) protocol, byte-compatible with Varnish's: response
//! framing, request tokenizing (quotes, escapes, heredocs), the
//! challenge–response authentication (`-S` secret file) and the fleet's
//! node secrets bound to each node's address (see [`node_secret`]); and
//! how a file an admin command names is read ([`read_file`]).

use std::io::{BufRead, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Status codes (Varnish's `enum VCLI_status_e`).
pub mod status {
    pub const SYNTAX: u16 = 100;
    pub const UNKNOWN: u16 = 101;
    pub const UNIMPL: u16 = 102;
    pub const TOOFEW: u16 = 104;
    pub const TOOMANY: u16 = 105;
    pub const PARAM: u16 = 106;
    pub const AUTH: u16 = 107;
    pub const OK: u16 = 200;
    pub const TRUNCATED: u16 = 201;
    pub const CANT: u16 = 300;
    pub const COMMS: u16 = 400;
    pub const CLOSE: u16 = 500;
}

/// Bodies longer than this are cut and 200 becomes 201 (`cli_limit`).
pub const CLI_LIMIT: usize = 48 * 1024;
/// Length of the authentication challenge.
/// The largest here document a session may send (a VCL program is far
/// smaller); a longer one ends the session.
pub const MAX_HEREDOC: usize = 16 << 20;
pub const CHALLENGE_LEN: usize = 32;

/// Frame a response: `"%-3u %-8zu\n"`, the body, and one more `\n`.
pub fn frame(code: u16, body: &str) -> Vec<u8> {
    frame_limited(code, body, CLI_LIMIT)
}

/// The same, a body longer than `limit` (the `cli_limit` parameter) cut
/// to `limit - 1` bytes and a 200 made 201, as Varnish cuts it.
pub fn frame_limited(mut code: u16, body: &str, limit: usize) -> Vec<u8> {
    let mut body = body.as_bytes();
    if body.len() > limit {
        body = &body[..limit.saturating_sub(1)];
        if code == status::OK {
            code = status::TRUNCATED;
        }
    }
    let mut out = format!("{:<3} {:<8}\n", code, body.len()).into_bytes();
    out.extend_from_slice(body);
    out.push(b'\n');
    out
}

/// Why a response could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("malformed response header {0:?}")]
    BadHeader(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Read one framed response: (status, body).
pub fn read_response(r: &mut impl Read) -> Result<(u16, String), ReadError> {
    let mut head = [0u8; 13];
    let mut got = 0;
    while got < 13 {
        match r.read(&mut head[got..])? {
            0 if got == 0 => return Err(ReadError::Closed),
            0 => return Err(ReadError::BadHeader(String::from_utf8_lossy(&head[..got]).into())),
            n => got += n,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    if head[3] != b' ' || head[12] != b'\n' {
        return Err(ReadError::BadHeader(text));
    }
    // Fields from the raw bytes: a lossy UTF-8 copy shifts byte offsets
    // (and slicing it could cut a character) when a peer sends non-ASCII.
    let field = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.trim().parse::<usize>().ok());
    let code = field(&head[..3]).and_then(|c| u16::try_from(c).ok()).ok_or_else(|| ReadError::BadHeader(text.clone()))?;
    let len = field(&head[4..12]).ok_or_else(|| ReadError::BadHeader(text.clone()))?;
    if len > 64 * 1024 * 1024 {
        return Err(ReadError::BadHeader(text));
    }
    let mut body = vec![0u8; len + 1];
    r.read_exact(&mut body)?;
    if body.pop() != Some(b'\n') {
        return Err(ReadError::BadHeader(text));
    }
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

/// Split a command line into arguments: whitespace separates, `"…"`
/// groups, and inside quotes `\n \r \t \" \\ \nnn \xnn` are escapes.
pub fn tokenize(line: &str) -> Result<Vec<String>, &'static str> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if b[i] != b'"' {
            // Unquoted: escapes are decoded here too, and a bare quote is
            // an error (Varnish's VAV_Parse).
            let mut arg = Vec::new();
            while i < b.len() && !b[i].is_ascii_whitespace() {
                match b[i] {
                    b'"' => return Err("Invalid '\"'"),
                    b'\\' => {
                        let (c, used) = unescape(&b[i + 1..]).ok_or("Invalid backslash sequence")?;
                        arg.push(c);
                        i += 1 + used;
                    }
                    c => {
                        arg.push(c);
                        i += 1;
                    }
                }
            }
            out.push(String::from_utf8_lossy(&arg).into_owned());
            continue;
        }
        i += 1;
        let mut arg = Vec::new();
        loop {
            match b.get(i) {
                None => return Err("Missing '\"'"),
                Some(b'"') => {
                    i += 1;
                    break;
                }
                Some(b'\\') => {
                    let (c, used) = unescape(&b[i + 1..]).ok_or("Invalid backslash sequence")?;
                    arg.push(c);
                    i += 1 + used;
                }
                Some(&c) => {
                    arg.push(c);
                    i += 1;
                }
            }
        }
        if i < b.len() && !b[i].is_ascii_whitespace() {
            return Err("Missing separator between arguments");
        }
        out.push(String::from_utf8_lossy(&arg).into_owned());
    }
    Ok(out)
}

fn unescape(b: &[u8]) -> Option<(u8, usize)> {
    match *b.first()? {
        b'n' => Some((b'\n', 1)),
        b'r' => Some((b'\r', 1)),
        b't' => Some((b'\t', 1)),
        b'"' => Some((b'"', 1)),
        b'\\' => Some((b'\\', 1)),
        b'x' => {
            let h = std::str::from_utf8(b.get(1..3)?).ok()?;
            Some((u8::from_str_radix(h, 16).ok()?, 3))
        }
        b'0'..=b'7' => {
            let o = std::str::from_utf8(b.get(0..3)?).ok()?;
            Some((u8::from_str_radix(o, 8).ok()?, 3))
        }
        _ => None,
    }
}

/// Quote an argument for sending (the inverse of [`tokenize`]).
pub fn quote(arg: &str) -> String {
    if !arg.is_empty() && !arg.bytes().any(|c| c.is_ascii_whitespace() || c == b'"' || c == b'\\') {
        return arg.to_string();
    }
    let mut s = String::from("\"");
    for c in arg.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Read one command from a client: a line (without its terminator), and
/// for a line ending in `<< WORD` the following lines up to one equal to
/// WORD, which replace the two tokens as one last argument. Returns None
/// at EOF. `max_line` caps a line (80 before authentication).
pub fn read_command(r: &mut impl BufRead, max_line: usize, heredoc: bool) -> std::io::Result<Option<Result<Vec<String>, &'static str>>> {
    let line = match read_line(r, max_line)? {
        None => return Ok(None),
        Some(Err(e)) => return Ok(Some(Err(e))),
        Some(Ok(l)) => l,
    };
    let mut args = match tokenize(&line) {
        Ok(a) => a,
        Err(e) => return Ok(Some(Err(e))),
    };
    if heredoc && args.len() >= 2 && args[args.len() - 2] == "<<" {
        let word = args.pop().unwrap_or_default();
        args.pop();
        let mut doc = String::new();
        loop {
            if doc.len() > MAX_HEREDOC {
                // The rest cannot be told from commands: end the session.
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "Here document too long"));
            }
            match read_line_within(r, MAX_HEREDOC - doc.len())? {
                None => return Ok(Some(Err("Unterminated here document"))),
                Some(Err(_)) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "Here document too long")),
                Some(Ok(l)) if l == word => break,
                Some(Ok(l)) => {
                    doc.push_str(&l);
                    doc.push('\n');
                }
            }
        }
        args.push(doc);
    }
    Ok(Some(Ok(args)))
}

/// Read a line of at most `max` bytes; past that, an error at once (the
/// rest of a here document cannot be told from commands, so it is not
/// read on).
fn read_line_within(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<Result<String, &'static str>>> {
    let mut buf = Vec::new();
    match crate::bounded::read_line(r, max.saturating_add(1), &mut buf) {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Ok(Some(Err("Line too long"))),
        Err(e) => return Err(e),
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    Ok(Some(Ok(String::from_utf8_lossy(&buf).into_owned())))
}

fn read_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<Result<String, &'static str>>> {
    let mut buf = Vec::new();
    let mut too_long = false;
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(if buf.is_empty() && !too_long { None } else { Some(Ok(String::from_utf8_lossy(&buf).into_owned())) });
        }
        match avail.iter().position(|&c| c == b'\n' || c == b'\r') {
            Some(i) => {
                if !too_long {
                    buf.extend_from_slice(&avail[..i]);
                }
                r.consume(i + 1);
                break;
            }
            None => {
                let n = avail.len();
                if !too_long {
                    buf.extend_from_slice(avail);
                }
                r.consume(n);
            }
        }
        if buf.len() > max {
            too_long = true;
            buf.clear();
        }
    }
    if too_long || buf.len() > max {
        return Ok(Some(Err("Line too long")));
    }
    Ok(Some(Ok(String::from_utf8_lossy(&buf).into_owned())))
}

/// A fresh challenge: 32 random lowercase letters.
pub fn challenge() -> String {
    let mut bytes = [0u8; CHALLENGE_LEN];
    random(&mut bytes);
    bytes.iter().map(|b| (b'a' + b % 26) as char).collect()
}

/// Fill `buf` from the kernel's random source.
pub fn random(buf: &mut [u8]) {
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(buf).is_ok() {
            return;
        }
    }
    // Never without some entropy: the clock and the pid.
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0) ^ std::process::id() as u128;
    let h = Sha256::digest(seed.to_le_bytes());
    for (i, b) in buf.iter_mut().enumerate() {
        *b = h[i % h.len()];
    }
}

/// The expected `auth` answer: lowercase hex of
/// SHA256(challenge ‖ "\n" ‖ secret ‖ challenge ‖ "\n").
pub fn auth_response(challenge: &str, secret: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b"\n");
    h.update(secret);
    h.update(challenge.as_bytes());
    h.update(b"\n");
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The body of the 107 response that asks for authentication.
pub fn auth_request_body(challenge: &str) -> String {
    format!("{challenge}\n\nAuthentication required.\n")
}

// Fleet authentication. With one secret shared by every node, an answer
// to a node's challenge is good on any node: a listener that `cache-adm
// --peers` reaches in place of a node (a rogue pod in DNS, a stale or
// spoofed answer) can pass a real node's challenge to cache-adm, forward
// cache-adm's answer and then run its own commands there. So a fleet
// node does not take the fleet's secret itself: each node's secret is
// derived from it and from the address the connection came in at
// ([`node_secret`]), and cache-adm derives it from the address it
// connected to. A listener at another address gets an answer made with
// that address's secret, which the real node refuses. The address, not
// a DNS name: a name is what a spoofed or stale DNS answer lies about,
// while the address is what the TCP connection reached, and a relay
// cannot make the real node see its connection arrive at the relay's
// address. After `auth` the node proves it holds its secret too
// ([`node_proof`], the `node.proof` command), so a listener that says
// 200 to everything is not counted as a node that ran the command. What
// this does not stop: someone who takes over the node's own address (the
// connection's path itself); TLS would be needed for that.

fn hmac(key: &[u8], parts: &[&[u8]]) -> String {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A node's name in the fleet: its admin address as `ip:port`, an
/// IPv4-mapped IPv6 address written as IPv4, an IPv6 scope dropped.
pub fn node_id(addr: SocketAddr) -> String {
    SocketAddr::new(addr.ip().to_canonical(), addr.port()).to_string()
}

/// The secret of the node at `addr` in the fleet whose secret is
/// `fleet`: the lowercase hex of HMAC-SHA256(fleet, "cachekit admin node
/// " ‖ [`node_id`]) and a newline. A file holding exactly these bytes is
/// that node's secret for varnishadm's `-S` (`cache-adm --node-secret`
/// writes it).
pub fn node_secret(fleet: &[u8], addr: SocketAddr) -> Vec<u8> {
    let mut s = hmac(fleet, &[b"cachekit admin node ", node_id(addr).as_bytes()]).into_bytes();
    s.push(b'\n');
    s
}

/// A node's answer to `node.proof NONCE` on a session that authenticated
/// with `secret` (a node secret) after `challenge`: the lowercase hex of
/// HMAC-SHA256(secret, "cachekit node proof\n" ‖ challenge ‖ "\n" ‖ nonce).
pub fn node_proof(secret: &[u8], challenge: &str, nonce: &str) -> String {
    hmac(secret, &[b"cachekit node proof\n", challenge.as_bytes(), b"\n", nonce.as_bytes()])
}

/// The most a VCL program may take, all its includes counted (`-f`,
/// `vcl.load`, `vcl.inline`).
pub const MAX_VCL: u64 = 16 << 20;
/// The most a certificate bundle may take (`tls.cert.load`, `-A`'s
/// pem-files).
pub const MAX_PEM: u64 = 1 << 20;
/// The most a secret file may take (`-S`, `--fleet-secret`).
pub const MAX_SECRET: u64 = 64 << 10;

/// Why a file was not read (in detail: for whoever started the program,
/// and for logs; an admin session is told [`unreadable`]).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("{}: not a regular file (a {kind})", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{}: larger than {}", .path.display(), size_text(*.limit))]
    TooBig { path: PathBuf, limit: u64 },
}

/// What an admin session is told when a file it named could not be read:
/// the same words whether the path is missing, unreadable, not a regular
/// file or too big, so the answer does not tell which.
pub fn unreadable(path: &str, what: &str, max: u64) -> String {
    format!("Cannot read '{path}': {what} must be a regular file that cache-d can read, at most {}", size_text(max))
}

/// `n` bytes as the documentation writes it (16 MiB, 64 KiB).
pub fn size_text(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match t {
        t if t.is_dir() => "directory",
        t if t.is_fifo() => "FIFO",
        t if t.is_char_device() => "character device",
        t if t.is_block_device() => "block device",
        t if t.is_socket() => "socket",
        _ => "special file",
    }
}

/// Read a file someone names (on the admin socket or at start): only a
/// regular file, of at most `limit` bytes. The path is first opened with
/// O_PATH, which opens nothing for real (a FIFO does not wait for a
/// writer, a device's driver is not called: opening some, such as a
/// watchdog, has effects), and checked with fstat; then the file that
/// was checked is opened through /proc/self/fd (not the path again,
/// which could have been switched in between), with O_NONBLOCK and
/// O_NOCTTY besides, and read up to `limit` and one byte more (a file
/// may grow after the check).
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let open_err = |source| FileError::Open { path: path.to_path_buf(), source };
    let handle = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(path).map_err(open_err)?;
    let meta = handle.metadata().map_err(open_err)?;
    if !meta.is_file() {
        return Err(FileError::NotRegular { path: path.to_path_buf(), kind: file_kind(meta.file_type()) });
    }
    let too_big = || FileError::TooBig { path: path.to_path_buf(), limit };
    if meta.len() > limit {
        return Err(too_big());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
        .map_err(open_err)?;
    let mut buf = Vec::with_capacity(meta.len() as usize);
    f.take(limit + 1).read_to_end(&mut buf).map_err(open_err)?;
    if buf.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_matches_varnish() {
        assert_eq!(frame(200, "PONG 1795988405 1.0"), b"200 19      \nPONG 1795988405 1.0\n");
        assert_eq!(frame(200, ""), b"200 0       \n\n");
        let big = "x".repeat(CLI_LIMIT + 10);
        let f = frame(200, &big);
        assert!(f.starts_with(b"201 49151   \n"));
        let (code, body) = read_response(&mut &f[..]).unwrap();
        assert_eq!((code, body.len()), (201, CLI_LIMIT - 1));
        assert!(read_response(&mut &b"200 5\n"[..]).is_err());
        assert!(read_response(&mut &b"20x 0       \n\n"[..]).is_err());
        assert!(matches!(read_response(&mut &b""[..]), Err(ReadError::Closed)));
    }

    #[test]
    fn response_heads_with_non_ascii_bytes_are_errors() {
        // Found by fuzz/fuzz_targets/adm_lines.rs: a lossy UTF-8 copy of
        // this head made the length field slice cut a character (a panic).
        let crash = b"2\xa30 8       \nPON#G \0\0\0\0\0\0\0\0PON 1\n";
        assert!(matches!(read_response(&mut &crash[..]), Err(ReadError::BadHeader(_))));
        assert!(matches!(read_response(&mut &b"200 \xff       \n"[..]), Err(ReadError::BadHeader(_))));
    }

    #[test]
    fn tokenizer() {
        assert_eq!(tokenize("  ban req.url ~ \"a b\" ").unwrap(), vec!["ban", "req.url", "~", "a b"]);
        assert_eq!(tokenize(r#"x "\n\t\"\\\101\x42""#).unwrap(), vec!["x", "\n\t\"\\AB"]);
        assert_eq!(tokenize(r#""a""b""#), Err("Missing separator between arguments"));
        assert_eq!(tokenize(r#""\q""#), Err("Invalid backslash sequence"));
        // Unquoted words decode escapes too; a bare quote in one is refused.
        assert_eq!(tokenize(r#"ban obj.http.Host ~ \"Foo\""#).unwrap(), vec!["ban", "obj.http.Host", "~", "\"Foo\""]);
        assert_eq!(tokenize(r#"a\.b"#), Err("Invalid backslash sequence"));
        assert_eq!(tokenize(r#"a"b"#), Err("Invalid '\"'"));
        assert_eq!(tokenize("\"open"), Err("Missing '\"'"));
        assert!(tokenize("").unwrap().is_empty());
        for a in ["plain", "two words", "q\"uote", "back\\slash", "", "tab\there"] {
            assert_eq!(tokenize(&quote(a)).unwrap(), vec![a.to_string()]);
        }
    }

    #[test]
    fn heredocs_and_long_lines() {
        let mut r = &b"vcl.inline boot << EOF\nvcl 4.1;\nbackend x { }\nEOF\nping\n"[..];
        let cmd = read_command(&mut r, 4096, true).unwrap().unwrap().unwrap();
        assert_eq!(cmd, vec!["vcl.inline", "boot", "vcl 4.1;\nbackend x { }\n"]);
        assert_eq!(read_command(&mut r, 4096, true).unwrap().unwrap().unwrap(), vec!["ping"]);
        assert!(read_command(&mut r, 4096, true).unwrap().is_none());
        let long = format!("{}\nping\n", "a".repeat(100));
        let mut r = long.as_bytes();
        assert_eq!(read_command(&mut r, 80, false).unwrap().unwrap(), Err("Line too long"));
        assert_eq!(read_command(&mut r, 80, false).unwrap().unwrap().unwrap(), vec!["ping"]);
        let huge = format!("vcl.inline x << EOF\n{}\nEOF\n", "a".repeat(MAX_HEREDOC + 10));
        let mut r = std::io::BufReader::new(huge.as_bytes());
        assert!(read_command(&mut r, 4096, true).is_err());
    }

    #[test]
    fn node_secrets_are_bound_to_the_address() {
        let a: SocketAddr = "10.0.0.5:6082".parse().unwrap();
        let s = node_secret(b"fleet\n", a);
        // HMAC-SHA256(b"fleet\n", "cachekit admin node 10.0.0.5:6082"),
        // computed with openssl dgst -sha256 -mac HMAC.
        assert_eq!(s, b"1f75cb04a64bc35418e52fc39b00f2d33bc6d2b0efbd79e575db75aef7304e28\n");
        assert_ne!(s, node_secret(b"fleet\n", "10.0.0.5:6083".parse().unwrap()));
        assert_ne!(s, node_secret(b"fleet\n", "10.0.0.6:6082".parse().unwrap()));
        assert_ne!(s, node_secret(b"other\n", a));
        assert_eq!(s, node_secret(b"fleet\n", "[::ffff:10.0.0.5]:6082".parse().unwrap()));
        assert_eq!(node_id("[fe80::1%2]:6082".parse().unwrap()), "[fe80::1]:6082");
        let p = node_proof(&s, "abc", "nonce");
        assert_eq!(p.len(), 64);
        assert_ne!(p, node_proof(&s, "abc", "other"));
        assert_ne!(p, node_proof(&node_secret(b"fleet\n", "10.0.0.6:6082".parse().unwrap()), "abc", "nonce"));
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("adm-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        std::fs::write(&f, "twelve bytes").unwrap();
        assert_eq!(read_file(&f, 12).unwrap(), b"twelve bytes");
        assert!(matches!(read_file(&f, 11), Err(FileError::TooBig { limit: 11, .. })));
        assert!(matches!(read_file(&dir, 100), Err(FileError::NotRegular { kind: "directory", .. })));
        assert!(matches!(read_file(Path::new("/dev/zero"), 100), Err(FileError::NotRegular { kind: "character device", .. })));
        assert!(matches!(read_file(&dir.join("missing"), 100), Err(FileError::Open { .. })));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(size_text(MAX_VCL), "16 MiB");
        assert_eq!(size_text(MAX_SECRET), "64 KiB");
        assert_eq!(unreadable("/x", "a VCL file", MAX_VCL), unreadable("/x", "a VCL file", MAX_VCL));
    }

    #[test]
    fn auth_matches_the_reference_formula() {
        // SHA256("abc\n" + "secret\n" + "abc\n"), computed independently.
        let want = {
            let mut h = Sha256::new();
            h.update(b"abc\nsecret\nabc\n");
            h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        assert_eq!(auth_response("abc", b"secret\n"), want);
        let c = challenge();
        assert_eq!(c.len(), 32);
        assert!(c.bytes().all(|b| b.is_ascii_lowercase()));
        assert_eq!(auth_request_body(&c).len(), 59);
    }
}
