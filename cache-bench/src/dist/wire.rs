//! The agent protocol's bytes: nonces, the coordinator's fixed-size proof
//! (made and checked without any JSON), the signed JSON lines both ends
//! send after it, and reads that never take more than the line's limit.

use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::plan::Plan;

/// Hex digits of a nonce (16 random bytes).
pub const NONCE_HEX: usize = 32;
/// What the coordinator's proof signs (under its direction and both
/// nonces; no message is this text, every message being a JSON object).
const AUTH: &str = "auth";
/// The coordinator's proof, the first thing an agent reads: `auth `, its
/// nonce, a space, the HMAC in hex, `\n`.
pub const AUTH_LINE: usize = AUTH.len() + 1 + NONCE_HEX + 1 + 64 + 1;

type HmacSha256 = hmac::Hmac<Sha256>;

/// HMAC-SHA256 of `msg` under `key` (the hmac crate; any key length).
fn mac_of(key: &[u8], msg: &[u8]) -> HmacSha256 {
    let mut m = <HmacSha256 as hmac::Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    hmac::Mac::update(&mut m, msg);
    m
}

/// A fresh nonce: [`NONCE_HEX`] hex digits.
pub fn nonce() -> String {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    hex::encode(
        &Sha256::new().chain_update(b).chain_update(t.to_le_bytes()).chain_update(std::process::id().to_le_bytes()).finalize()[..16],
    )
}

/// Is `n` a nonce as this protocol sends them?
pub fn is_nonce(n: &str) -> bool {
    n.len() == NONCE_HEX && n.bytes().all(|b| b.is_ascii_hexdigit())
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A byte count for messages: "64 MiB", "4 KiB", "103 bytes".
pub fn size(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// An unsigned line (the hello, an error report).
pub fn send(w: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    w.write_all(&line)
}

/// Read one JSON line of at most `max` bytes (its `\n` included); a longer
/// one is refused after `max` bytes, naming the limit.
pub fn recv<R: BufRead>(r: &mut R, max: usize) -> Result<Value> {
    let mut line = Vec::new();
    match common::bounded::read_line(r, max, &mut line) {
        Ok(0) => bail!("connection closed"),
        Ok(_) => Ok(serde_json::from_slice(&line)?),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            bail!("a message longer than {} (the protocol's limit for it): refused", size(max))
        }
        Err(e) => Err(e.into()),
    }
}

/// One end of an authenticated session: the secret, both nonces (the
/// agent's, then the coordinator's) and which way this end sends ("c"
/// coordinator, "a" agent).
#[derive(Clone)]
pub struct Keys {
    pub secret: Arc<Vec<u8>>,
    pub nonces: String,
    pub me: &'static str,
}

impl Keys {
    pub fn mac(&self, dir: &str, msg: &str) -> String {
        hex::encode(hmac::Mac::finalize(mac_of(&self.secret, format!("{dir}{}{msg}", self.nonces).as_bytes())).into_bytes())
    }

    /// Does `mac` (hex) sign `msg` from the `dir` end? Compared in
    /// constant time.
    fn verify(&self, dir: &str, msg: &str, mac: &str) -> bool {
        let Ok(given) = hex::decode(mac) else { return false };
        hmac::Mac::verify_slice(mac_of(&self.secret, format!("{dir}{}{msg}", self.nonces).as_bytes()), &given).is_ok()
    }

    /// The coordinator's proof for this session: [`AUTH_LINE`] bytes.
    pub fn auth_line(&self) -> String {
        format!("{AUTH} {} {}\n", &self.nonces[NONCE_HEX..], self.mac("c", AUTH))
    }

    /// The agent's side: the session a coordinator's proof `line` opens
    /// for the agent's nonce `na`, or None. Plain bytes, no JSON.
    pub fn check_auth(secret: &Arc<Vec<u8>>, na: &str, line: &[u8]) -> Option<Keys> {
        let rest = line.strip_suffix(b"\n")?.strip_prefix(AUTH.as_bytes())?.strip_prefix(b" ")?;
        let (nc, mac) = (std::str::from_utf8(rest.get(..NONCE_HEX)?).ok()?, rest.get(NONCE_HEX..)?.strip_prefix(b" ")?);
        if !is_nonce(nc) || mac.len() != 64 {
            return None;
        }
        let keys = Keys { secret: secret.clone(), nonces: format!("{na}{nc}"), me: "a" };
        keys.verify("c", AUTH, std::str::from_utf8(mac).ok()?).then_some(keys)
    }

    /// A signed line: the message travels as JSON text inside a string, so
    /// the MAC covers exactly the bytes sent (a number re-serialised after
    /// parsing need not come out the same).
    pub fn line(&self, msg: &Value) -> serde_json::Result<Vec<u8>> {
        let text = serde_json::to_string(msg)?;
        let mac = self.mac(self.me, &text);
        let mut line = serde_json::to_vec(&json!({ "msg": text, "mac": mac }))?;
        line.push(b'\n');
        Ok(line)
    }

    pub fn send(&self, w: &mut TcpStream, msg: Value) -> std::io::Result<()> {
        w.write_all(&self.line(&msg)?)
    }

    /// The message of a signed line from the other end; an unsigned or
    /// badly signed one is an error (an error report from the other end
    /// is passed on as one).
    pub fn open(&self, v: Value) -> Result<Value> {
        if let Some(e) = v.get("error") {
            bail!("{}", e.as_str().unwrap_or("refused"));
        }
        let (Some(msg), Some(mac)) = (v.get("msg").and_then(Value::as_str), v.get("mac").and_then(Value::as_str)) else {
            bail!("an unsigned message");
        };
        let other = if self.me == "c" { "a" } else { "c" };
        if !self.verify(other, msg, mac) {
            bail!("a message with a bad signature (not the same secret, or altered on the way)");
        }
        Ok(serde_json::from_str(msg)?)
    }
}

/// For the fuzz target (fuzz/fuzz_targets/agent_msg.rs): what an agent
/// does with bytes from the network — the proof line checked, bounded
/// lines read, signed messages opened, plans parsed and their numbers
/// checked, start times taken — on arbitrary input.
#[doc(hidden)]
pub fn fuzz_messages(data: &[u8]) {
    let secret = Arc::new(b"fuzz-secret".to_vec());
    let mut r = data;
    let mut first = Vec::new();
    let _ = common::bounded::read_line(&mut r, AUTH_LINE, &mut first);
    let keys =
        Keys::check_auth(&secret, &"0".repeat(NONCE_HEX), &first).unwrap_or(Keys { secret, nonces: "0".repeat(2 * NONCE_HEX), me: "a" });
    for _ in 0..16 {
        let Ok(v) = recv(&mut r, 4096) else { break };
        let opened = keys.open(v.clone()).ok();
        for m in [Some(&v), opened.as_ref(), v.get("msg")].into_iter().flatten() {
            if let Some(Ok(plan)) = m.get("plan").map(|p| serde_json::from_value::<Plan>(p.clone())) {
                if plan.check_bounds().is_ok() {
                    let _ = plan.share(1, 3).length_s();
                }
            }
            let _ = m.get("start_unix_ms").and_then(Value::as_u64).map(|t| t.abs_diff(unix_ms()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231() {
        // RFC 4231 test case 2.
        let mac = hmac::Mac::finalize(mac_of(b"Jefe", b"what do ya want for nothing?")).into_bytes();
        assert_eq!(hex::encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    fn keys(me: &'static str) -> Keys {
        Keys { secret: Arc::new(b"secret!!".to_vec()), nonces: "n1".into(), me }
    }

    /// A signed line as `k` sends it.
    fn line(k: &Keys, msg: Value) -> Value {
        serde_json::from_slice(&k.line(&msg).unwrap()).unwrap()
    }

    #[test]
    fn only_signed_messages_from_the_other_end_open() {
        let (c, a) = (keys("c"), keys("a"));
        let stop = line(&c, json!({ "stop": true, "x": 0.1 + 0.2 }));
        assert_eq!(a.open(stop.clone()).unwrap()["stop"], true);
        // Unsigned, altered, reflected back, another session, another secret.
        assert!(a.open(json!({ "stop": true })).is_err());
        let mut altered = stop.clone();
        altered["msg"] = json!("{\"stop\":false}");
        assert!(a.open(altered).is_err());
        assert!(c.open(stop.clone()).is_err(), "a coordinator's message reflected to it");
        let other = Keys { nonces: "n2".into(), ..keys("a") };
        assert!(other.open(stop.clone()).is_err(), "replayed into another session");
        let wrong = Keys { secret: Arc::new(b"another secret".to_vec()), ..keys("a") };
        assert!(wrong.open(stop).is_err());
        assert!(a.open(json!({ "error": "busy" })).unwrap_err().to_string().contains("busy"));
    }

    #[test]
    fn the_proof_is_one_short_line_bound_to_both_nonces_and_the_secret() {
        let secret = Arc::new(b"secret!!".to_vec());
        let (na, nc) = (nonce(), nonce());
        assert!(is_nonce(&na) && is_nonce(&nc) && na != nc);
        let c = Keys { secret: secret.clone(), nonces: format!("{na}{nc}"), me: "c" };
        let proof = c.auth_line();
        assert_eq!(proof.len(), AUTH_LINE);
        assert_eq!(AUTH_LINE, 103, "cache-bench(1) gives the size");
        let a = Keys::check_auth(&secret, &na, proof.as_bytes()).expect("the right proof opens the session");
        assert_eq!((a.nonces.as_str(), a.me), (c.nonces.as_str(), "a"));
        // The session's messages then open at the other end.
        assert_eq!(c.open(line(&a, json!({ "auth": true }))).unwrap()["auth"], true);
        // Another agent nonce (a replay), another secret, a changed byte,
        // no newline, garbage: refused.
        assert!(Keys::check_auth(&secret, &nonce(), proof.as_bytes()).is_none());
        assert!(Keys::check_auth(&Arc::new(b"other secret".to_vec()), &na, proof.as_bytes()).is_none());
        for i in 0..proof.len() - 1 {
            let mut p = proof.clone().into_bytes();
            p[i] = if p[i] == b'0' { b'1' } else { b'0' };
            assert!(Keys::check_auth(&secret, &na, &p).is_none(), "byte {i} changed");
        }
        assert!(Keys::check_auth(&secret, &na, proof.trim_end().as_bytes()).is_none());
        assert!(Keys::check_auth(&secret, &na, b"[0,0,0]\n").is_none());
        assert!(Keys::check_auth(&secret, &na, b"").is_none());
    }

    #[test]
    fn lines_are_bounded() {
        let long = vec![b'x'; 1000];
        assert!(recv(&mut &long[..], 100).unwrap_err().to_string().contains("longer than 100 bytes"));
        assert!(recv(&mut &long[..], 1 << 20).is_err());
        assert_eq!(recv(&mut &b"{\"a\":1}\n"[..], 100).unwrap()["a"], 1);
        assert!(recv(&mut &b""[..], 100).is_err());
        assert_eq!(
            (size(64 << 20), size(1 << 30), size(4096), size(103)),
            ("64 MiB".into(), "1 GiB".into(), "4 KiB".into(), "103 bytes".into())
        );
    }
}
