# Imitates: the VCLs posted for Nextcloud/ownCloud behind Varnish:
# almost everything passed (WebDAV methods piped, remote.php/ocs/index.php
# passed), only the versioned core and apps assets cached, the
# oc_sessionPassphrase/nc_session cookies and the per-instance "oc*"
# cookie never stripped from dynamic requests but removed from assets,
# Authorization passed, websocket notify_push piped with its Upgrade,
# the .well-known redirects cached, Strict-Transport-Security added.
# Our own writing.
vcl 4.1;

backend nextcloud {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .first_byte_timeout = 3600s;
    .between_bytes_timeout = 3600s;
}

sub vcl_recv {
    if (req.http.Upgrade ~ "(?i)websocket") {
        return (pipe);
    }
    if (req.method ~ "^(PROPFIND|PROPPATCH|MKCOL|COPY|MOVE|LOCK|UNLOCK|REPORT|SEARCH)$") {
        return (pipe);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/(remote|public|status|index|ocs/v[12])\.php" || req.url ~ "^/(login|apps/[^/]+/api)") {
        return (pass);
    }
    if (req.url ~ "^/(core|apps/[^/]+|dist|static)/.*\.(css|js|svg|png|gif|woff2?|map)(\?v=[0-9a-f-]+)?$") {
        unset req.http.Cookie;
        unset req.http.Authorization;
        return (hash);
    }
    if (req.url ~ "^/\.well-known/(carddav|caldav|webfinger|nodeinfo)") {
        return (hash);
    }
    if (req.http.Authorization || req.http.Cookie ~ "(nc_session|oc_sessionPassphrase|oc[a-z0-9]{10,})") {
        return (pass);
    }
    return (hash);
}

sub vcl_pipe {
    if (req.http.Upgrade) {
        set bereq.http.Upgrade = req.http.Upgrade;
        set bereq.http.Connection = req.http.Connection;
    }
}

sub vcl_backend_response {
    if (bereq.url ~ "\.(css|js|svg|png|gif|woff2?|map)(\?v=[0-9a-f-]+)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 30d;
    }
}

sub vcl_deliver {
    set resp.http.Strict-Transport-Security = "max-age=15552000; includeSubDomains";
    set resp.http.X-Content-Type-Options = "nosniff";
}
