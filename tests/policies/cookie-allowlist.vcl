# Imitates: the cookie handling of Varnish 6.4+ VCLs built on the bundled
# vmod cookie (Varnish's docs "Removing cookies", the newer Magento 2
# template): cookie.parse(), cookie.keep_re() for the session and
# currency cookies the application reads, the rest dropped; the
# filtered Cookie header in the hash; a pass for logged-in sessions;
# analytics cookies never reaching the backend. Our own writing.
vcl 4.1;

import cookie;
import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/static/") {
        unset req.http.Cookie;
        return (hash);
    }
    if (req.http.Cookie) {
        cookie.parse(req.http.Cookie);
        cookie.keep_re("^(PHPSESSID|X-Magento-Vary|currency|SESS[a-z0-9]+)$");
        set req.http.Cookie = cookie.get_string();
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
    if (cookie.isset("PHPSESSID") && req.url ~ "^/(account|checkout|cart)") {
        return (pass);
    }
    if (req.http.Authorization) {
        return (pass);
    }
    return (hash);
}

sub vcl_hash {
    if (req.http.Cookie) {
        hash_data(req.http.Cookie);
    }
}

sub vcl_backend_response {
    if (beresp.http.Set-Cookie && bereq.url !~ "^/(account|checkout|cart)") {
        unset beresp.http.Set-Cookie;
    }
    set beresp.grace = 2m;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
