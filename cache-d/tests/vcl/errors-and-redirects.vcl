# Redirects through vcl_synth, branded error pages, retries of a failing
# backend, and a restart that serves a fallback page for 404s: the error
# handling most sites carry.
vcl 4.1;

import std;

backend default {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

sub vcl_recv {
    if (req.url ~ "^/old/") {
        return (synth(750, regsub(req.url, "^/old/", "/new/")));
    }
    if (req.url == "/teapot") {
        return (synth(418, "I'm a teapot"));
    }
    if (req.restarts > 0) {
        set req.http.X-Restarted = req.restarts;
    }
}

sub vcl_backend_fetch {
    set bereq.http.X-Retries = bereq.retries;
}

sub vcl_backend_response {
    if (beresp.status >= 500 && bereq.retries < 2) {
        return (retry);
    }
}

sub vcl_backend_error {
    if (bereq.retries < 2) {
        return (retry);
    }
    set beresp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic("Sorry, the origin is down (" + beresp.status + " after " + bereq.retries + " retries)" + {"
"});
    return (deliver);
}

sub vcl_deliver {
    if (resp.status == 404 && req.restarts == 0) {
        set req.url = "/size/7?fallback=1";
        return (restart);
    }
    if (req.http.X-Restarted) {
        set resp.http.X-Restarted = req.http.X-Restarted;
    }
}

sub vcl_synth {
    if (resp.status == 750) {
        set resp.http.Location = "https://" + req.http.Host + resp.reason;
        set resp.status = 301;
        return (deliver);
    }
    set resp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic(resp.status + " " + resp.reason + {"
"});
    return (deliver);
}
