# Imitates: the VCLs of sites moving from a commercial CDN's VCL dialect
# to plain Varnish (Fastly-to-Varnish migration write-ups): the
# Surrogate-Key header copied to xkey, Surrogate-Control max-age turned
# into beresp.ttl and removed, TTL and grace exposed as whole seconds
# with std.integer(duration=..., fallback=...), objects larger than a
# threshold streamed and kept out of memory with std.bytes() on
# Content-Length, the CDN's X-Cache/X-Cache-Hits/X-Served-By headers
# recreated in vcl_deliver, and Fastly-style purge-all answered with a
# ban on the host. Our own writing.
vcl 4.1;

import std;
import xkey;

backend origin {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purgers {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.method == "PURGE" || req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        if (req.http.xkey-purge) {
            return (synth(200, "Purged " + xkey.purge(req.http.xkey-purge)));
        }
        if (req.url == "/") {
            ban("obj.http.X-Host == " + req.http.host);
            return (synth(200, "Purged all"));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    set beresp.http.X-Host = bereq.http.host;
    if (beresp.http.Surrogate-Key) {
        set beresp.http.xkey = beresp.http.Surrogate-Key;
    }
    if (beresp.http.Surrogate-Control ~ "max-age=[0-9]+") {
        set beresp.ttl = std.duration(regsub(beresp.http.Surrogate-Control, "^.*max-age=([0-9]+).*$", "\1") + "s", beresp.ttl);
        unset beresp.http.Surrogate-Control;
    }
    if (std.bytes(beresp.http.Content-Length, 0B) > 1KB) {
        set beresp.do_stream = true;
        set beresp.storage = storage.Transient;
        set beresp.http.X-Large = "yes";
    }
    set beresp.grace = 1h;
    set beresp.http.X-TTL-Seconds = std.integer(duration=beresp.ttl, fallback=-1);
    set beresp.http.X-Grace-Seconds = std.integer(duration=beresp.grace, fallback=-1);
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    set resp.http.X-Cache-Hits = obj.hits;
    set resp.http.X-Served-By = "cache-edge1";
    unset resp.http.X-Host;
    unset resp.http.xkey;
}
