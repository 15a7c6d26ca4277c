# Imitates: the debugging VCL Varnish Software publishes for Varnish 7
# (the "vcl_builtin_*" split of builtin.vcl, used to trace or bend the
# built-in rules): vcl_req_cookie overridden so cookies no longer force a
# pass (they are logged and hashed instead), vcl_beresp_cookie overridden
# so Set-Cookie makes a short hit-for-miss, vcl_builtin_deliver and
# vcl_builtin_synth extended with X-Debug-* headers, std.log() of every
# decision, X-Debug-Hits and X-Debug-Restarts, the TTL and grace the
# object got, the XID in synthetic pages, a built-in sub
# (vcl_beresp_hitmiss) called from our own. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_req_cookie {
    if (req.http.Cookie) {
        std.log("debug: cookie kept in hash: " + req.http.Cookie);
        set req.http.X-Debug-Cookie = "hashed";
        return (hash);
    }
}

sub vcl_recv {
    set req.http.X-Debug-Path = "recv";
    if (req.url ~ "^/(admin|account|wp-admin)") {
        set req.http.X-Debug-Path = req.http.X-Debug-Path + ",pass-admin";
        return (pass);
    }
}

sub vcl_hash {
    if (req.http.X-Debug-Cookie) {
        hash_data(req.http.Cookie);
    }
}

sub vcl_hit {
    set req.http.X-Debug-Path = req.http.X-Debug-Path + ",hit";
}

sub vcl_miss {
    set req.http.X-Debug-Path = req.http.X-Debug-Path + ",miss";
}

sub vcl_pass {
    set req.http.X-Debug-Path = req.http.X-Debug-Path + ",pass";
}

sub vcl_beresp_cookie {
    if (beresp.http.Set-Cookie) {
        std.log("debug: Set-Cookie makes hit-for-miss");
        set beresp.http.X-Debug-Beresp = "set-cookie";
        if (bereq.url ~ "^/static/") {
            call vcl_beresp_hitmiss;
        }
        set beresp.ttl = 10s;
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_backend_response {
    set beresp.http.X-Debug-TTL = beresp.ttl;
    set beresp.http.X-Debug-Grace = beresp.grace;
    set beresp.http.X-Debug-Uncacheable = beresp.uncacheable;
}

sub vcl_builtin_deliver {
    set resp.http.X-Debug-Hits = obj.hits;
    set resp.http.X-Debug-Restarts = req.restarts;
    set resp.http.X-Debug-Path = req.http.X-Debug-Path + ",deliver";
}

sub vcl_builtin_synth {
    set resp.http.X-Debug-Synth = resp.status + " " + resp.reason;
    set resp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic("debug synth " + resp.status + " " + resp.reason + " XID: " + req.xid + {"
"});
    return (deliver);
}
