//! The self-routing cluster (`contrib/cluster/cluster.vcl`, issue 20):
//! three cache-d nodes on 127.0.0.2–4 route each miss to the URL's owner
//! on the shard ring, so the origin sees one fetch per URL for the whole
//! fleet, and when a node dies its URLs move to the others.

use crate::util::*;

fn origin_requests(o: &Origin) -> u64 {
    let r = Client::connect(o.port).get("/__stats", "");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["requests"].as_u64().unwrap()
}

/// A port free on all three addresses.
fn free_port() -> u16 {
    loop {
        let p = std::net::TcpListener::bind("127.0.0.2:0").unwrap().local_addr().unwrap().port();
        if ["127.0.0.3", "127.0.0.4"].iter().all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok()) {
            return p;
        }
    }
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
    let before = origin_requests(&origin);
    for i in 0..30 {
        for p in &ports {
            let r = Client::connect(*p).get(&format!("/size/{i}?max_age=600"), "");
            assert_eq!((r.status, r.body.len()), (200, i), "url {i} on port {p}");
        }
    }
    assert_eq!(origin_requests(&origin), before + 30, "one fetch per URL for the fleet");
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
    let before = origin_requests(&origin);
    for i in 30..60 {
        for p in [ports[0], ports[2]] {
            let r = Client::connect(p).get(&format!("/size/{i}?max_age=600"), "");
            assert_eq!(r.status, 200, "url {i} on port {p} with node 2 gone");
        }
    }
    assert_eq!(origin_requests(&origin), before + 30, "one fetch per URL on the two nodes left");
}
