# Imitates: the "caching POST requests" VCLs written for GraphQL and
# search APIs (Varnish Software's POST-caching tutorial and the Apollo/
# Magento PWA setups, here without a body-reading vmod): the request body
# kept with std.cache_req_body() so it can be sent again on a miss, POST
# requests looked up by URL, Content-Type and Content-Length, the method
# put back to POST in vcl_backend_fetch (Varnish fetches with GET), a
# GET /graphql?query= form cached normally, oversized bodies passed,
# X-Body-Cached telling which path was taken, and mutations (by a header
# the client sends) never cached. Our own writing.
vcl 4.1;

import std;

backend api {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.method == "POST") {
        if (req.http.X-GraphQL-Operation == "mutation") {
            return (pass);
        }
        if (!std.cache_req_body(64KB)) {
            set req.http.X-Body-Cached = "too large";
            return (pass);
        }
        set req.http.X-Body-Cached = "yes";
        set req.http.X-Original-Method = "POST";
        return (hash);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization) {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    if (req.http.X-Original-Method == "POST") {
        hash_data("POST");
        hash_data(req.http.Content-Type);
        hash_data(req.http.Content-Length);
    }
}

sub vcl_backend_fetch {
    if (bereq.http.X-Original-Method == "POST") {
        set bereq.method = "POST";
    }
    unset bereq.http.X-Original-Method;
}

sub vcl_backend_response {
    set beresp.http.X-Fetched-With = bereq.method;
    if (bereq.method == "POST" && beresp.status == 200 && beresp.ttl <= 0s) {
        set beresp.ttl = 10s;
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_deliver {
    if (req.http.X-Body-Cached) {
        set resp.http.X-Body-Cached = req.http.X-Body-Cached;
    }
}
