# Imitates: Sylius's Varnish setup with FOSHttpCacheBundle's user context
# (fos_user_context.vcl included from a Sylius-flavoured default.vcl):
# the context hash looked up first with the session cookie and
# Authorization, the restart carrying X-User-Context-Hash, the hash put
# in the cache key with hash_data() instead of Vary, only the session and
# remember-me cookies kept, the channel/locale from the path, the hash
# response cached per session, admin and checkout passed, and the
# Sylius-specific "X-Reverse-Proxy-TTL" header turned into the TTL.
# Our own writing.
vcl 4.1;

import std;

backend sylius {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl invalidators {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ invalidators) {
            return (synth(405, "Not allowed"));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (client.ip !~ invalidators) {
            return (synth(405, "Not allowed"));
        }
        if (req.http.X-Cache-Tags) {
            ban("obj.http.X-Cache-Tags ~ " + req.http.X-Cache-Tags);
        } else {
            ban("obj.http.X-Url ~ " + req.url);
        }
        return (synth(200, "Banned"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(admin|checkout|[a-z]{2}_[A-Z]{2}/(checkout|account))") {
        return (pass);
    }
    if (req.http.Cookie) {
        set req.http.Cookie = ";" + req.http.Cookie;
        set req.http.Cookie = regsuball(req.http.Cookie, "; +", ";");
        set req.http.Cookie = regsuball(req.http.Cookie, ";(PHPSESSID|REMEMBERME)=", "; \1=");
        set req.http.Cookie = regsuball(req.http.Cookie, ";[^ ][^;]*", "");
        set req.http.Cookie = regsuball(req.http.Cookie, "^[; ]+|[; ]+$", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
    if (req.restarts == 0) {
        unset req.http.X-User-Context-Hash;
        if (req.http.Cookie || req.http.Authorization) {
            set req.http.X-Original-Url = req.url;
            set req.http.X-Original-Accept = req.http.Accept;
            set req.http.Accept = "application/vnd.fos.user-context-hash";
            set req.url = "/_fos_user_context_hash";
            return (hash);
        }
    } else if (req.http.X-Original-Url) {
        set req.url = req.http.X-Original-Url;
        unset req.http.X-Original-Url;
        if (req.http.X-Original-Accept) {
            set req.http.Accept = req.http.X-Original-Accept;
        } else {
            unset req.http.Accept;
        }
        unset req.http.X-Original-Accept;
    }
    if (req.http.Authorization) {
        return (pass);
    }
    return (hash);
}

sub vcl_hash {
    if (req.url == "/_fos_user_context_hash") {
        hash_data(req.http.Cookie);
        hash_data(req.http.Authorization);
    } else if (req.http.X-User-Context-Hash) {
        hash_data(req.http.X-User-Context-Hash);
    }
}

sub vcl_backend_fetch {
    if (bereq.url != "/_fos_user_context_hash") {
        unset bereq.http.Cookie;
    }
}

sub vcl_backend_response {
    set beresp.http.X-Url = bereq.url;
    if (beresp.http.X-Reverse-Proxy-TTL) {
        set beresp.ttl = std.duration(beresp.http.X-Reverse-Proxy-TTL + "s", 0s);
        unset beresp.http.X-Reverse-Proxy-TTL;
    }
    if (bereq.url == "/_fos_user_context_hash" && beresp.status >= 500) {
        return (abandon);
    }
    if (beresp.http.Set-Cookie) {
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_deliver {
    if (req.restarts == 0 && req.url == "/_fos_user_context_hash" &&
        resp.http.Content-Type ~ "application/vnd.fos.user-context-hash") {
        set req.http.X-User-Context-Hash = resp.http.X-User-Context-Hash;
        return (restart);
    }
    if (req.http.X-User-Context-Hash) {
        set resp.http.X-User-Context = "hashed";
    }
    unset resp.http.X-Url;
    unset resp.http.X-Cache-Tags;
    unset resp.http.X-Magento-Tags;
    unset resp.http.Cache-Tags;
    unset resp.http.xkey;
}
