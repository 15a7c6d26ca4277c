//! The self-routing cluster (`contrib/cluster/cluster.vcl`, issue 20):
//! three cache-d nodes on 127.0.0.2–4 route each miss to the URL's owner
//! on the shard ring, so the origin sees one fetch per URL for the whole
//! fleet, and when a node dies its URLs move to the others.

use crate::util::*;

/// A port free on all of 127.0.0.2 to 127.0.0.6.
fn free_port() -> u16 {
    free_port_on(&["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"])
}

/// URLs `range` asked of every node in `ports`: each answered, and the
/// origin's fetches for them.
fn ask_all(origin: &Origin, ports: &[u16], range: std::ops::Range<usize>) -> u64 {
    let before = origin.requests();
    for i in range {
        for p in ports {
            let r = Client::connect(*p).get(&format!("/size/{i}?max_age=600"), "");
            assert_eq!((r.status, r.body.len()), (200, i), "url {i} on port {p}");
        }
    }
    origin.requests() - before
}

/// Wait until every running pod sees `n` peers healthy.
fn wait_for_healthy_peers(pods: &[Option<Daemon>], n: usize) {
    wait_for(15, &format!("every pod to see {n} peers healthy"), || {
        pods.iter()
            .flatten()
            .all(|d| {
                let list = stdout(&run("cache-adm", &["-n", d.dir.to_str().unwrap(), "backend.list"]));
                list.lines().filter(|l| l.contains(".peers(127.0.0.") && l.contains("healthy")).count() == n
            })
            .then_some(())
    });
}

/// The Kubernetes policy (contrib/k8s/cachekit/default.vcl) on three
/// nodes standing for the pods: their names (cachekit-N.cachekit-peers)
/// and the origin's Service come from a name server the test controls, a
/// pod's own name stands in for server.hostname. Each URL is fetched once
/// for the fleet; a pod that dies leaves the ring; one that comes back at
/// a new address is found again through DNS, without a reload; a fourth
/// pod (the ring names eight) takes its share when it appears.
#[test]
fn the_kubernetes_policy_follows_pods_through_dns() {
    let dns = e2e::dns::Dns::start();
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    dns.set("origin", &["127.0.0.1"]);
    for n in 0..3 {
        dns.set(&format!("cachekit-{n}.cachekit-peers"), &[&format!("127.0.0.{}", n + 2)]);
    }
    let resolver = format!("new r = dynamic.resolver(set_from_os = false);\n    r.add_nameserver(\"127.0.0.1:{}\");\n", dns.port);
    let vcl = std::fs::read_to_string(workspace().join("contrib/k8s/cachekit/default.vcl"))
        .unwrap()
        .replace("sub vcl_init {\n", &format!("sub vcl_init {{\n    {resolver}"))
        .replace("port = \"80\", ttl = 10s", &format!("port = \"{}\", ttl = 10s, resolver = r.use()", origin.port))
        .replace("port = \"6081\", ttl = 5s", &format!("port = \"{port}\", ttl = 0.5s, keep = 0, resolver = r.use()"));
    assert!(vcl.matches("r.use()").count() == 2, "the test's substitutions still apply to default.vcl");
    let start = |n: usize, ip: &str| {
        let f = tmp.path().join(format!("pod{n}.vcl"));
        std::fs::write(&f, vcl.replace("server.hostname", &format!("\"cachekit-{n}\""))).unwrap();
        let listen = format!("{ip}:{port}");
        Daemon::start_args(&tmp.path().join(format!("p{n}-{ip}")), &["-f", f.to_str().unwrap(), "-a", &listen])
    };
    let mut pods: Vec<Option<Daemon>> = (0..3).map(|n| Some(start(n, &format!("127.0.0.{}", n + 2)))).collect();
    let ports: Vec<u16> = pods.iter().map(|d| d.as_ref().unwrap().port).collect();
    wait_for_healthy_peers(&pods, 3);
    assert_eq!(ask_all(&origin, &ports, 0..30), 30, "one fetch per URL for the fleet");
    // cachekit-1 dies: the others' probes call it sick, its URLs move.
    pods[1] = None;
    let live = [ports[0], ports[2]];
    wait_for(15, "the live pods to see cachekit-1 sick", || {
        [&pods[0], &pods[2]]
            .iter()
            .all(|d| {
                let dir = d.as_ref().unwrap().dir.to_str().unwrap().to_string();
                stdout(&run("cache-adm", &["-n", &dir, "backend.list"]))
                    .lines()
                    .any(|l| l.contains(&format!("peers(127.0.0.3:{port})")) && l.contains("sick"))
            })
            .then_some(())
    });
    assert_eq!(ask_all(&origin, &live, 30..60), 30, "one fetch per URL on the two pods left");
    // It comes back at a new address: DNS says so, the others follow.
    dns.set("cachekit-1.cachekit-peers", &["127.0.0.5"]);
    pods[1] = Some(start(1, "127.0.0.5"));
    let back = format!("peers(127.0.0.5:{port})");
    wait_for(15, "the pods to find cachekit-1 at its new address", || {
        [&pods[0], &pods[2]]
            .iter()
            .all(|d| {
                let dir = d.as_ref().unwrap().dir.to_str().unwrap().to_string();
                stdout(&run("cache-adm", &["-n", &dir, "backend.list"])).lines().any(|l| l.contains(&back) && l.contains("healthy"))
            })
            .then_some(())
    });
    let all = [ports[0], pods[1].as_ref().unwrap().port, ports[2]];
    assert_eq!(ask_all(&origin, &all, 60..90), 30, "one fetch per URL with cachekit-1 back");
    // Scaled to four: cachekit-3 was a ring member that did not resolve;
    // now it does, and it takes its share without a change to the policy.
    dns.set("cachekit-3.cachekit-peers", &["127.0.0.6"]);
    pods.push(Some(start(3, "127.0.0.6")));
    wait_for_healthy_peers(&pods, 4);
    let four: Vec<u16> = pods.iter().flatten().map(|d| d.port).collect();
    assert_eq!(ask_all(&origin, &four, 90..130), 40, "one fetch per URL on four pods");
    let newest = pods[3].as_ref().unwrap();
    assert!(counter(&stat(&newest.dir), "MAIN.backend_req") >= Some(1), "cachekit-3 owns some URLs");
}

#[test]
fn a_cluster_fetches_each_url_once_and_reroutes_when_a_node_dies() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let template = std::fs::read_to_string(workspace().join("contrib/cluster/cluster.vcl")).unwrap();
    let mut vcl = template.replace("ORIGIN_HOST", "127.0.0.1").replace("ORIGIN_PORT", &origin.port.to_string());
    for n in 1..=3 {
        vcl = vcl.replace(&format!("NODE{n}_HOST"), &format!("127.0.0.{}", n + 1)).replace(&format!("NODE{n}_PORT"), &port.to_string());
    }
    let mut nodes: Vec<Option<Daemon>> = (1..=3)
        .map(|n| {
            let f = tmp.path().join(format!("node{n}.vcl"));
            std::fs::write(&f, vcl.replace("== NODE)", &format!("== node{n})"))).unwrap();
            let listen = format!("127.0.0.{}:{port}", n + 1);
            Some(Daemon::start_args(&tmp.path().join(format!("n{n}")), &["-f", f.to_str().unwrap(), "-a", &listen]))
        })
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|d| d.as_ref().unwrap().port).collect();
    // Every URL asked of every node: one origin fetch each.
    assert_eq!(ask_all(&origin, &ports, 0..30), 30, "one fetch per URL for the fleet");
    // The owners share the work (each owns some of the thirty).
    for d in nodes.iter().flatten() {
        let once = stat(&d.dir);
        assert!(counter(&once, "MAIN.backend_req") >= Some(1), "{once}");
    }
    // Node 2 dies: once the others' probes call it sick its URLs move, and
    // every new URL is again fetched once, asked of both live nodes.
    nodes[1] = None;
    for live in [0, 2] {
        let dir = nodes[live].as_ref().unwrap().dir.to_str().unwrap().to_string();
        wait_for(15, "the live nodes to see node 2 sick", || {
            stdout(&run("cache-adm", &["-n", &dir, "backend.list"]))
                .lines()
                .any(|l| l.contains("node2") && l.contains("sick"))
                .then_some(())
        });
    }
    assert_eq!(ask_all(&origin, &[ports[0], ports[2]], 30..60), 30, "one fetch per URL on the two nodes left");
}
