# Imitates: the VCL published with spatie/laravel-varnish (Laravel):
# the application marks cacheable answers itself (here the public
# Cache-Control stands in for its X-Cacheable header), everything else
# is hit-for-miss; laravel_session and XSRF-TOKEN cookies stripped only
# for cacheable paths; a ban endpoint for the application's host with
# X-Ban-Url, the "everything" ban for "/"; std.collect on Cookie; static
# files forced into cache; gzip normalised and not asked of the backend
# for clients without it; responses marked X-Cacheable tell the client
# nothing about it. Our own writing.
vcl 4.0;

import std;

backend laravel {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .first_byte_timeout = 60s;
}

acl ban_clients {
    "127.0.0.1";
}

sub vcl_recv {
    std.collect(req.http.Cookie);
    if (req.method == "BAN") {
        if (!client.ip ~ ban_clients) {
            return (synth(403, "Forbidden"));
        }
        if (req.url == "/" && !req.http.X-Ban-Url) {
            ban("obj.http.X-Laravel-Host == " + req.http.host);
        } else if (req.http.X-Ban-Url) {
            ban("obj.http.X-Laravel-Host == " + req.http.host + " && obj.http.X-Laravel-Url ~ " + req.http.X-Ban-Url);
        }
        return (synth(200, "Ban added"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(admin|login|logout|register|password|account|nova|horizon|telescope)") {
        return (pass);
    }
    if (req.http.Accept-Encoding) {
        if (req.http.Accept-Encoding ~ "gzip") {
            set req.http.Accept-Encoding = "gzip";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
    if (req.http.Accept-Encoding) {
        set req.http.X-Client-Gzip = "1";
    }
    if (req.url ~ "\.(css|js|png|jpe?g|gif|svg|ico|woff2?)(\?.*)?$") {
        unset req.http.Cookie;
        return (hash);
    }
    if (req.http.Cookie) {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|;\s*)(laravel_session|XSRF-TOKEN)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^;\s*", "");
        if (req.http.Cookie ~ "^\s*$") {
            unset req.http.Cookie;
        }
    }
    if (req.http.Authorization || req.http.Cookie) {
        return (pass);
    }
    return (hash);
}

sub vcl_backend_fetch {
    # A client that cannot take gzip gets a plain body from the backend
    # (Varnish would ask for gzip and gunzip it on the way out).
    if (!bereq.http.X-Client-Gzip) {
        unset bereq.http.Accept-Encoding;
    }
    unset bereq.http.X-Client-Gzip;
}

sub vcl_backend_response {
    set beresp.http.X-Laravel-Host = bereq.http.host;
    set beresp.http.X-Laravel-Url = bereq.url;
    if (bereq.url ~ "\.(css|js|png|jpe?g|gif|svg|ico|woff2?)(\?.*)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 1d;
        return (deliver);
    }
    if (beresp.http.Cache-Control ~ "public") {
        set beresp.http.X-Cacheable = "1";
        unset beresp.http.Set-Cookie;
    } else {
        set beresp.ttl = 120s;
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_deliver {
    unset resp.http.X-Laravel-Host;
    unset resp.http.X-Laravel-Url;
    if (resp.http.X-Cacheable) {
        unset resp.http.X-Cacheable;
        set resp.http.X-Cache = "cached";
    } else {
        set resp.http.X-Cache = "uncached";
    }
}
