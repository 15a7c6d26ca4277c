# cachekit on Kubernetes: the policy every pod of the StatefulSet runs
# (from the ConfigMap; the reload sidecar loads a changed one with
# vcl.load + vcl.use, and keeps the running one if the new one fails).
#
# The pods form a self-routing cluster, as contrib/cluster/cluster.vcl
# explains: a miss goes to the pod that owns the URL on the shard ring, so
# each object is fetched from the origin once per fleet. The pods are
# found by their stable names through the headless Service
# (cachekit-N.cachekit-peers), followed in DNS by a dynamic director, so a
# pod that comes back with a new address is found again without a reload.
# A pod knows itself by its host name (server.hostname is the pod's name).
#
# To fit your cluster: the origin's Service name and port (ORIGIN below is
# "origin", port 80). The ring has a member for each pod name up to
# cachekit-7: a name with no pod behind it does not resolve and counts as
# sick, so its share of the URLs goes to the next members on the ring,
# and scaling the StatefulSet anywhere up to 8 replicas needs no change
# here (past 8, add lines).
#
# VCL 4.0: beresp.storage_hint (below) is of 4.0 only, as in Varnish.
vcl 4.0;
import directors;
import dynamic;
import std;

probe peer {
    .url = "/__cachekit/health";
    .interval = 1s;
    .timeout = 1s;
    .window = 3;
    .threshold = 2;
    .initial = 2;
}

sub vcl_init {
    # The origin by its Service name (re-resolved every 10s).
    new origin = dynamic.director(port = "80", ttl = 10s);
    # The peers: one domain per pod, probed; a name that does not resolve
    # (no such pod yet) is asked again after 5s, so a new pod joins soon.
    new peers = dynamic.director(port = "6081", ttl = 5s, retry_after = 5s, probe = peer, first_lookup_timeout = 2s);
    new ring = directors.shard();
    ring.add_backend(peers.backend("cachekit-0.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-1.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-2.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-3.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-4.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-5.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-6.cachekit-peers"));
    ring.add_backend(peers.backend("cachekit-7.cachekit-peers"));
    ring.reconfigure();
}

sub vcl_recv {
    if (req.url == "/__cachekit/health") {
        return (synth(200, "OK"));
    }
    if (req.http.X-Cachekit-Routed) {
        # A peer routed it here: this pod owns the URL.
        unset req.http.X-Cachekit-Routed;
        set req.backend_hint = origin.backend("origin");
    } else {
        set req.backend_hint = ring.backend(by=URL);
        if (!std.healthy(req.backend_hint) || req.backend_hint == peers.backend(server.hostname + ".cachekit-peers")) {
            # This pod owns it, or no peer can take it: from the origin.
            set req.backend_hint = origin.backend("origin");
        } else {
            set req.http.X-Cachekit-Routed = "1";
        }
    }
}

sub vcl_backend_response {
    # Objects go to the persistent store the StatefulSet gives each pod
    # (-s disk=persistent,... on its volume claim), so a restarted or
    # rescheduled pod comes back with its cache. A hint by name rather than
    # storage.disk, so that this policy also loads where there is no such
    # store (the objects then go round robin over the stores there are).
    set beresp.storage_hint = "disk";
}
