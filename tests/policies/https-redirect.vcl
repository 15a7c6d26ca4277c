# Imitates: the TLS-offload VCLs where Varnish sits behind a terminator
# (hitch, nginx, HAProxy) and enforces HTTPS and a canonical host: the
# X-Forwarded-Proto from the terminator trusted only from its address,
# sensitive paths (account, admin, checkout) redirected to https with a
# 301 built in vcl_synth from a custom 750 status, the bare domain sent
# to www, X-Forwarded-Port and X-Forwarded-Proto in the hash so http and
# https variants never mix, Strict-Transport-Security only on https
# answers, and Location headers rewritten from http to https on the way
# out. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl terminators {
    "127.0.0.1";
}

sub vcl_recv {
    if (client.ip !~ terminators) {
        unset req.http.X-Forwarded-Proto;
    }
    if (!req.http.X-Forwarded-Proto) {
        set req.http.X-Forwarded-Proto = "http";
    }
    if (req.http.X-Forwarded-Proto == "https") {
        set req.http.X-Forwarded-Port = "443";
    } else {
        set req.http.X-Forwarded-Port = "80";
    }
    if (req.http.host ~ "^example\.com(:[0-9]+)?$") {
        return (synth(750, "https://www.example.com" + req.url));
    }
    if (req.http.X-Forwarded-Proto != "https" && req.url ~ "^/(account|admin|checkout)") {
        return (synth(750, "https://" + std.tolower(req.http.host) + req.url));
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

sub vcl_hash {
    hash_data(req.http.X-Forwarded-Proto);
}

sub vcl_deliver {
    if (req.http.X-Forwarded-Proto == "https") {
        set resp.http.Strict-Transport-Security = "max-age=31536000; includeSubDomains; preload";
        if (resp.http.Location ~ "^http://") {
            set resp.http.Location = regsub(resp.http.Location, "^http://", "https://");
        }
    }
}

sub vcl_synth {
    if (resp.status == 750) {
        set resp.http.Location = resp.reason;
        set resp.status = 301;
        set resp.reason = "Moved Permanently";
        set resp.http.Cache-Control = "max-age=3600";
        return (deliver);
    }
}
