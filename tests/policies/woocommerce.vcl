# Imitates: the WooCommerce VCLs of WordPress hosts (Varnish 6.4+ with
# the bundled vmod cookie, as in the "WordPress + WooCommerce" templates
# of managed WP platforms): cookie.filter() of the tracking cookies named
# one by one, cookie.keep_re() of the cookies WooCommerce reads
# (woocommerce_*, wp_woocommerce_session_*, the login cookie),
# cart/checkout/my-account and ?add-to-cart= passed, a
# pass while the cart is filled, wc-ajax passed, the cleaned Cookie
# re-set with cookie.get_string(), the REST API cached a minute, a purge
# ACL with X-Purge-Method regex bans, Range requests (downloads) passed,
# and Set-Cookie kept only where WooCommerce needs it. Our own writing.
vcl 4.1;

import cookie;
import std;

backend wordpress {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purge {
    "127.0.0.1";
    "localhost";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (!client.ip ~ purge) {
            return (synth(405, "Not allowed."));
        }
        if (req.http.X-Purge-Method == "regex") {
            ban("req.url ~ " + req.url + " && req.http.host == " + req.http.host);
            return (synth(200, "Banned"));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(cart|checkout|my-account|wp-admin|wp-login\.php|account|admin)" ||
        req.url ~ "[?&](add-to-cart|wc-ajax|remove_item|undo_item)=") {
        return (pass);
    }
    if (req.http.Range) {
        return (pass);
    }
    if (req.url ~ "\.(css|js|png|gif|jpe?g|svg|webp|woff2?)(\?.*)?$") {
        unset req.http.Cookie;
        return (hash);
    }
    cookie.parse(req.http.Cookie);
    cookie.filter("_ga,_gid,_gat,__utma,__utmb,__utmc,__utmz,_fbp,_hjid");
    if (cookie.isset("woocommerce_items_in_cart") && cookie.get("woocommerce_items_in_cart") != "0") {
        return (pass);
    }
    cookie.keep_re("^(woocommerce_.*|wp_woocommerce_session_.*|wordpress_logged_in_.*|PHPSESSID)$");
    set req.http.Cookie = cookie.get_string();
    if (req.http.Cookie == "") {
        unset req.http.Cookie;
    }
    if (req.http.Cookie ~ "wordpress_logged_in_" || req.http.Authorization) {
        return (pass);
    }
    if (req.http.Cookie) {
        set req.http.X-Woo-Session = req.http.Cookie;
        unset req.http.Cookie;
    }
    return (hash);
}

sub vcl_hash {
    if (req.http.X-Woo-Session) {
        hash_data(req.http.X-Woo-Session);
    }
}

sub vcl_backend_fetch {
    if (bereq.http.X-Woo-Session) {
        set bereq.http.Cookie = bereq.http.X-Woo-Session;
        unset bereq.http.X-Woo-Session;
    }
}

sub vcl_backend_response {
    if (bereq.url ~ "^/wp-json/") {
        set beresp.ttl = 1m;
    }
    if (bereq.url !~ "^/(cart|checkout|my-account)" && beresp.ttl > 0s) {
        unset beresp.http.Set-Cookie;
    }
    set beresp.grace = 12h;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
