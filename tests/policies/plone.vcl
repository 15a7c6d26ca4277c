# Imitates: plone.recipe.varnish's generated VCL for Plone: purging by
# PURGE from the Zope hosts, the __ac authentication cookie (and
# Authorization) passed, all other cookies dropped for anonymous
# visitors, Set-Cookie responses made hit-for-pass, X-Cache-Operation
# and X-Cache-Hits headers describing what the cache did, a short
# default TTL when the backend gives none. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 0.4s;
    .first_byte_timeout = 300s;
    .between_bytes_timeout = 60s;
}

acl purge {
    "localhost";
    "127.0.0.0"/8;
}

sub vcl_recv {
    set req.http.X-Varnish-Backend = "default";
    if (req.method == "PURGE") {
        if (!client.ip ~ purge) {
            return (synth(405, "Not allowed."));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (!client.ip ~ purge) {
            return (synth(405, "Not allowed."));
        }
        ban("req.url ~ " + req.url);
        return (synth(200, "Ban added"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "(^|;\s*)(__ac|_ZopeId|__cp)=") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_purge {
    return (synth(200, "Purged"));
}

sub vcl_backend_response {
    set beresp.http.X-Backend-Name = beresp.backend.name;
    if (beresp.http.Set-Cookie) {
        set beresp.http.X-Cacheable = "NO - Set Cookie";
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.http.Cache-Control ~ "(private|no-cache|no-store)") {
        set beresp.http.X-Cacheable = "NO - Cache-Control=" + beresp.http.Cache-Control;
        set beresp.uncacheable = true;
        set beresp.ttl = 60s;
        return (deliver);
    }
    if (!beresp.http.Cache-Control && !beresp.http.Expires) {
        set beresp.ttl = 10s;
    }
    set beresp.http.X-Cacheable = "YES";
    set beresp.grace = 120s;
}

sub vcl_hit {
    set req.http.X-Cache-Operation = "HIT";
}

sub vcl_miss {
    set req.http.X-Cache-Operation = "MISS";
}

sub vcl_pass {
    set req.http.X-Cache-Operation = "PASS";
}

sub vcl_deliver {
    set resp.http.X-Cache-Operation = req.http.X-Cache-Operation;
    set resp.http.X-Hits = obj.hits;
    unset resp.http.X-Backend-Name;
}
