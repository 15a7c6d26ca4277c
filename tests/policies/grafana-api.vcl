# Imitates: the API-caching VCLs written for Grafana and dashboards
# (read-mostly JSON APIs behind Varnish): /api/live and other websockets
# piped, the grafana_session cookie and Authorization put into the hash
# (per-user caching of a read API) instead of a pass, /api/ answers capped
# to a short TTL, Vary on Accept kept, the public dashboard assets
# (/public/) cacheable for a day, /api/health and /health answered from
# the backend's health via std.healthy(), writes passed and followed by
# a ban of the same API path. Our own writing.
vcl 4.1;

import std;

probe grafana_health {
    .url = "/__probe";
    .expected_response = 200;
    .interval = 15s;
    .timeout = 3s;
    .window = 4;
    .threshold = 2;
    .initial = 2;
}

backend grafana {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .probe = grafana_health;
}

sub vcl_recv {
    if (req.url ~ "^/(api/)?health$") {
        if (!std.healthy(req.backend_hint)) {
            return (synth(503, "Backend sick"));
        }
        return (synth(200, "OK"));
    }
    if (req.http.Upgrade ~ "(?i)websocket" || req.url ~ "^/api/live/") {
        return (pipe);
    }
    if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE") {
        if (req.url ~ "^/api/") {
            ban("obj.http.X-Api-Path == " + regsub(req.url, "\?.*$", ""));
        }
        return (pass);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/public/") {
        unset req.http.Cookie;
        unset req.http.Authorization;
        return (hash);
    }
    if (req.url ~ "^/api/") {
        if (req.http.Cookie ~ "grafana_session=") {
            set req.http.X-Session = regsub(req.http.Cookie, "^.*grafana_session=([^;]+).*$", "\1");
        }
        return (hash);
    }
    if (req.http.Authorization || req.http.Cookie) {
        return (pass);
    }
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    hash_data(req.http.host);
    if (req.http.Authorization) {
        hash_data(req.http.Authorization);
    }
    if (req.http.X-Session) {
        hash_data(req.http.X-Session);
    }
    return (lookup);
}

sub vcl_pipe {
    if (req.http.Upgrade) {
        set bereq.http.Upgrade = req.http.Upgrade;
        set bereq.http.Connection = "upgrade";
    }
    return (pipe);
}

sub vcl_backend_fetch {
    unset bereq.http.X-Session;
}

sub vcl_backend_response {
    if (bereq.url ~ "^/api/") {
        set beresp.http.X-Api-Path = regsub(bereq.url, "\?.*$", "");
        if (beresp.ttl > 30s) {
            set beresp.ttl = 30s;
        }
        set beresp.grace = 10s;
    }
    if (beresp.status >= 500) {
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
    }
}

sub vcl_deliver {
    unset resp.http.X-Api-Path;
    if (req.http.X-Session || req.http.Authorization) {
        set resp.http.X-Cache-Status = "per-user";
    } else {
        set resp.http.X-Cache-Status = "shared";
    }
}
