# Imitates: the grace and stale-if-error VCLs newsrooms publish (Varnish
# Software's "grace mode" blog posts, the Varnish 4-6 "serve stale while
# the backend is sick" recipes): req.grace shortened while the backend is
# healthy via std.healthy(), long beresp.grace and keep, backend errors
# and 5xx on background fetches abandoned so the stale copy stays,
# a synthetic "we are updating" page from vcl_backend_error, article
# pages forced to a one-minute TTL, front page to 30 seconds with
# X-Grace and X-Cache telling what happened. Our own writing.
vcl 4.1;

import std;

backend newsroom {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 1s;
    .first_byte_timeout = 10s;
    .probe = {
        .request =
            "GET /__probe HTTP/1.1"
            "Host: www.example.com"
            "User-Agent: newsroom-health"
            "Connection: close";
        .interval = 5s;
        .timeout = 1s;
        .window = 5;
        .threshold = 3;
        .initial = 3;
    }
}

sub vcl_recv {
    if (std.healthy(req.backend_hint)) {
        set req.grace = 10s;
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Cookie ~ "(^|; )(session|subscriber)=") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hit {
    if (obj.ttl <= 0s) {
        set req.http.X-Grace = "stale";
    }
}

sub vcl_backend_response {
    set beresp.grace = 6h;
    set beresp.keep = 1d;
    if (beresp.status >= 500) {
        if (bereq.is_bgfetch) {
            return (abandon);
        }
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (bereq.url == "/") {
        set beresp.ttl = 30s;
    } elsif (bereq.url ~ "^/(article|products|esi)") {
        set beresp.ttl = 1m;
    }
    if (beresp.ttl > 0s) {
        unset beresp.http.Set-Cookie;
    }
}

sub vcl_backend_error {
    if (bereq.is_bgfetch) {
        return (abandon);
    }
    set beresp.http.Content-Type = "text/html; charset=utf-8";
    set beresp.http.Retry-After = "5";
    synthetic({"<html><body><h1>We are updating the site</h1><p>"} + beresp.status + {"</p></body></html>"});
    return (deliver);
}

sub vcl_deliver {
    if (req.http.X-Grace) {
        set resp.http.X-Grace = req.http.X-Grace;
    } else {
        set resp.http.X-Grace = "fresh";
    }
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
