# Imitates: the examples in Varnish's own documentation (users-guide
# "Purging and banning", "VCL examples", the builtin.vcl comments): an ACL
# guarding PURGE and BAN, a health URL answered by the cache, the synth
# 750 redirect trick, friendly error pages from vcl_synth and
# vcl_backend_error, an X-Cache header from obj.hits. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purgers {
    "localhost";
    "127.0.0.1";
}

sub vcl_recv {
    if (req.url == "/health") {
        return (synth(200, "OK"));
    }
    if (req.url ~ "^/redirect-me") {
        return (synth(750, "/"));
    }
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(405, "Not allowed."));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        ban("req.http.host == " + req.http.host + " && req.url ~ " + req.url);
        return (synth(200, "Ban added"));
    }
}

sub vcl_backend_response {
    if (beresp.status >= 500) {
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    set beresp.grace = 1h;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}

sub vcl_synth {
    if (resp.status == 750) {
        set resp.http.Location = resp.reason;
        set resp.status = 301;
        set resp.reason = "Moved Permanently";
        return (deliver);
    }
    if (resp.status == 200 && req.url == "/health") {
        set resp.http.Content-Type = "text/plain";
        synthetic("healthy" + {"
"});
        return (deliver);
    }
    set resp.http.Content-Type = "text/html; charset=utf-8";
    set resp.http.Retry-After = "5";
    synthetic({"<!DOCTYPE html>
<html><head><title>"} + resp.status + " " + resp.reason + {"</title></head>
<body><h1>Error "} + resp.status + " " + resp.reason + {"</h1>
<p>XID: "} + req.xid + {"</p></body></html>
"});
    return (deliver);
}

sub vcl_backend_error {
    set beresp.http.Content-Type = "text/html; charset=utf-8";
    synthetic({"<html><body><h1>Backend fetch failed</h1></body></html>
"});
    return (deliver);
}
