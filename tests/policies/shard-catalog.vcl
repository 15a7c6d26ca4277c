# Imitates: the consistent-hashing VCLs of large catalogs and media
# libraries (Varnish's vmod directors shard documentation, the "shard
# director for cache clusters" talks): a shard director over four app
# servers reconfigured in vcl_init with 67 replicas, picked in
# vcl_backend_fetch by the request's hash (the default), by URL for
# static files, by a key cut from the path for the API and by Host+URL
# with alt=1 for ESI, X-Shard naming the backend picked, and a
# round_robin for the uncacheable traffic. Our own writing.
vcl 4.1;

import directors;

backend node1 {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend node2 {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend node3 {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend node4 {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_init {
    new catalog = directors.shard();
    catalog.add_backend(node1);
    catalog.add_backend(node2);
    catalog.add_backend(node3);
    catalog.add_backend(node4);
    catalog.set_warmup(0.0);
    catalog.reconfigure(replicas = 67);

    new writers = directors.round_robin();
    writers.add_backend(node1);
    writers.add_backend(node2);
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        set req.backend_hint = writers.backend();
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        set req.backend_hint = writers.backend();
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_fetch {
    if (bereq.uncacheable) {
        return (fetch);
    }
    if (bereq.url ~ "^/api/") {
        set bereq.backend = catalog.backend(by = KEY,
            key = catalog.key(regsub(bereq.url, "^/api/([^/?]+).*$", "\1")));
    } elsif (bereq.url ~ "^/static/") {
        set bereq.backend = catalog.backend(by = URL);
    } elsif (bereq.url ~ "^/esi") {
        set bereq.backend = catalog.backend(by = KEY, key = catalog.key(bereq.http.host + bereq.url), alt = 1);
    } else {
        set bereq.backend = catalog.backend();
    }
}

sub vcl_backend_response {
    set beresp.http.X-Shard = beresp.backend.name;
}
