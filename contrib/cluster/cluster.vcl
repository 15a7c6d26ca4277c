# A self-routing cachekit cluster: every node runs this policy, with NODE
# below naming itself. A miss goes to the node that owns the URL on the
# shard ring (the same ring on every node: Varnish's shard director,
# which cache-d maps exactly as varnishd does), so each object is fetched
# from the origin once per fleet, not once per node. The owner fetches
# from the origin; a request a peer routed here (X-Cachekit-Routed) is
# never routed again. A node whose probe fails drops out of the ring and
# its keys move to the next node on it; when every peer is sick, a node
# fetches from the origin itself.
#
# Fill in: ORIGIN_HOST/ORIGIN_PORT, one backend per node (nodeN, its
# address and port) with the ring's add_backend lines, and NODE (this
# node's backend name). On Kubernetes the nodes are the StatefulSet's pods
# (their stable DNS names through the headless Service); the ConfigMap
# holds one file per pod, or a start script substitutes NODE from the pod
# name.
vcl 4.1;
import directors;
import std;

probe peer {
    .url = "/__cachekit/health";
    .interval = 1s;
    .timeout = 1s;
    .window = 3;
    .threshold = 2;
    .initial = 2;
}

backend origin { .host = "ORIGIN_HOST"; .port = "ORIGIN_PORT"; }
backend node1 { .host = "NODE1_HOST"; .port = "NODE1_PORT"; .probe = peer; }
backend node2 { .host = "NODE2_HOST"; .port = "NODE2_PORT"; .probe = peer; }
backend node3 { .host = "NODE3_HOST"; .port = "NODE3_PORT"; .probe = peer; }

sub vcl_init {
    new ring = directors.shard();
    ring.add_backend(node1);
    ring.add_backend(node2);
    ring.add_backend(node3);
    ring.reconfigure();
}

sub vcl_recv {
    if (req.url == "/__cachekit/health") {
        return (synth(200, "OK"));
    }
    if (req.http.X-Cachekit-Routed) {
        # A peer routed it here: this node owns the URL.
        set req.backend_hint = origin;
    } else {
        set req.backend_hint = ring.backend(by=URL);
        if (!std.healthy(req.backend_hint) || req.backend_hint == NODE) {
            # This node owns it, or no peer can take it: from the origin.
            set req.backend_hint = origin;
        }
    }
}

sub vcl_backend_fetch {
    if (bereq.backend != origin) {
        set bereq.http.X-Cachekit-Routed = "1";
    }
}
