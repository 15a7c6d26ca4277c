# Imitates: the "saint mode" habits carried from Varnish 3 into 4-7
# without vmod saintmode (migration guides, "how to retry a backend"
# answers): a 5xx from the backend retried with return (retry) while
# bereq.retries is low, the retry sent to another backend chosen in
# vcl_backend_fetch by bereq.retries, the attempt counted in a backend
# request header, a background fetch's failure abandoned so grace keeps
# serving, a last failure turned into a short-lived cached error
# (ttl 5s) so a storm does not reach the origin, and X-Retries on the
# response. Our own writing.
vcl 4.1;

import std;

backend app_a {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend app_b {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_fetch {
    if (bereq.retries == 0) {
        set bereq.backend = app_a;
    } else {
        set bereq.backend = app_b;
    }
    set bereq.http.X-Attempt = bereq.retries + 1;
}

sub vcl_backend_response {
    if (beresp.status >= 500 && beresp.status < 600) {
        if (bereq.is_bgfetch) {
            return (abandon);
        }
        if (bereq.retries < 2) {
            return (retry);
        }
        set beresp.ttl = 5s;
        set beresp.grace = 0s;
        set beresp.http.X-Saint = "failed after " + (bereq.retries + 1) + " attempts";
        return (deliver);
    }
    set beresp.http.X-Retries = bereq.retries;
    set beresp.grace = 1h;
}

sub vcl_backend_error {
    if (bereq.retries < 2) {
        return (retry);
    }
}

sub vcl_deliver {
    if (!resp.http.X-Retries) {
        set resp.http.X-Retries = "n/a";
    }
}
