# Imitates: the Varnish 7 style of invalidation endpoints that report
# what went wrong (the vmod std reference's std.ban()/std.ban_error()
# examples as copied into CMS connectors): BAN building an expression
# from X-Ban-* headers and answering 400 with std.ban_error() when it is
# malformed, PURGE turned into a ban on the exact URL and host, REFRESH
# requiring an X-Ban-Expression it does not get; and std helpers on the
# way back: std.time() of Last-Modified with std.strftime() to a date,
# std.fnmatch() classifying assets, std.strstr() on Content-Type,
# std.round() of a weighted score. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl invalidators {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.method == "BAN" || req.method == "PURGE" || req.method == "REFRESH") {
        if (client.ip !~ invalidators) {
            return (synth(403, "Forbidden"));
        }
        if (req.method == "PURGE") {
            set req.http.X-Expr = "req.url == " + req.url + " && req.http.host == " + req.http.host;
        } elsif (req.method == "REFRESH") {
            set req.http.X-Expr = req.http.X-Ban-Expression;
        } elsif (req.http.X-Cache-Tags) {
            set req.http.X-Expr = "obj.http.X-Cache-Tags ~ " + req.http.X-Cache-Tags;
        } else {
            set req.http.X-Expr = "req.url ~ " + req.http.X-Ban-Url + " && obj.status != ";
        }
        if (std.ban(req.http.X-Expr)) {
            return (synth(200, "Ban added"));
        }
        return (synth(400, std.ban_error()));
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
        set beresp.http.X-Modified-Day = std.strftime(std.time(beresp.http.Last-Modified, now), "%Y-%m-%d");
    }
    if (std.fnmatch("/static/*.css", bereq.url) || std.fnmatch("/static/*.js", bereq.url)) {
        set beresp.http.X-Asset = "code";
    } elsif (std.fnmatch("/static/*", bereq.url, pathname=false)) {
        set beresp.http.X-Asset = "other";
    }
    if (std.strstr(beresp.http.Content-Type, "html")) {
        set beresp.http.X-Html = std.strstr(beresp.http.Content-Type, "charset");
    }
    set beresp.http.X-Score = std.round(std.real(beresp.http.X-Origin-N, 0) * 2.5);
}

sub vcl_synth {
    set resp.http.X-Ban-Expression = req.http.X-Expr;
}
