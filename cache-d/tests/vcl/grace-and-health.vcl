# Grace, the Varnish 6+/7 way: objects keep an hour of grace, but while
# the backend is healthy a request accepts only a few seconds of staleness
# (req.grace); when it is sick, the whole hour.
vcl 4.1;

import std;

backend default {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

sub vcl_recv {
    if (std.healthy(req.backend_hint)) {
        set req.grace = 2s;
    }
}

sub vcl_backend_response {
    set beresp.grace = 1h;
}

sub vcl_hit {
    if (obj.ttl < 0s) {
        set req.http.X-Grace = "stale by " + (0s - obj.ttl);
    }
}

sub vcl_deliver {
    if (req.http.X-Grace) {
        set resp.http.X-Grace = req.http.X-Grace;
    }
    set resp.http.X-Hits = obj.hits;
}
