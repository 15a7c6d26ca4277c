# Imitates: the WordPress VCLs shipped with hosting templates and the
# "Proxy Cache Purge" plugin's recommendations: PURGE with
# X-Purge-Method: regex as a ban on the URL, admin/login/preview/feeds
# passed, logged-in and comment cookies passed, every other cookie
# stripped, static files cached a long time, X-Cache on delivery.
# Our own writing.
vcl 4.0;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 5s;
    .first_byte_timeout = 60s;
}

acl purge {
    "localhost";
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    set req.http.X-Real-IP = client.ip;
    if (req.method == "PURGE") {
        if (!client.ip ~ purge) {
            return (synth(405, "This IP is not allowed to send PURGE requests."));
        }
        if (req.http.X-Purge-Method == "regex") {
            ban("req.url ~ " + req.url + " && req.http.host ~ " + req.http.host);
            return (synth(200, "Banned."));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (!client.ip ~ purge) {
            return (synth(405, "Not allowed."));
        }
        ban("req.http.host == " + req.http.host + " && req.url ~ " + req.http.X-Purge-Regex);
        return (synth(200, "Ban added"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "wp-admin|wp-login|preview=true|xmlrpc.php|/feed/|/cart|/my-account|/checkout") {
        return (pass);
    }
    if (req.http.Authorization) {
        return (pass);
    }
    if (req.url ~ "\.(css|js|png|gif|jp(e)?g|swf|ico|woff2?|svg)(\?.*)?$") {
        unset req.http.cookie;
        return (hash);
    }
    if (req.http.Cookie ~ "wordpress_logged_in_|wp-postpass_|comment_author_|woocommerce_items_in_cart") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    if (bereq.url ~ "wp-(login|admin)" || bereq.url ~ "preview=true") {
        set beresp.uncacheable = true;
        set beresp.ttl = 120s;
        return (deliver);
    }
    if (bereq.url ~ "\.(css|js|png|gif|jp(e)?g|swf|ico|woff2?|svg)(\?.*)?$") {
        unset beresp.http.set-cookie;
        set beresp.ttl = 7d;
    }
    if (beresp.status == 404 || beresp.status >= 500) {
        set beresp.ttl = 10s;
    }
    set beresp.grace = 12h;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    set resp.http.X-Cache-Hits = obj.hits;
    unset resp.http.X-Powered-By;
}
