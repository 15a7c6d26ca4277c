# Imitates: the micro-service gateway VCLs (Varnish in front of several
# services, as in Kubernetes ingress and "Varnish as API gateway"
# write-ups): backends chosen by path prefix, the prefix stripped from
# bereq.url in vcl_backend_fetch and the Host rewritten to the service's
# virtual host, a fallback director whose primary is down (its probe
# never answers, .initial = 0) so the spare serves, uploads (POST with a
# body) piped straight through, a route to a dead service answered by
# Varnish's own 503, X-Service telling which route matched, and the
# service's Server header replaced. Our own writing.
vcl 4.1;

import directors;
import std;

probe ping {
    .url = "/__probe";
    .interval = 2s;
    .timeout = 500ms;
    .window = 3;
    .threshold = 2;
    .initial = 0;
}

backend pages_primary {
    .host = "127.0.0.1";
    .port = "1";
    .probe = ping;
}

backend pages_spare {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .probe = {
        .url = "/__probe";
        .interval = 2s;
        .window = 3;
        .threshold = 2;
        .initial = 2;
    }
}

backend catalog {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend accounts {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend reports {
    .host = "127.0.0.1";
    .port = "1";
    .connect_timeout = 500ms;
}

sub vcl_init {
    new pages = directors.fallback();
    pages.add_backend(pages_primary);
    pages.add_backend(pages_spare);
}

sub vcl_recv {
    if (req.method == "POST" && req.http.Content-Length) {
        set req.backend_hint = catalog;
        return (pipe);
    }
    if (req.url ~ "^/api/") {
        set req.backend_hint = catalog;
        set req.http.X-Service = "catalog";
    } elsif (req.url ~ "^/(account|user|admin)") {
        set req.backend_hint = accounts;
        set req.http.X-Service = "accounts";
    } elsif (req.url ~ "^/reports/") {
        set req.backend_hint = reports;
        set req.http.X-Service = "reports";
    } else {
        set req.backend_hint = pages.backend();
        set req.http.X-Service = "pages";
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

sub vcl_backend_fetch {
    if (bereq.http.X-Service == "catalog") {
        set bereq.url = regsub(bereq.url, "^/api/", "/api/v1/");
        set bereq.http.Host = "catalog.internal";
    } elsif (bereq.http.X-Service == "accounts") {
        set bereq.http.Host = "accounts.internal";
    }
}

sub vcl_backend_response {
    set beresp.http.X-Backend = beresp.backend.name;
    unset beresp.http.Server;
    set beresp.http.Server = "gateway";
}

sub vcl_deliver {
    set resp.http.X-Service = req.http.X-Service;
}
