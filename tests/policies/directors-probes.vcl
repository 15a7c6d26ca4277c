# Imitates: the multi-backend VCLs in Varnish's "backend servers and
# directors" documentation and hosting templates: several app servers
# with probes written every way people write them (a named probe with
# .url, an inline .request given as several strings with Connection:
# close, .expected_response, .threshold/.window/.initial), a round_robin
# director for pages, a fallback director (primary then spare) for the
# admin, a random director for static files and a hash director on the
# session cookie for the API; the director's health answered on /health
# with std.healthy(); X-Backend showing which backend served.
# Our own writing.
vcl 4.1;

import directors;
import std;

probe by_url {
    .url = "/__probe";
    .interval = 5s;
    .timeout = 1s;
    .window = 5;
    .threshold = 3;
    .initial = 3;
}

probe by_request {
    .request =
        "GET /__probe HTTP/1.1"
        "Host: www.example.com"
        "Accept: */*"
        "Connection: close";
    .expected_response = 200;
    .interval = 3s;
    .timeout = 2s;
    .window = 8;
    .threshold = 6;
    .initial = 6;
}

backend app1 {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .probe = by_url;
}

backend app2 {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .probe = by_request;
}

backend app3 {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .probe = {
        .url = "/__probe";
        .expected_response = 200;
        .timeout = 500ms;
        .interval = 2s;
        .window = 3;
        .threshold = 2;
        .initial = 2;
    }
}

backend spare {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_init {
    new pages = directors.round_robin();
    pages.add_backend(app1);
    pages.add_backend(app2);
    pages.add_backend(app3);

    new admin = directors.fallback();
    admin.add_backend(app1);
    admin.add_backend(spare);

    new assets = directors.random();
    assets.add_backend(app2, 10.0);
    assets.add_backend(app3, 5.0);

    new sticky = directors.hash();
    sticky.add_backend(app1, 1.0);
    sticky.add_backend(app3, 1.0);
}

sub vcl_recv {
    if (req.url == "/health") {
        if (std.healthy(pages.backend())) {
            return (synth(200, "pages healthy"));
        }
        return (synth(503, "pages sick"));
    }
    if (req.url ~ "^/(admin|account)") {
        set req.backend_hint = admin.backend();
    } elsif (req.url ~ "^/static/") {
        set req.backend_hint = assets.backend();
    } elsif (req.url ~ "^/api/") {
        set req.backend_hint = sticky.backend(req.http.Cookie + req.http.Authorization);
    } else {
        set req.backend_hint = pages.backend();
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie) {
        return (pass);
    }
    return (hash);
}

sub vcl_backend_response {
    if (bereq.url !~ "^/static/") {
        # the random director's pick is not repeatable: not shown
        set beresp.http.X-Backend = beresp.backend.name;
    }
    set beresp.grace = 1m;
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
