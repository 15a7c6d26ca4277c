# Lurker-friendly bans: objects carry their URL and host in headers, a BAN
# request bans by them (from localhost only), or by the cache channel the
# application tags responses with; the helper headers never reach clients.
vcl 4.1;

backend default {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

acl banners {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "BAN") {
        if (client.ip !~ banners) {
            return (synth(403, "Forbidden"));
        }
        if (req.http.X-Purge-CC) {
            ban("obj.http.X-Cache-Channel ~ " + req.http.X-Purge-CC);
            return (synth(200, "Ban added"));
        }
        if (!req.http.X-Ban-Url) {
            return (synth(400, "X-Ban-Url or X-Purge-CC is missing"));
        }
        ban("obj.http.x-host == " + req.http.Host + " && obj.http.x-url ~ " + req.http.X-Ban-Url);
        return (synth(200, "Ban added"));
    }
}

sub vcl_backend_response {
    set beresp.http.x-url = bereq.url;
    set beresp.http.x-host = bereq.http.host;
}

sub vcl_deliver {
    unset resp.http.x-url;
    unset resp.http.x-host;
    unset resp.http.X-Cache-Channel;
}
