# Imitates: VCL written from the Varnish 7.x reference manual and the
# varnish-cache test suite's idioms rather than from a template: elif,
# a bare "return;" ending a custom sub early, durations written with a
# space ("1 s"), an ACL's name used as a string, std.ip() with a
# fallback, req.transport, local.socket, beresp.filters
# and resp.filters inspected, req.hash_ignore_busy for refreshes,
# std.rollback() undoing a header edit (the header then copied while
# unset), obj.can_esi, obj.uncacheable, and a second backend
# declared "none" for routes that must never reach an origin.
# Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend nowhere none;

acl trusted {
    "127.0.0.1";
}

sub scrub {
    if (!req.http.Cookie) {
        return;
    }
    set req.http.Cookie = regsuball(req.http.Cookie, "(^|; )(_ga|_gid|__utma)=[^;]*", "");
    set req.http.Cookie = regsub(req.http.Cookie, "^; ", "");
    if (req.http.Cookie == "") {
        unset req.http.Cookie;
    }
}

sub vcl_recv {
    set req.http.X-Scratch = "temporary";
    std.rollback(req);
    set req.http.X-Via-Acl = trusted;
    set req.http.X-Transport = req.transport;
    set req.http.X-Endpoint = local.socket;
    set req.http.X-Real-IP = std.ip(req.http.X-Forwarded-For, client.ip);
    if (req.url ~ "^/blackhole") {
        set req.backend_hint = nowhere;
    }
    if (req.method == "REFRESH") {
        set req.method = "GET";
        set req.hash_ignore_busy = true;
        set req.hash_always_miss = true;
    } elif (req.method == "PURGE" || req.method == "BAN") {
        if (client.ip ~ trusted) {
            return (purge);
        }
        return (synth(405));
    } elif (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    call scrub;
    if (req.http.Authorization || req.http.Cookie) {
        return (pass);
    }
    return (hash);
}

sub vcl_backend_response {
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        set beresp.do_esi = true;
    }
    if (beresp.ttl > 0 s && beresp.ttl < 30 s) {
        set beresp.ttl = 30 s;
    }
    set beresp.grace = 1 m;
    set beresp.http.X-Filters = beresp.filters;
}

sub vcl_deliver {
    set resp.http.X-Can-Esi = obj.can_esi;
    set resp.http.X-Uncacheable = obj.uncacheable;
    set resp.http.X-Resp-Filters = resp.filters;
    set resp.http.X-Acl = req.http.X-Via-Acl;
    set resp.http.X-Transport = req.http.X-Transport;
    set resp.http.X-Scratch = req.http.X-Scratch;
    if (req.http.X-Endpoint) {
        set resp.http.X-Socket = "named";
    }
}
