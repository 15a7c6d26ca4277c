# Imitates: the hit-for-pass versus hit-for-miss VCLs of Varnish 5-7's
# documentation and blog posts ("hit-for-miss is the default since 5.0,
# return (pass(DURATION)) gives you hit-for-pass"): account and checkout
# answers made hit-for-pass for two minutes, Set-Cookie answers made
# hit-for-miss with a short TTL, "Cache-Control: private"/no-cache left
# to the builtin (hit-for-miss), 404s cached briefly, 5xx never, and an
# X-Cache header reading the decision from req/obj state: HIT, MISS,
# HITPASS (vcl_pass after a hit-for-pass), with obj.uncacheable shown.
# Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    unset req.http.X-Cache;
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Cookie ~ "(^|; )_ga") {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|; )(_ga|_gid|__utm.)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^; ", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
    return (hash);
}

sub vcl_hash {
    if (req.http.Cookie ~ "PHPSESSID=") {
        hash_data(regsub(req.http.Cookie, "^.*PHPSESSID=([^;]+).*$", "\1"));
    }
}

sub vcl_hit {
    set req.http.X-Cache = "HIT";
}

sub vcl_miss {
    set req.http.X-Cache = "MISS";
}

sub vcl_pass {
    if (req.http.X-Cache) {
        set req.http.X-Cache = "HITPASS";
    } else {
        set req.http.X-Cache = "PASS";
    }
}

sub vcl_backend_response {
    if (bereq.url ~ "^/(account|checkout|admin)") {
        return (pass(120s));
    }
    if (beresp.status >= 500) {
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.status == 404) {
        set beresp.ttl = 15s;
        return (deliver);
    }
    if (beresp.http.Set-Cookie) {
        set beresp.ttl = 30s;
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_deliver {
    if (!req.http.X-Cache) {
        set req.http.X-Cache = "PASS";
    }
    if (req.http.X-Cache == "HIT" && obj.uncacheable) {
        set req.http.X-Cache = "HITMISS";
    }
    set resp.http.X-Cache = req.http.X-Cache;
    set resp.http.X-Cache-Hits = obj.hits;
    set resp.http.X-Uncacheable = obj.uncacheable;
}
