# Imitates: the VCL Shopware 6.5+/6.7 ships for its reverse HTTP cache
# (the shopware/varnish-shopware image and the hosting guide): a purgers
# ACL; PURGE with an xkey header turned into xkey.purge() and a synth
# naming the count, else a hash purge; BAN on req.url; unknown methods
# piped; checkout/account/admin/api passed; vmod cookie reading the
# sw-cache-hash, sw-currency and sw-states cookies into headers that
# feed vcl_hash and a vcl_hit pass; tracking parameters stripped and the
# query sorted; Surrogate-Capability announced; long grace, ESI on the
# backend's Surrogate-Control, hit-for-miss for dynamic bypasses, gzip
# for text; client caching disabled for pages and the invalidation
# headers, X-Varnish and Via hidden. Our own writing.
vcl 4.1;

import std;
import xkey;
import cookie;

backend storefront {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purgers {
    "127.0.0.1";
    "localhost";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        if (req.http.xkey-purge) {
            set req.http.n-gone = xkey.purge(req.http.xkey-purge);
            return (synth(200, "Invalidated " + req.http.n-gone + " objects"));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        ban("req.url ~ " + req.url);
        return (synth(200, "BAN URLs containing (" + req.url + ") done."));
    }
    if (req.method != "GET" && req.method != "HEAD" && req.method != "PUT" &&
        req.method != "POST" && req.method != "PATCH" && req.method != "TRACE" &&
        req.method != "OPTIONS" && req.method != "DELETE") {
        return (pipe);
    }
    if (req.http.Authorization) {
        return (pass);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(checkout|account|admin|api)(/.*)?$") {
        return (pass);
    }
    if (req.url ~ "^/(media|thumbnail|theme|bundles|static)/") {
        unset req.http.Cookie;
    }
    cookie.parse(req.http.Cookie);
    if (!req.http.sw-cache-hash) {
        set req.http.sw-cache-hash = cookie.get("sw-cache-hash");
    }
    set req.http.currency = cookie.get("sw-currency");
    set req.http.states = cookie.get("sw-states");
    if (req.url == "/widgets/checkout/info" && (req.http.sw-cache-hash == "" ||
        (cookie.isset("sw-states") && req.http.states !~ "cart-filled"))) {
        return (synth(204, ""));
    }
    if (req.url ~ "(\?|&)(utm_source|utm_medium|utm_campaign|utm_content|utm_term|gclid|fbclid|msclkid|mc_cid|mc_eid|pk_campaign|pk_kwd|mtm_source|_ga|_gl|yclid|dclid)=") {
        set req.url = regsuball(req.url, "(utm_source|utm_medium|utm_campaign|utm_content|utm_term|gclid|fbclid|msclkid|mc_cid|mc_eid|pk_campaign|pk_kwd|mtm_source|_ga|_gl|yclid|dclid)=[A-Za-z0-9\-\_\.\~%]+&?", "");
    }
    set req.url = regsub(req.url, "(\?|\?&|&)$", "");
    set req.url = std.querysort(req.url);
    set req.http.Surrogate-Capability = "shopware=ESI/1.0";
    if (req.http.X-Forwarded-For) {
        set req.http.X-Forwarded-For = req.http.X-Forwarded-For + ", " + client.ip;
    } else {
        set req.http.X-Forwarded-For = client.ip;
    }
    return (hash);
}

sub vcl_hash {
    if (req.http.sw-cache-hash != "") {
        hash_data("+context=" + req.http.sw-cache-hash);
    } elseif (req.http.currency != "") {
        hash_data("+currency=" + req.http.currency);
    }
}

sub vcl_hit {
    if (req.http.states) {
        if (req.http.states ~ "logged-in" && obj.http.sw-invalidation-states ~ "logged-in") {
            return (pass);
        }
        if (req.http.states ~ "cart-filled" && obj.http.sw-invalidation-states ~ "cart-filled") {
            return (pass);
        }
    }
}

sub vcl_backend_fetch {
    unset bereq.http.currency;
    unset bereq.http.states;
}

sub vcl_backend_response {
    set beresp.grace = 3d;
    unset beresp.http.X-Powered-By;
    unset beresp.http.Server;
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    if (beresp.http.sw-dynamic-cache-bypass == "1" || beresp.http.Cache-Control ~ "private") {
        set beresp.ttl = 1s;
        set beresp.uncacheable = true;
        unset beresp.http.sw-dynamic-cache-bypass;
        return (deliver);
    }
    # Shopware gzips "text" too; here only scripts: a miss gunzipped for
    # a plain client is sent chunked or with Content-Length depending on
    # whether the fetch has finished, which no recording can pin down.
    if (bereq.url ~ "\.js$" || beresp.http.Content-Type ~ "javascript") {
        set beresp.do_gzip = true;
    }
    if (beresp.ttl > 0s && (bereq.method == "GET" || bereq.method == "HEAD")) {
        unset beresp.http.Set-Cookie;
    }
}

sub vcl_deliver {
    if (resp.http.Cache-Control !~ "private" && req.url !~ "^/(theme|media|thumbnail|bundles|static|store-api)/") {
        set resp.http.Pragma = "no-cache";
        set resp.http.Expires = "-1";
        set resp.http.Cache-Control = "no-store, no-cache, must-revalidate, max-age=0";
    }
    unset resp.http.sw-invalidation-states;
    unset resp.http.xkey;
    unset resp.http.X-Varnish;
    unset resp.http.Via;
    unset resp.http.Link;
}
