# Imitates: the "large file handling" sections of public templates
# (varnish-6.0 templates' "stream files larger than 10MB", download
# portals and podcast hosts): std.integer() of the backend's
# Content-Length deciding between normal caching, streaming into
# Transient and hit-for-miss for huge files (thresholds scaled down
# here), empty 200 answers (Content-Length 0, a PHP crash's blank page)
# never cached, Range requests for media passed to the origin, the
# origin's length kept as X-Origin-Length, and the delivered size
# reported from resp.http.Content-Length. Our own writing.
vcl 4.1;

import std;

backend media {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.http.Range && req.url ~ "\.(mp3|mp4|m4a|webm|ogg)(\?.*)?$") {
        return (pass);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    set beresp.http.X-Origin-Length = beresp.http.Content-Length;
    if (beresp.status == 200 && beresp.http.Content-Length == "0") {
        set beresp.ttl = 5s;
        set beresp.uncacheable = true;
        set beresp.http.X-Blank = "yes";
        return (deliver);
    }
    if (std.integer(beresp.http.Content-Length, 0) > 100000) {
        set beresp.uncacheable = true;
        set beresp.ttl = 60s;
        return (deliver);
    }
    if (std.integer(beresp.http.Content-Length, 0) > 1000) {
        set beresp.do_stream = true;
        set beresp.storage = storage.Transient;
        set beresp.http.X-Stored = "transient";
    }
}

sub vcl_deliver {
    if (resp.http.Content-Length) {
        set resp.http.X-Size = resp.http.Content-Length + " bytes";
    } else {
        set resp.http.X-Size = "unknown";
    }
}
