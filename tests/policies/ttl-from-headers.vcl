# Imitates: the TTL-calculation VCLs written for applications that
# speak in their own headers (nginx's X-Accel-Expires, Surrogate-Control
# max-age, s-maxage read by hand, a CMS's X-TTL): std.duration() and
# std.integer() on strings cut out with regsub, a floor and a ceiling on
# beresp.ttl, beresp.grace from stale-while-revalidate, keep from
# stale-if-error, a TTL-class header shown on delivery, Cache-Control
# rewritten for browsers to a short max-age computed with std.integer,
# and Expires removed. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        return (pass);
    }
    unset req.http.Cookie;
}

sub vcl_backend_response {
    if (beresp.http.X-Accel-Expires ~ "^[0-9]+$") {
        set beresp.ttl = std.duration(beresp.http.X-Accel-Expires + "s", 0s);
    } elsif (beresp.http.Surrogate-Control ~ "max-age=[0-9]+") {
        set beresp.ttl = std.duration(regsub(beresp.http.Surrogate-Control, "^.*max-age=([0-9]+).*$", "\1") + "s", 0s);
    } elsif (beresp.http.Cache-Control ~ "max-age=[0-9]+") {
        set beresp.http.X-Max-Age = regsub(beresp.http.Cache-Control, "^.*max-age=([0-9]+).*$", "\1");
        if (std.integer(beresp.http.X-Max-Age, 0) < 60 && beresp.status == 200) {
            set beresp.ttl = 60s;
        }
        if (std.integer(beresp.http.X-Max-Age, 0) > 86400) {
            set beresp.ttl = 1d;
        }
    }
    if (beresp.http.Cache-Control ~ "stale-while-revalidate=[0-9]+") {
        set beresp.grace = std.duration(regsub(beresp.http.Cache-Control, "^.*stale-while-revalidate=([0-9]+).*$", "\1s"), 10s);
    } else {
        set beresp.grace = 30s;
    }
    if (beresp.http.Cache-Control ~ "stale-if-error=[0-9]+") {
        set beresp.keep = std.duration(regsub(beresp.http.Cache-Control, "^.*stale-if-error=([0-9]+).*$", "\1s"), 0s);
    }
    if (beresp.ttl >= 1h) {
        set beresp.http.X-TTL-Class = "long";
    } elsif (beresp.ttl > 0s) {
        set beresp.http.X-TTL-Class = "short";
    } else {
        set beresp.http.X-TTL-Class = "none";
    }
    set beresp.http.X-TTL = beresp.ttl;
    set beresp.http.X-TTL-Seconds = std.integer(real=std.real(duration=beresp.ttl));
    unset beresp.http.Expires;
}

sub vcl_deliver {
    if (resp.http.X-TTL-Class == "long") {
        set resp.http.Cache-Control = "public, max-age=" + std.integer(resp.http.X-TTL-Seconds, 0) / 10;
    } elsif (resp.http.X-TTL-Class == "short") {
        set resp.http.Cache-Control = "public, max-age=10";
    }
    unset resp.http.X-Max-Age;
    unset resp.http.X-TTL-Seconds;
}
