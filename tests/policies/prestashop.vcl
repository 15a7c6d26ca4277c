# Imitates: the VCLs published for PrestaShop 1.6/1.7/8 (the community
# "prestashop-varnish" templates and the Varnish modules' sample files):
# the admin folder and the customer area passed, the PrestaShop-<hash>
# cookie (cart, customer) forcing a pass only when a customer is logged
# in or a cart is open, the rest of the cookies stripped, static assets
# and the img/ folders cookieless with a long TTL, BAN from an ACL with
# X-Ban-Url, a "Cache-Control: no-cache" from the client honoured only
# from the office, X-Cache and X-Cache-Hits headers, Set-Cookie dropped
# for anonymous pages. Our own writing.
vcl 4.1;

import std;

backend prestashop {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 5s;
    .first_byte_timeout = 90s;
    .between_bytes_timeout = 5s;
}

acl office {
    "127.0.0.0"/24;
}

sub vcl_recv {
    if (req.method == "BAN") {
        if (!client.ip ~ office) {
            return (synth(405, "Not allowed"));
        }
        if (req.http.X-Ban-Url) {
            ban("req.http.host == " + req.http.host + " && req.url ~ " + req.http.X-Ban-Url);
            return (synth(200, "Banned " + req.http.X-Ban-Url));
        }
        ban("req.http.host == " + req.http.host);
        return (synth(200, "Banned host"));
    }
    if (req.method == "PURGE") {
        if (!client.ip ~ office) {
            return (synth(405, "Not allowed"));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(admin[0-9a-z]*|module/[a-z]+/(ajax|payment|validation))" ||
        req.url ~ "(?i)(order|cart|my-account|login|password-recovery|identity|addresses|history)") {
        return (pass);
    }
    if (req.url ~ "(?i)\.(css|js|png|gif|jpe?g|webp|svg|ico|woff2?|ttf|eot)(\?.*)?$" ||
        req.url ~ "^/(img|themes/[^/]+/assets|modules/[^/]+/views)/") {
        unset req.http.Cookie;
        return (hash);
    }
    if (req.http.Cookie ~ "PrestaShop-[a-f0-9]+=" && req.http.Cookie ~ "(id_customer|id_cart)") {
        return (pass);
    }
    if (req.http.Cache-Control ~ "no-cache" && client.ip ~ office) {
        set req.hash_always_miss = true;
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
    if (req.http.X-Forwarded-Proto) {
        hash_data(req.http.X-Forwarded-Proto);
    }
    return (lookup);
}

sub vcl_backend_response {
    if (bereq.url ~ "(?i)\.(css|js|png|gif|jpe?g|webp|svg|ico|woff2?|ttf|eot)(\?.*)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 7d;
        return (deliver);
    }
    if (beresp.status >= 400 && beresp.status != 404) {
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.http.Set-Cookie ~ "PrestaShop-") {
        set beresp.uncacheable = true;
        set beresp.ttl = 120s;
        return (deliver);
    }
    unset beresp.http.Set-Cookie;
    if (beresp.ttl < 1h && beresp.status == 200) {
        set beresp.ttl = 1h;
    }
    set beresp.grace = 2h;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
        set resp.http.X-Cache-Hits = obj.hits;
    } else {
        set resp.http.X-Cache = "MISS";
    }
    unset resp.http.X-Powered-By;
}
