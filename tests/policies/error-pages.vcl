# Imitates: the custom-error-page VCLs of hosting companies and shops
# ("friendly error pages", "maintenance mode", "soft 404"): the origin's
# 500 shown as a 503 with a branded page, a maintenance backend that is
# down answered from vcl_backend_error with a 503 page and Retry-After,
# redirects (old paths, a URL ending in "?") answered with
# synth(1301)/synth(1302) (Varnish sends the last three digits), a 404
# page cached briefly with its reason reworded, resp.status rewritten
# in vcl_deliver, and the origin's Last-Modified turned into an epoch
# header with std.time() and std.time2integer(). Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend maintenance {
    .host = "127.0.0.1";
    .port = "1";
    .connect_timeout = 1s;
}

sub vcl_recv {
    if (req.url ~ "^/(old-shop|legacy)(/|$)") {
        return (synth(1301, "/" + regsub(req.url, "^/(old-shop|legacy)/?", "")));
    }
    if (req.url ~ "\?$") {
        return (synth(1301, regsub(req.url, "\?$", "")));
    }
    if (req.url == "/redirect-temp") {
        return (synth(1302, "/"));
    }
    if (req.url ~ "^/health") {
        set req.backend_hint = maintenance;
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
    if (beresp.http.Last-Modified) {
        set beresp.http.X-Last-Modified-Epoch = std.time2integer(std.time(beresp.http.Last-Modified, now), 0);
    }
    if (beresp.status == 404) {
        set beresp.ttl = 30s;
        set beresp.http.X-Error-Page = "not-found";
    }
    if (beresp.status >= 500) {
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        set beresp.http.X-Error-Page = "server-error";
        return (deliver);
    }
}

sub vcl_backend_error {
    set beresp.status = 503;
    set beresp.http.Content-Type = "text/html; charset=utf-8";
    set beresp.http.Retry-After = "120";
    synthetic({"<!DOCTYPE html><html><body><h1>Down for maintenance</h1></body></html>
"});
    return (deliver);
}

sub vcl_deliver {
    if (resp.status == 500) {
        set resp.status = 503;
        set resp.http.X-Rewritten = "500";
    }
    if (resp.status == 404 && req.url ~ "^/missing") {
        set resp.reason = "Page Not Found";
    }
}

sub vcl_synth {
    if (resp.status == 1301 || resp.status == 1302) {
        set resp.http.Location = resp.reason;
        set resp.http.Content-Length = "0";
        set resp.http.X-Redirect = resp.status;
        set resp.reason = "Redirect";
        return (deliver);
    }
}
