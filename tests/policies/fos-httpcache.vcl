# Imitates: FOSHttpCache's Varnish configuration for Symfony
# (resources/config/varnish/fos_*.vcl): an invalidators ACL; BAN with
# X-Host/X-Url/X-Content-Type/X-Cache-Tags turned into a lurker-friendly
# ban on obj.http.*; PURGE; REFRESH as hash_always_miss; user-context
# hashing (the request restarted after a lookup of the user's hash, which
# is then in the cache key through Vary); the debug X-Cache header.
# Our own writing.
vcl 4.1;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl invalidators {
    "127.0.0.1";
}

sub vcl_recv {
    call fos_ban_recv;
    call fos_purge_recv;
    call fos_refresh_recv;
    call fos_user_context_recv;
}

sub fos_ban_recv {
    if (req.method == "BAN") {
        if (client.ip !~ invalidators) {
            return (synth(405, "Not allowed"));
        }
        if (req.http.X-Cache-Tags) {
            ban("obj.http.X-Host ~ " + req.http.X-Host
                + " && obj.http.X-Url ~ " + req.http.X-Url
                + " && obj.http.content-type ~ " + req.http.X-Content-Type
                + " && obj.http.X-Cache-Tags ~ " + req.http.X-Cache-Tags);
        } else {
            ban("obj.http.X-Host ~ " + req.http.X-Host
                + " && obj.http.X-Url ~ " + req.http.X-Url
                + " && obj.http.content-type ~ " + req.http.X-Content-Type);
        }
        return (synth(200, "Banned"));
    }
}

sub fos_purge_recv {
    if (req.method == "PURGE" || req.method == "PURGEKEYS") {
        if (client.ip !~ invalidators) {
            return (synth(405, "Not allowed"));
        }
        return (purge);
    }
}

sub fos_refresh_recv {
    if (req.method == "REFRESH") {
        if (client.ip !~ invalidators) {
            return (synth(405, "Not allowed"));
        }
        set req.method = "GET";
        set req.hash_always_miss = true;
    }
}

sub fos_user_context_recv {
    if (req.restarts == 0 && req.http.accept ~ "application/vnd.fos.user-context-hash") {
        return (synth(400));
    }
    if (req.restarts == 0 && (req.http.cookie || req.http.authorization)
        && (req.method == "GET" || req.method == "HEAD")) {
        set req.http.x-fos-original-url = req.url;
        set req.http.x-fos-original-accept = req.http.accept;
        set req.http.accept = "application/vnd.fos.user-context-hash";
        set req.url = "/_fos_user_context_hash";
        return (hash);
    }
    if (req.restarts > 0 && req.http.accept == "application/vnd.fos.user-context-hash") {
        set req.url = req.http.x-fos-original-url;
        set req.http.accept = req.http.x-fos-original-accept;
        unset req.http.x-fos-original-url;
        unset req.http.x-fos-original-accept;
        if (req.http.cookie ~ "PHPSESSID") {
            return (pass);
        }
        return (hash);
    }
    if (req.http.authorization) {
        return (pass);
    }
}

sub vcl_hash {
    if (req.http.accept == "application/vnd.fos.user-context-hash") {
        hash_data(req.http.cookie);
        hash_data(req.http.authorization);
    }
}

sub vcl_backend_response {
    set beresp.http.X-Url = bereq.url;
    set beresp.http.X-Host = bereq.http.host;
    if (bereq.http.accept ~ "application/vnd.fos.user-context-hash" && beresp.status >= 500) {
        return (abandon);
    }
}

sub vcl_deliver {
    if (req.restarts == 0 && resp.http.content-type ~ "application/vnd.fos.user-context-hash") {
        set req.http.X-User-Context-Hash = resp.http.X-User-Context-Hash;
        return (restart);
    }
    if (resp.http.Vary ~ "X-User-Context-Hash") {
        set resp.http.Vary = regsub(resp.http.Vary, "(?i),? *X-User-Context-Hash *", "");
        set resp.http.Vary = regsub(resp.http.Vary, "^, *", "");
    }
    if (resp.http.X-Cache-Debug) {
        if (obj.hits > 0) {
            set resp.http.X-Cache = "HIT";
        } else {
            set resp.http.X-Cache = "MISS";
        }
    }
    unset resp.http.X-Url;
    unset resp.http.X-Host;
    unset resp.http.X-Cache-Tags;
}
