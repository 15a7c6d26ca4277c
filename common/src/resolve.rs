//! Name resolution for cache-d's dynamic backends and cache-adm's
//! `--peers dns:`: the system's resolver (getaddrinfo: /etc/hosts, then
//! DNS with resolv.conf's search list and ndots, so a Kubernetes
//! Service's short name works), or a DNS stub resolver of our own
//! (`dynamic.resolver()`, `cache-adm --nameserver`), which also gives the
//! answer's TTL and can be pointed at chosen name servers. Built with the
//! `dns` feature.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use hickory_resolver::config::{ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

/// A stub resolver's configuration (what `dynamic.resolver()` and its
/// methods in vcl_init configured, or cache-adm's `--nameserver`).
#[derive(Clone, Debug, Default)]
pub struct ResolverSpec {
    /// Start from /etc/resolv.conf (`set_from_os`, the default); name
    /// servers added replace its.
    pub from_os: bool,
    /// `add_nameserver("IP[:PORT]")` (cachekit's own method).
    pub nameservers: Vec<SocketAddr>,
    /// `set_timeout(DURATION)`: per query.
    pub timeout: Option<Duration>,
}

/// One lookup's answer: the addresses, and how long DNS says they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub addrs: Vec<IpAddr>,
    pub ttl: Option<Duration>,
}

/// A failed lookup: which resolver, and why (logged as libvmod-dynamic
/// logs it: `getaddrinfo <code> (<reason>)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupError {
    pub resolver: &'static str,
    pub reason: String,
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.resolver, self.reason)
    }
}

pub enum Resolver {
    System,
    Dns(Box<DnsResolver>),
}

/// A stub resolver. Its queries run on one small runtime shared by every
/// resolver of the process and never dropped (a runtime must not be
/// dropped where a program may be: in a request's task); the dynamic
/// directors' lookup threads block on them.
pub struct DnsResolver {
    resolver: TokioResolver,
}

fn dns_runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RT: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name("cache-dns").enable_all().build().ok())
        .as_ref()
        .ok_or_else(|| "no runtime for DNS queries".to_string())
}

impl Resolver {
    /// The resolver `spec` describes (an error says why it cannot be made,
    /// e.g. no readable /etc/resolv.conf and no name server given; the
    /// caller says whose resolver it is).
    pub fn dns(spec: &ResolverSpec) -> Result<Resolver, String> {
        let rt = dns_runtime()?;
        let provider = TokioRuntimeProvider::default();
        let mut builder = if spec.nameservers.is_empty() {
            if !spec.from_os {
                return Err("a resolver that does not read the system's configuration needs a name server".into());
            }
            TokioResolver::builder(provider).map_err(|e| format!("reading the system's configuration: {e}"))?
        } else {
            let servers = spec
                .nameservers
                .iter()
                .map(|a| {
                    let conn = |mut c: ConnectionConfig| {
                        c.port = a.port();
                        c
                    };
                    NameServerConfig::new(a.ip(), true, vec![conn(ConnectionConfig::udp()), conn(ConnectionConfig::tcp())])
                })
                .collect();
            TokioResolver::builder_with_config(ResolverConfig::from_name_servers(servers), provider)
        };
        let opts = builder.options_mut();
        // Every lookup asks the name servers: the director's ttl decides
        // how often, not a cache in between.
        opts.cache_size = 0;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        if let Some(t) = spec.timeout {
            opts.timeout = t;
        }
        let resolver = {
            let _guard = rt.enter();
            builder.build().map_err(|e| e.to_string())?
        };
        Ok(Resolver::Dns(Box::new(DnsResolver { resolver })))
    }

    /// The name this resolver logs its errors under.
    pub fn label(&self) -> &'static str {
        match self {
            Resolver::System => "getaddrinfo",
            Resolver::Dns(_) => "dns",
        }
    }

    /// The addresses of `host` (an address itself is its own answer).
    pub fn lookup(&self, host: &str, port: u16) -> Result<Answer, LookupError> {
        let fail = |reason: String| LookupError { resolver: self.label(), reason };
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(Answer { addrs: vec![ip], ttl: None });
        }
        let mut addrs: Vec<IpAddr> = Vec::new();
        let ttl = match self {
            Resolver::System => {
                for a in (host, port).to_socket_addrs().map_err(|e| fail(e.to_string()))? {
                    addrs.push(a.ip());
                }
                None
            }
            Resolver::Dns(d) => {
                let rt = dns_runtime().map_err(fail)?;
                let found = rt.block_on(d.resolver.lookup_ip(host)).map_err(|e| fail(e.to_string()))?;
                addrs.extend(found.iter());
                Some(found.valid_until().saturating_duration_since(Instant::now()))
            }
        };
        let mut seen = std::collections::HashSet::new();
        addrs.retain(|a| seen.insert(*a));
        if addrs.is_empty() {
            return Err(fail("no address".into()));
        }
        Ok(Answer { addrs, ttl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_localhost_resolve_without_dns() {
        let r = Resolver::System;
        assert_eq!(r.lookup("127.0.0.7", 80).unwrap().addrs, vec!["127.0.0.7".parse::<IpAddr>().unwrap()]);
        assert_eq!(r.lookup("[::1]", 80).unwrap().addrs, vec!["::1".parse::<IpAddr>().unwrap()]);
        assert!(r.lookup("localhost", 80).unwrap().addrs.iter().all(|a| a.is_loopback()));
        let none = ResolverSpec { from_os: false, ..Default::default() };
        assert!(Resolver::dns(&none).err().unwrap().contains("needs a name server"));
    }
}
