# A cluster of caches: each node owns a slice of the URL space through a
# shard director (consistent hashing), with warmup so the next owner of a
# key already has it when a node fails, rampup so a node back from sick is
# not flooded, and a restart that tries the next node on the ring.
vcl 4.1;

import directors;
import std;

probe node_probe {
    .url = "/size/1";
    .interval = 2s;
    .timeout = 1s;
    .window = 5;
    .threshold = 3;
}

backend node1 { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; .probe = node_probe; }
backend node2 { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; .probe = node_probe; }
backend node3 { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; .probe = node_probe; }

sub vcl_init {
    new cluster = directors.shard();
    cluster.add_backend(node1);
    cluster.add_backend(node2);
    cluster.add_backend(node3);
    cluster.set_warmup(0.1);
    cluster.set_rampup(30s);
    cluster.reconfigure();
}

sub vcl_recv {
    if (req.http.X-Session) {
        # Sticky by user, whatever the URL.
        set req.backend_hint = cluster.backend(by=KEY, key=cluster.key(req.http.X-Session));
    } elsif (req.restarts > 0) {
        set req.backend_hint = cluster.backend(by=URL, alt=req.restarts, warmup=0.0, rampup=false);
    } else {
        # by=HASH, picked when the fetch starts.
        set req.backend_hint = cluster.backend();
    }
}

sub vcl_backend_fetch {
    set bereq.http.X-Shard = bereq.backend;
}

sub vcl_deliver {
    if (resp.status >= 500 && req.restarts == 0) {
        return (restart);
    }
}
