# Imitates: the "retry on 5xx" VCLs of Varnish 4-7 (mailing-list and
# blog recipes that restart a request when the backend fails, moving to
# a spare backend and finally a friendly error page): vcl_deliver
# restarting on 5xx while req.restarts is low, req.backend_hint switched
# to the spare on a restart, hash_always_miss on retries so a cached
# error is not served again, X-Restarts reported, an exhausted retry
# rendered by vcl_synth as a maintenance page; vcl_backend_response
# retries a 503 once with return (retry) as well. Our own writing.
vcl 4.1;

import std;

backend primary {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 1s;
}

backend spare {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 2s;
}

sub vcl_recv {
    if (req.restarts == 0) {
        set req.backend_hint = primary;
    } else {
        set req.backend_hint = spare;
        set req.hash_always_miss = true;
        set req.http.X-Retry = req.restarts;
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
    if (beresp.status == 503 && bereq.retries < 1) {
        return (retry);
    }
    if (beresp.status >= 500) {
        set beresp.ttl = 0s;
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_deliver {
    if (resp.status >= 500 && resp.status < 600) {
        if (req.restarts < 2) {
            return (restart);
        }
        return (synth(503, "Maintenance"));
    }
    set resp.http.X-Restarts = req.restarts;
}

sub vcl_synth {
    if (resp.status == 503 && req.restarts > 0) {
        set resp.http.Content-Type = "text/html; charset=utf-8";
        set resp.http.Retry-After = "30";
        synthetic({"<html><body><h1>Back soon</h1><p>Tried "} + (req.restarts + 1) +
                  {" times.</p></body></html>
"});
        return (deliver);
    }
}
