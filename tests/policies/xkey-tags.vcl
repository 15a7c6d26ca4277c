# Imitates: the surrogate-key setups built on varnish-modules' xkey
# (its README, the Magento/Shopware/Drupal xkey modules, Fastly-style
# Surrogate-Key migrations): the backend's tag header copied to xkey in
# vcl_backend_response (commas turned to spaces), PURGE with
# xkey-purge for a hard purge and X-Xkey-Softpurge for xkey.softpurge(),
# the count reported in a header and a synth body, an ACL allowing only
# the application, the tag headers hidden from visitors unless
# X-Debug-Tags is asked for, long TTLs because invalidation is exact.
# Our own writing.
vcl 4.1;

import xkey;
import std;

backend app {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl invalidators {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ invalidators) {
            return (synth(403, "Forbidden"));
        }
        if (req.http.X-Xkey-Softpurge) {
            set req.http.n-gone = xkey.softpurge(req.http.X-Xkey-Softpurge);
        } elsif (req.http.xkey-purge) {
            set req.http.n-gone = xkey.purge(req.http.xkey-purge);
        } else {
            return (purge);
        }
        return (synth(200, "Invalidated " + req.http.n-gone + " objects"));
    }
    if (req.method == "BAN") {
        if (client.ip !~ invalidators) {
            return (synth(403, "Forbidden"));
        }
        if (req.http.Cache-Tags) {
            set req.http.n-gone = xkey.softpurge(regsuball(req.http.Cache-Tags, ",", " "));
            return (synth(200, "Soft-invalidated " + req.http.n-gone));
        }
        return (synth(400, "Cache-Tags required"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization) {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    if (beresp.http.X-Cache-Tags && !beresp.http.xkey) {
        set beresp.http.xkey = regsuball(beresp.http.X-Cache-Tags, ",", " ");
    }
    if (bereq.url ~ "^/static/") {
        set beresp.http.xkey = beresp.http.xkey + " asset";
    }
    if (beresp.ttl > 0s && beresp.ttl < 1h && beresp.status == 200) {
        set beresp.ttl = 1h;
    }
    set beresp.grace = 1h;
    unset beresp.http.Set-Cookie;
}

sub vcl_deliver {
    set resp.http.X-Invalidated = req.http.n-gone;
    if (!req.http.X-Debug-Tags) {
        unset resp.http.xkey;
        unset resp.http.X-Cache-Tags;
        unset resp.http.Cache-Tags;
        unset resp.http.X-Magento-Tags;
    }
}
