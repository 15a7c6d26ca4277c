//! A fleet driven as one (issue 20): `cache-adm --peers` runs a command
//! on every node, a line (or a JSON object) per node, exit 1 naming the
//! nodes that failed or could not be reached, and `--retry-for` delivering
//! to a node that comes back.

use std::path::Path;

use crate::util::*;

/// A free loopback port (nothing listens on it when this returns).
fn free_port() -> u16 {
    free_port_on(&["127.0.0.1"])
}

/// A node: cache-d with its admin socket on `admin` and the fleet's
/// secret (its local one is DIR/_.secret, for `cache-adm -n`).
fn node(dir: &Path, backend: &str, admin: &str, secret: &Path) -> Daemon {
    Daemon::start(dir, backend, &["-T", admin, "--fleet-secret", secret.to_str().unwrap()])
}

/// An origin and nodes in front of it with their admin sockets on
/// `admins` (host:port), sharing one secret.
struct Fleet {
    origin: Origin,
    tmp: tempfile::TempDir,
    secret: std::path::PathBuf,
    nodes: Vec<Daemon>,
}

impl Fleet {
    fn start(admins: &[String]) -> Fleet {
        let origin = Origin::start();
        let tmp = tempfile::tempdir().unwrap();
        let backend = format!("127.0.0.1:{}", origin.port);
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "fleet secret\n").unwrap();
        let nodes = admins.iter().enumerate().map(|(i, a)| node(&tmp.path().join(format!("n{i}")), &backend, a, &secret)).collect();
        Fleet { origin, tmp, secret, nodes }
    }

    fn backend(&self) -> String {
        format!("127.0.0.1:{}", self.origin.port)
    }
}

#[test]
fn cache_adm_bans_across_the_fleet_and_names_the_nodes_that_fail() {
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let f = Fleet::start(&ports[..3].iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>());
    let (tmp, secret, nodes) = (&f.tmp, &f.secret, &f.nodes);
    let peers = tmp.path().join("peers");
    let list: String = ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect();
    std::fs::write(&peers, format!("# the fleet\n{list}")).unwrap();
    let (p, s) = (peers.to_str().unwrap(), secret.to_str().unwrap());
    // Three answer, the fourth is not there: a line each, exit 1 naming it.
    let o = run("cache-adm", &["--peers", p, "-S", s, "ban", "req.url", "~", "^/old/"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    for (i, port) in ports.iter().enumerate() {
        let want = if i < 3 { format!("127.0.0.1:{port} 200") } else { format!("127.0.0.1:{port} unreachable:") };
        assert!(lines[i].starts_with(&want), "{}: {out}", lines[i]);
    }
    assert!(stderr(&o).contains(&format!("127.0.0.1:{}", ports[3])), "{}", stderr(&o));
    for n in nodes {
        let o = run("cache-adm", &["-n", n.dir.to_str().unwrap(), "ban.list"]);
        assert!(stdout(&o).contains("req.url ~ ^/old/"), "{}", stdout(&o));
    }
    // Surrogate keys across the fleet: each node purges what it holds.
    for n in nodes {
        let mut c = Client::connect(n.port);
        for u in ["/size/1?max_age=600&header=xkey:red", "/size/2?max_age=600&header=xkey:red%20blue", "/size/3?max_age=600"] {
            assert_eq!(c.get(u, "").status, 200);
        }
    }
    let three: String = ports[..3].iter().map(|p| format!("127.0.0.1:{p}\n")).collect();
    let up = tmp.path().join("up");
    std::fs::write(&up, three).unwrap();
    let o = run("cache-adm", &["--peers", up.to_str().unwrap(), "-S", s, "xkey.purge", "red"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().filter(|l| l.ends_with(" 200 2 object(s) purged")).count(), 3, "{}", stdout(&o));
    let o = run("cache-adm", &["--peers", up.to_str().unwrap(), "-S", s, "xkey.purge", "-s", "blue", "red"]);
    assert!(stdout(&o).lines().all(|l| l.ends_with(" 200 0 object(s) made stale")), "{}", stdout(&o));
    // JSON: an object per node.
    let o = run("cache-adm", &["--peers", p, "-S", s, "-j", "ping"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let oks: Vec<bool> = v.as_array().unwrap().iter().map(|n| n["ok"].as_bool().unwrap()).collect();
    assert_eq!(oks, [true, true, true, false], "{v}");
    assert_eq!(v[0]["status"], 200);
    assert!(v[3]["error"].as_str().unwrap().contains("could not connect"), "{v}");
    // A command that fails on the nodes: exit 1 too, their status shown.
    let o = run("cache-adm", &["--peers", p, "-S", s, "param.set", "default_ttl", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).lines().take(3).all(|l| l.contains(" 106 ")), "{}", stdout(&o));
    // --retry-for: the fourth node starts a second later and gets the ban.
    let (pp, ss) = (p.to_string(), s.to_string());
    let late = std::thread::spawn(move || {
        std::process::Command::new(bin("cache-adm"))
            .args(["--peers", &pp, "-S", &ss, "--retry-for", "20s", "ban", "req.url", "~", "^/later/"])
            .output()
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    let fourth = node(&tmp.path().join("n3"), &f.backend(), &format!("127.0.0.1:{}", ports[3]), secret);
    let o = late.join().unwrap().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let o = run("cache-adm", &["-n", fourth.dir.to_str().unwrap(), "ban.list"]);
    assert!(stdout(&o).contains("req.url ~ ^/later/"), "{}", stdout(&o));
    // Bad peers specs: a usage error.
    let bad = tmp.path().join("bad");
    std::fs::write(&bad, "not-an-address\n").unwrap();
    let o = run("cache-adm", &["--peers", bad.to_str().unwrap(), "ping"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("line 1: 'not-an-address' is not host:port"), "{}", stderr(&o));
    let o = run("cache-adm", &["--peers", "dns:localhost:1", "--retry-for", "1s", "ping"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}

/// Policy and parameters change on every node the same way: `vcl.load` +
/// `vcl.use` and `param.set` through `--peers`, each node acknowledging.
#[test]
fn vcl_and_parameters_change_across_the_fleet() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let f = Fleet::start(&ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>());
    let (tmp, secret) = (&f.tmp, &f.secret);
    let peers = tmp.path().join("peers");
    std::fs::write(&peers, ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect::<String>()).unwrap();
    let on_all = |words: &[&str]| {
        let mut args = vec!["--peers", peers.to_str().unwrap(), "-S", secret.to_str().unwrap()];
        args.extend_from_slice(words);
        let o = run("cache-adm", &args);
        assert_eq!(o.status.code(), Some(0), "{words:?}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(stdout(&o).lines().filter(|l| l.contains(" 200")).count(), 3, "{}", stdout(&o));
    };
    let src = "vcl 4.1;\nbackend b { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\n\
               sub vcl_deliver { set resp.http.X-Policy = \"fleet-2\"; }\n";
    let vcl = vcl_src(tmp.path(), "fleet.vcl", src, f.origin.port);
    on_all(&["vcl.load", "fleet2", vcl.to_str().unwrap()]);
    on_all(&["vcl.use", "fleet2"]);
    on_all(&["param.set", "default_ttl", "42"]);
    for n in &f.nodes {
        let r = Client::connect(n.port).get("/size/10", "");
        assert_eq!(r.header("X-Policy"), Some("fleet-2"), "node on port {}", n.port);
        let o = stdout(&run("cache-adm", &["-n", n.dir.to_str().unwrap(), "param.show", "default_ttl"]));
        assert!(o.contains("Value is: 42"), "{o}");
    }
}

/// `--peers dns:` follows the name while it retries: a node published
/// late gets the command, one that leaves DNS unreached is gone (not a
/// failure), and `--expect` holds the command until the fleet is whole.
#[test]
fn dns_peers_are_asked_again_until_the_fleet_is_whole() {
    let dns = e2e::dns::Dns::start();
    let admin = free_port_on(&["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]);
    let f = Fleet::start(&(2..5).map(|i| format!("127.0.0.{i}:{admin}")).collect::<Vec<_>>());
    let (secret, nodes) = (f.secret.clone(), &f.nodes);
    let (spec, ns) = (format!("dns:fleet.test:{admin}"), format!("127.0.0.1:{}", dns.port));
    let ask = move |extra: &[&str], words: &[&str]| {
        let mut args: Vec<String> = ["--peers", &spec, "--nameserver", &ns, "-S", secret.to_str().unwrap()].map(String::from).to_vec();
        args.extend(extra.iter().chain(words).map(|s| s.to_string()));
        std::process::Command::new(bin("cache-adm")).args(&args).output().unwrap()
    };
    let banned = |pattern: &str| {
        nodes.iter().filter(|n| stdout(&run("cache-adm", &["-n", n.dir.to_str().unwrap(), "ban.list"])).contains(pattern)).count()
    };
    // Two of three published: --expect 3 waits for the third.
    dns.set("fleet.test", &["127.0.0.2", "127.0.0.3"]);
    let asking = std::thread::spawn({
        let ask = ask.clone();
        move || ask(&["--expect", "3", "--retry-for", "20s"], &["ban", "req.url", "~", "^/late/"])
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    dns.set("fleet.test", &["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let o = asking.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).lines().filter(|l| l.contains(" 200")).count(), 3, "{}", stdout(&o));
    assert_eq!(banned("req.url ~ ^/late/"), 3);
    // Without enough nodes it says so.
    let o = ask(&["--expect", "4", "--retry-for", "1s"], &["ping"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("expected 4 node(s), 3 answered"), "{}", stderr(&o));
    // A fourth address that never answers, then leaves DNS: gone, not failed.
    dns.set("fleet.test", &["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]);
    let asking = std::thread::spawn({
        let ask = ask.clone();
        move || ask(&["--retry-for", "20s", "-j"], &["ban", "req.url", "~", "^/gone/"])
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    dns.set("fleet.test", &["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let o = asking.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let gone: Vec<bool> = v.as_array().unwrap().iter().map(|n| n["gone"].as_bool().unwrap()).collect();
    assert_eq!(gone, [false, false, false, true], "{v}");
    assert_eq!(v[3]["node"], format!("127.0.0.5:{admin}"));
    assert_eq!(banned("req.url ~ ^/gone/"), 3);
    // A name that does not resolve: exit 2, said so.
    dns.set("fleet.test", &[]);
    let o = ask(&[], &["ping"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("cannot resolve fleet.test"), "{}", stderr(&o));
}

/// A listener that relays to `node`: the node's bytes go to the client as
/// they come; the client's go to the node up to and including its `auth`
/// line, and with `inject` every line after that is replaced with the
/// relay's own command (`ban req.url ~ ^/relayed/`); without, it is a
/// port mapping. Counts the `auth` lines it passed on.
struct Relay {
    addr: String,
    auths: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Relay {
    fn start(node: &str, inject: bool) -> Relay {
        use std::io::{BufRead, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let auths = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (node, seen) = (node.to_string(), auths.clone());
        std::thread::spawn(move || {
            for client in l.incoming().flatten() {
                let Ok(mut up) = std::net::TcpStream::connect(&node) else { continue };
                let (mut down, mut from_up) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_up, &mut down);
                    let _ = down.shutdown(std::net::Shutdown::Both);
                });
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut authed = false;
                    for line in std::io::BufReader::new(client).lines().map_while(Result::ok) {
                        let send = if authed && inject { "ban req.url ~ ^/relayed/".to_string() } else { line.clone() };
                        if line.starts_with("auth ") {
                            authed = true;
                            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        if up.write_all(format!("{send}\n").as_bytes()).is_err() {
                            break;
                        }
                    }
                    let _ = up.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Relay { addr, auths }
    }
}

/// A listener that plays a node: a challenge, then 200 to every line.
fn rogue() -> String {
    use std::io::{BufRead, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let challenge = common::adm::auth_request_body(&common::adm::challenge());
            let _ = c.write_all(&common::adm::frame(107, &challenge));
            for _ in std::io::BufReader::new(c.try_clone().unwrap()).lines().map_while(Result::ok) {
                let _ = c.write_all(&common::adm::frame(200, "PONG 1 1.0"));
            }
        }
    });
    addr
}

/// Issue 32, item 3: a listener at an address `cache-adm --peers`
/// contacts (a rogue pod in DNS, a stale or spoofed answer) can neither
/// pass the real node's challenge to cache-adm and run its own command
/// with the answer, nor have cache-adm report a command it never ran as
/// done. Each node's secret is bound to the address cache-adm connects
/// to, and the node proves it holds it (cache-adm(1), FLEET
/// AUTHENTICATION).
#[test]
fn a_relay_cannot_run_its_command_with_cache_adms_login() {
    let port = free_port();
    let node = format!("127.0.0.1:{port}");
    let f = Fleet::start(std::slice::from_ref(&node));
    let (tmp, s) = (&f.tmp, f.secret.to_str().unwrap());
    let peers = |name: &str, addr: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, format!("{addr}\n")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let bans = || stdout(&run("cache-adm", &["-n", f.nodes[0].dir.to_str().unwrap(), "ban.list"]));
    let relay = Relay::start(&node, true);
    let o = run("cache-adm", &["--peers", &peers("relayed", &relay.addr), "-S", s, "ban", "req.url", "~", "^/asked/"]);
    assert!(relay.auths.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the relay passed cache-adm's answer on");
    let listed = bans();
    assert!(!listed.contains("^/relayed/") && !listed.contains("^/asked/"), "nothing ran on the real node: {listed}");
    assert_eq!(o.status.code(), Some(1), "cache-adm reports the failure: {}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains(&relay.addr), "{}", stderr(&o));
    // A listener that says 200 to everything is not taken for a node.
    let o = run("cache-adm", &["--peers", &peers("rogue", &rogue()), "-S", s, "ban", "req.url", "~", "^/asked/"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    // The node itself, at its own address, takes the command.
    let o = run("cache-adm", &["--peers", &peers("direct", &node), "-S", s, "ban", "req.url", "~", "^/direct/"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(bans().contains("req.url ~ ^/direct/"), "{}", bans());
}

/// What an old varnishadm can still do on a fleet node: everything with
/// the node's own secret (`cache-adm --node-secret ADDR`, for the address
/// it connects to), nothing with the fleet's. And a node behind a port
/// mapping takes the node secret of the mapped address once told it
/// (`--fleet-address`), and only then.
#[test]
fn node_secrets_for_varnishadm_and_behind_port_mappings() {
    let (port, other) = (free_port(), free_port());
    let node = format!("127.0.0.1:{port}");
    let mapped = Relay::start(&node, false);
    let unlisted = Relay::start(&node, false);
    let f = Fleet::start(&[format!("127.0.0.1:{other}")]);
    let (tmp, s) = (&f.tmp, f.secret.to_str().unwrap());
    let dir = tmp.path().join("behind");
    let _n = Daemon::start(&dir, &f.backend(), &["-T", &node, "--fleet-secret", s, "--fleet-address", &mapped.addr]);
    let peers = |name: &str, addr: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, format!("{addr}\n")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let o = run("cache-adm", &["--peers", &peers("mapped", &mapped.addr), "-S", s, "ping"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = run("cache-adm", &["--peers", &peers("unlisted", &unlisted.addr), "-S", s, "ping"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("did not take its node secret"), "{}", stdout(&o));
    if !have("varnishadm") {
        return;
    }
    let varnishadm = |secret: &str, words: &[&str]| {
        let o = std::process::Command::new("varnishadm").args(["-T", &node, "-S", secret]).args(words).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let o = run("cache-adm", &["--node-secret", &node, "-S", s]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let own = tmp.path().join("node.secret");
    std::fs::write(&own, &o.stdout).unwrap();
    let own = own.to_str().unwrap();
    let (code, out) = varnishadm(own, &["ping"]);
    assert!(code == Some(0) && out.starts_with("PONG "), "{code:?} {out}");
    assert_eq!(varnishadm(own, &["ban", "req.url", "~", "^/old/"]).0, Some(0));
    assert!(varnishadm(own, &["ban.list"]).1.contains("req.url ~ ^/old/"));
    assert_eq!(varnishadm(s, &["ping"]).0, Some(2), "the fleet's secret itself is refused");
}
