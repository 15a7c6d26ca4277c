# Imitates: the "vcl 4.0;" files still deployed from the Varnish 4.0/4.1
# migration guides and the varnish-4.0-configuration-templates of the
# time: req.proto normalised (writable in 4.0 only), the X-Forwarded-For
# append, req.http.host lowercased and port-stripped, the Accept-Encoding
# normalisation everybody carried, beresp.uncacheable with a ttl for
# hit-for-pass, req.esi switched off for fragments in vcl_deliver (which
# 4.0 ignores there), "return (fetch)" from vcl_miss, hash_data on
# server.ip when Host is missing, vcl_backend_error with the
# classic Guru Meditation page. Our own writing.
vcl 4.0;

import std;

backend legacy {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 3.5s;
    .first_byte_timeout = 60s;
    .between_bytes_timeout = 2s;
}

acl purge {
    "localhost";
    "127.0.0.1";
}

sub vcl_recv {
    if (req.proto != "HTTP/1.1") {
        set req.proto = "HTTP/1.1";
    }
    if (req.restarts == 0) {
        if (req.http.X-Forwarded-For) {
            set req.http.X-Forwarded-For = req.http.X-Forwarded-For + ", " + client.ip;
        } else {
            set req.http.X-Forwarded-For = client.ip;
        }
    }
    set req.http.host = std.tolower(regsub(req.http.host, ":[0-9]+$", ""));
    if (req.method == "PURGE") {
        if (!client.ip ~ purge) {
            return (synth(405, "Not allowed."));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD" && req.method != "PUT" &&
        req.method != "POST" && req.method != "TRACE" && req.method != "OPTIONS" &&
        req.method != "DELETE") {
        return (pipe);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Accept-Encoding) {
        if (req.url ~ "\.(jpg|png|gif|gz|tgz|bz2|tbz|mp3|ogg)$") {
            unset req.http.Accept-Encoding;
        } elsif (req.http.Accept-Encoding ~ "gzip") {
            set req.http.Accept-Encoding = "gzip";
        } elsif (req.http.Accept-Encoding ~ "deflate") {
            set req.http.Accept-Encoding = "deflate";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.host) {
        hash_data(req.http.host);
    } else {
        hash_data(server.ip);
    }
    return (lookup);
}

sub vcl_miss {
    return (fetch);
}

sub vcl_backend_response {
    if (beresp.ttl <= 0s || beresp.http.Set-Cookie || beresp.http.Vary == "*") {
        set beresp.ttl = 120s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    set beresp.grace = 6h;
    return (deliver);
}

sub vcl_deliver {
    if (req.url ~ "^/esi/") {
        set req.esi = false;
    }
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    return (deliver);
}

sub vcl_backend_error {
    set beresp.http.Content-Type = "text/html; charset=utf-8";
    synthetic({"<?xml version="1.0" encoding="utf-8"?>
<html><head><title>"} + beresp.status + " " + beresp.reason + {"</title></head>
<body><h1>Error "} + beresp.status + " " + beresp.reason + {"</h1>
<p>Guru Meditation: XID: "} + bereq.xid + {"</p></body></html>
"});
    return (deliver);
}
