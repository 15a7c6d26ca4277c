# Imitates: Nexcess Turpentine's generated VCL for Magento 1 (its
# version-4.0 template): the admin frontname and API piped or passed,
# the frontend cookie carried through hash for ESI blocks marked
# "private", ESI turned on for the blocks the app tags, esi_level > 0
# requests keyed by their own query parameters, a "do not cache" URL
# list, static files normalised and cookieless, crawler user agents
# given no session, the Magento store/currency cookies in the hash,
# X-Turpentine-* headers hidden on delivery, and a ban endpoint for the
# module's cache flushes. Our own writing.
vcl 4.0;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .first_byte_timeout = 300s;
    .between_bytes_timeout = 300s;
}

acl crawler_acl {
    "127.0.0.2";
}

acl debug_acl {
    "127.0.0.1";
}

sub generate_session {
    if (req.url ~ ".*[&?]SID=([^&]+).*") {
        set req.http.X-Varnish-Faked-Session = regsub(req.url, ".*[&?]SID=([^&]+).*", "frontend=\1");
    } else {
        set req.http.X-Varnish-Faked-Session = "frontend=crawler-session";
    }
    if (req.http.Cookie) {
        set req.http.Cookie = req.http.X-Varnish-Faked-Session + "; " + req.http.Cookie;
    } else {
        set req.http.Cookie = req.http.X-Varnish-Faked-Session;
    }
}

sub vcl_recv {
    if (req.method == "BAN") {
        if (client.ip ~ debug_acl) {
            ban("obj.http.X-Varnish-Host ~ " + regsub(req.http.host, "\.", "\\.") + " && obj.http.X-Varnish-URL ~ " + regsub(req.url, "^/+", "/"));
            return (synth(200, "Banned"));
        }
        return (synth(403, "Forbidden"));
    }
    if (req.restarts == 0) {
        if (req.http.X-Forwarded-For) {
            set req.http.X-Forwarded-For = req.http.X-Forwarded-For + ", " + client.ip;
        } else {
            set req.http.X-Forwarded-For = client.ip;
        }
    }
    if (req.method !~ "^(GET|HEAD)$") {
        return (pass);
    }
    if (req.url ~ "^/(index\.php/)?(admin|api|checkout|customer|wishlist|account)") {
        return (pass);
    }
    set req.http.X-Turpentine-Secret-Handshake = "1";
    if (req.url ~ "^/(media|skin|js|static)/") {
        unset req.http.Cookie;
        unset req.http.X-Turpentine-Secret-Handshake;
        return (hash);
    }
    if (!req.http.Cookie ~ "frontend=") {
        if (client.ip ~ crawler_acl || req.http.User-Agent ~ "(?i)(bot|crawler|spider)") {
            call generate_session;
        }
    }
    if (req.url ~ "^/esi/" && req.esi_level == 0) {
        return (synth(403, "External ESI requests are not allowed"));
    }
    if (req.http.Cookie ~ "frontend=" && req.url ~ "(?i)(checkout/cart|customer/account|sales/order)") {
        return (pass);
    }
    if (req.url ~ "[?&](___store|___from_store)=") {
        set req.http.X-Store = regsub(req.url, ".*[?&]___store=([^&]+).*", "\1");
    }
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.Host) {
        hash_data(req.http.Host);
    }
    hash_data(req.http.Ssl-Offloaded);
    if (req.http.X-Store) {
        hash_data(req.http.X-Store);
    }
    if (req.http.Cookie ~ "(store|currency)=") {
        hash_data(regsuball(req.http.Cookie, "^.*?((store|currency)=[^;]*);*.*$", "\1"));
    }
    if (req.esi_level > 0 && req.url ~ "/access/private/") {
        hash_data(regsub(req.http.Cookie, "^.*?frontend=([^;]*);*.*$", "\1"));
    }
    return (lookup);
}

sub vcl_backend_response {
    set beresp.http.X-Varnish-Host = bereq.http.host;
    set beresp.http.X-Varnish-URL = bereq.url;
    if (beresp.http.Surrogate-Control ~ "ESI/1.0" || beresp.http.X-Turpentine-Esi == "1") {
        set beresp.do_esi = true;
        unset beresp.http.Surrogate-Control;
    }
    if (bereq.url ~ "^/(media|skin|js|static)/") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 28800s;
        return (deliver);
    }
    if (beresp.status != 200 && beresp.status != 404) {
        set beresp.ttl = 15s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    unset beresp.http.Set-Cookie;
    if (beresp.ttl < 3600s) {
        set beresp.ttl = 3600s;
    }
    set beresp.grace = 15s;
}

sub vcl_deliver {
    if (req.http.X-Varnish-Faked-Session) {
        set resp.http.Set-Cookie = req.http.X-Varnish-Faked-Session + "; expires=Thu, 01 Jan 2037 00:00:00 GMT; path=/";
    }
    if (client.ip ~ debug_acl) {
        set resp.http.X-Varnish-Hits = obj.hits;
        set resp.http.X-Varnish-Esi-Level = req.esi_level;
    } else {
        unset resp.http.X-Varnish;
        unset resp.http.Via;
        unset resp.http.X-Powered-By;
    }
    unset resp.http.X-Varnish-Host;
    unset resp.http.X-Varnish-URL;
    unset resp.http.X-Turpentine-Esi;
}
