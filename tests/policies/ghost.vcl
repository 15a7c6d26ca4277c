# Imitates: the VCLs bloggers publish for Ghost behind Varnish: the
# /ghost/ admin and the members API passed, previews (/p/) passed, the
# ghost-admin-api-session and ghost-members-ssr cookies forcing a pass,
# every other cookie stripped, a forced TTL for pages the app marks with
# a short max-age, the sitemap and RSS cached briefly, "X-Cache" with
# obj.hits, a simple ban on req.url for the publisher's hook, and
# Set-Cookie dropped from cacheable content. Our own writing.
vcl 4.1;

import std;

backend ghost {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .probe = {
        .url = "/__probe";
        .interval = 10s;
        .timeout = 2s;
        .window = 3;
        .threshold = 2;
        .initial = 2;
    }
}

acl publisher {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.method == "BAN") {
        if (client.ip !~ publisher) {
            return (synth(405, "Not allowed"));
        }
        ban("req.http.host == " + req.http.host + " && req.url ~ ^" + req.url);
        return (synth(200, "Banned " + req.url));
    }
    if (req.method == "PURGE") {
        return (synth(405, "Use BAN"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(ghost|members/api|p/|account|admin)") {
        return (pass);
    }
    if (req.http.Cookie ~ "(ghost-admin-api-session|ghost-members-ssr)") {
        return (pass);
    }
    unset req.http.Cookie;
    if (req.url ~ "^/(sitemap.*\.xml|rss/?)$") {
        set req.http.X-Short-TTL = "1";
    }
    return (hash);
}

sub vcl_backend_response {
    if (bereq.url ~ "^/(ghost|members/api|p/)") {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
        return (deliver);
    }
    if (bereq.http.X-Short-TTL) {
        set beresp.ttl = 5m;
    } else if (beresp.status == 200 && beresp.ttl < 10m && beresp.ttl > 0s) {
        set beresp.ttl = 10m;
    }
    if (beresp.ttl > 0s) {
        unset beresp.http.Set-Cookie;
    }
    set beresp.grace = 24h;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT (" + obj.hits + ")";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    unset resp.http.X-Powered-By;
}
