# Imitates: API-caching VCLs from Varnish Software's blog posts and
# tutorials: CORS preflights answered at the edge, per-token caching
# (Authorization in the hash instead of a pass), JSON Vary kept, soft
# purges with vmod purge, stale-if-error style grace and keep, 5xx not
# cached, a short TTL cap, a health endpoint answered from
# std.healthy(). Our own writing.
vcl 4.1;

import std;
import purge;

backend api {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl editors {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.url == "/health") {
        if (std.healthy(req.backend_hint)) {
            return (synth(200, "Healthy"));
        }
        return (synth(503, "Sick"));
    }
    if (req.method == "OPTIONS" && req.http.Origin && req.http.Access-Control-Request-Method) {
        return (synth(204, "Preflight"));
    }
    if (req.method == "PURGE") {
        if (client.ip !~ editors) {
            return (synth(403, "Forbidden"));
        }
        return (hash);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    hash_data(req.http.host);
    if (req.http.Authorization) {
        hash_data(req.http.Authorization);
    }
    return (lookup);
}

sub vcl_hit {
    if (req.method == "PURGE") {
        set req.http.purged = purge.soft(0s, 60s);
        return (synth(200, "Soft-purged " + req.http.purged));
    }
}

sub vcl_miss {
    if (req.method == "PURGE") {
        set req.http.purged = purge.soft(0s, 60s);
        return (synth(404, "Not in cache (" + req.http.purged + ")"));
    }
}

sub vcl_backend_response {
    if (beresp.status >= 500) {
        set beresp.ttl = 1s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.ttl > 5m) {
        set beresp.ttl = 5m;
    }
    set beresp.grace = 30s;
    set beresp.keep = 1h;
    unset beresp.http.Set-Cookie;
}

sub vcl_deliver {
    if (req.http.Origin) {
        set resp.http.Access-Control-Allow-Origin = req.http.Origin;
        set resp.http.Vary = resp.http.Vary + ", Origin";
    }
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}

sub vcl_synth {
    if (resp.status == 204) {
        set resp.http.Access-Control-Allow-Origin = req.http.Origin;
        set resp.http.Access-Control-Allow-Methods = "GET, HEAD, POST, OPTIONS";
        set resp.http.Access-Control-Max-Age = "86400";
        return (deliver);
    }
    set resp.http.Content-Type = "application/json";
    synthetic({"{"status": "} + resp.status + {", "reason": ""} + resp.reason + {"""} + "}");
    return (deliver);
}
