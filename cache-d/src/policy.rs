//! The request-path hooks (Varnish's vcl_recv, vcl_hash, vcl_hit,
//! vcl_backend_response, vcl_deliver) and the built-in policy that fills
//! them, as `varnishd -x builtin` describes it. The engine only calls the
//! hooks; the policy-language issue plugs compiled user policy in here.

use bytes::Bytes;

/// Headers as a policy sees and edits them: owned, in wire order, with
/// their case preserved.
#[derive(Clone, Debug, Default)]
pub struct Headers(pub Vec<(Bytes, Bytes)>);

impl Headers {
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
    /// Replace every `name` header with one (or add it).
    pub fn set(&mut self, name: &str, value: Bytes) {
        match self.0.iter().position(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())) {
            Some(i) => {
                self.0[i].1 = value;
                let mut j = i + 1;
                while j < self.0.len() {
                    if self.0[j].0.eq_ignore_ascii_case(name.as_bytes()) {
                        self.0.remove(j);
                    } else {
                        j += 1;
                    }
                }
            }
            None => self.0.push((Bytes::copy_from_slice(name.as_bytes()), value)),
        }
    }
    pub fn unset(&mut self, name: &str) {
        self.0.retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()));
    }
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.0.iter().map(|(n, v)| (&n[..], &v[..]))
    }
    /// Does any `name` header match `pred` (case-insensitive contains)?
    pub fn contains_ci(&self, name: &str, needle: &str) -> bool {
        self.0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .any(|(_, v)| v.to_ascii_lowercase().windows(needle.len()).any(|w| w == needle.as_bytes()))
    }
}

/// The client request as the policy sees it.
#[derive(Clone, Debug)]
pub struct Req {
    pub method: Bytes,
    pub url: Bytes,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Headers,
    pub server_ip: String,
    /// The client's address (for ACLs); None where it is not known.
    pub client_ip: Option<std::net::IpAddr>,
}

/// What vcl_recv decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recv {
    Hash,
    Pass,
    Pipe,
    Purge,
    Synth(u16, &'static str),
}

impl Recv {
    /// The VCL_return word.
    pub fn word(&self) -> &'static str {
        match self {
            Recv::Hash => "hash",
            Recv::Pass => "pass",
            Recv::Pipe => "pipe",
            Recv::Purge => "purge",
            Recv::Synth(..) => "synth",
        }
    }
}

/// What vcl_backend_response decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BerespAction {
    /// Store (if cacheable) and deliver.
    Deliver,
    /// Deliver, and remember for `ttl` seconds that this is uncacheable.
    HitForMiss(f64),
    /// Deliver, and pass requests for `ttl` seconds.
    HitForPass(f64),
}

/// The backend response as vcl_backend_response sees it.
pub struct Beresp<'a> {
    pub status: u16,
    pub headers: &'a Headers,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    /// The request was a pass (or hit-for-pass): never store.
    pub bereq_uncacheable: bool,
}

/// The hooks of the request path. Each has Varnish's built-in behaviour
/// unless a policy overrides it.
pub trait Policy: Send + Sync {
    /// The name shown in VCL_use records.
    fn name(&self) -> &str {
        "boot"
    }
    fn recv(&self, req: &mut Req) -> Recv {
        builtin_recv(req)
    }
    /// Append the hash inputs (vcl_hash's hash_data).
    fn hash(&self, req: &Req, key: &mut Vec<u8>) {
        builtin_hash(req, key)
    }
    fn backend_response(&self, beresp: &mut Beresp<'_>) -> BerespAction {
        builtin_backend_response(beresp)
    }
    fn deliver(&self, _req: &Req, _resp: &mut Headers) {}
}

/// The built-in policy and nothing else.
pub struct Builtin;
impl Policy for Builtin {}

const KNOWN_METHODS: [&[u8]; 8] = [b"GET", b"HEAD", b"PUT", b"POST", b"TRACE", b"OPTIONS", b"DELETE", b"PATCH"];

pub fn builtin_recv(req: &mut Req) -> Recv {
    if let Some(h) = req.headers.get("host") {
        if h.iter().any(u8::is_ascii_uppercase) {
            let lower = Bytes::from(h.to_ascii_lowercase());
            req.headers.set("host", lower);
        }
    }
    if &req.method[..] == b"PRI" {
        return Recv::Synth(405, "Method Not Allowed");
    }
    if !req.headers.has("host") && req.minor >= 1 {
        return Recv::Synth(400, "Bad Request");
    }
    if !KNOWN_METHODS.contains(&&req.method[..]) {
        return Recv::Pipe;
    }
    if &req.method[..] != b"GET" && &req.method[..] != b"HEAD" {
        return Recv::Pass;
    }
    if req.headers.has("authorization") || req.headers.has("cookie") {
        return Recv::Pass;
    }
    Recv::Hash
}

pub fn builtin_hash(req: &Req, key: &mut Vec<u8>) {
    key.extend_from_slice(&req.url);
    key.push(0);
    match req.headers.get("host") {
        Some(h) => key.extend_from_slice(h),
        None => key.extend_from_slice(req.server_ip.as_bytes()),
    }
    key.push(0);
}

pub fn builtin_backend_response(b: &mut Beresp<'_>) -> BerespAction {
    if b.bereq_uncacheable {
        return BerespAction::Deliver;
    }
    let h = b.headers;
    let surrogate = h.has("surrogate-control");
    let cc_uncacheable = ["no-cache", "no-store", "private"].iter().any(|d| h.contains_ci("cache-control", d));
    let vary_star = h.get("vary").is_some_and(|v| v.trim_ascii() == b"*");
    if b.ttl <= 0.0
        || h.has("set-cookie")
        || (surrogate && h.contains_ci("surrogate-control", "no-store"))
        || (!surrogate && cc_uncacheable)
        || vary_star
    {
        b.ttl = 120.0;
        return BerespAction::HitForMiss(120.0);
    }
    BerespAction::Deliver
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, hdrs: &[(&str, &str)]) -> Req {
        Req {
            method: Bytes::copy_from_slice(method.as_bytes()),
            url: Bytes::from_static(b"/x"),
            minor: 1,
            headers: Headers(
                hdrs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect(),
            ),
            server_ip: "127.0.0.1".into(),
            client_ip: None,
        }
    }

    #[test]
    fn builtin_recv_decisions() {
        assert_eq!(Builtin.recv(&mut req("GET", &[("Host", "a")])), Recv::Hash);
        assert_eq!(Builtin.recv(&mut req("HEAD", &[("Host", "a")])), Recv::Hash);
        assert_eq!(Builtin.recv(&mut req("POST", &[("Host", "a")])), Recv::Pass);
        assert_eq!(Builtin.recv(&mut req("GET", &[("Host", "a"), ("Cookie", "x=1")])), Recv::Pass);
        assert_eq!(Builtin.recv(&mut req("GET", &[("Host", "a"), ("Authorization", "Basic x")])), Recv::Pass);
        assert_eq!(Builtin.recv(&mut req("BREW", &[("Host", "a")])), Recv::Pipe);
        assert_eq!(Builtin.recv(&mut req("PRI", &[("Host", "a")])), Recv::Synth(405, "Method Not Allowed"));
        assert_eq!(Builtin.recv(&mut req("GET", &[])), Recv::Synth(400, "Bad Request"));
        let mut r = req("GET", &[("Host", "Example.COM")]);
        Builtin.recv(&mut r);
        assert_eq!(r.headers.get("host").unwrap(), &b"example.com"[..]);
    }

    #[test]
    fn builtin_hash_is_url_then_host() {
        let mut k = Vec::new();
        Builtin.hash(&req("GET", &[("Host", "a")]), &mut k);
        assert_eq!(k, b"/x\0a\0");
        let mut k = Vec::new();
        Builtin.hash(&req("GET", &[]), &mut k);
        assert_eq!(k, b"/x\x00127.0.0.1\x00");
    }

    #[test]
    fn builtin_backend_response_decisions() {
        let check = |hdrs: &[(&str, &str)], ttl: f64| {
            let h = req("GET", hdrs).headers;
            let mut b = Beresp { status: 200, headers: &h, ttl, grace: 10.0, keep: 0.0, bereq_uncacheable: false };
            Builtin.backend_response(&mut b)
        };
        assert_eq!(check(&[], 120.0), BerespAction::Deliver);
        assert_eq!(check(&[], 0.0), BerespAction::HitForMiss(120.0));
        assert_eq!(check(&[("Set-Cookie", "a=b")], 60.0), BerespAction::HitForMiss(120.0));
        assert_eq!(check(&[("Cache-Control", "private, max-age=60")], 60.0), BerespAction::HitForMiss(120.0));
        assert_eq!(check(&[("Cache-Control", "No-Store")], 60.0), BerespAction::HitForMiss(120.0));
        // Surrogate-Control takes precedence over Cache-Control.
        assert_eq!(check(&[("Surrogate-Control", "max-age=60"), ("Cache-Control", "no-cache")], 60.0), BerespAction::Deliver);
        assert_eq!(check(&[("Surrogate-Control", "no-store")], 60.0), BerespAction::HitForMiss(120.0));
        assert_eq!(check(&[("Vary", "*")], 60.0), BerespAction::HitForMiss(120.0));
        let h = Headers::default();
        let mut b = Beresp { status: 200, headers: &h, ttl: 0.0, grace: 0.0, keep: 0.0, bereq_uncacheable: true };
        assert_eq!(Builtin.backend_response(&mut b), BerespAction::Deliver);
    }
}
