# Imitates: the "X-Cache status header" snippets (Varnish Software's
# tutorial on reporting HIT/MISS/PASS/HITPASS/HITMISS/SYNTH, the
# Cache-Status header of RFC 9211 as people bolt it onto Varnish 6/7):
# req.is_hitmiss and req.is_hitpass read in vcl_deliver, vcl_synth
# marking synthetic answers, obj.hits/obj.grace/obj.keep shown, the
# backend side's bereq.is_hitmiss/bereq.is_hitpass and beresp.was_304
# recorded on the object, req.can_gzip, the protocols of both sides,
# and a Cache-Status header built from them. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.url ~ "^/(account|admin)") {
        return (pass);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    set beresp.http.X-Fetch = "hitmiss=" + bereq.is_hitmiss + " hitpass=" + bereq.is_hitpass +
        " 304=" + beresp.was_304 + " proto=" + beresp.proto + " bereq=" + bereq.proto;
    if (bereq.url ~ "^/(private|setcookie)") {
        return (pass(30s));
    }
    set beresp.grace = 2m;
    set beresp.keep = 10m;
}

sub vcl_deliver {
    if (req.is_hitpass) {
        set resp.http.X-Cache = "HITPASS";
    } elsif (req.is_hitmiss) {
        set resp.http.X-Cache = "HITMISS";
    } elsif (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } elsif (obj.uncacheable) {
        set resp.http.X-Cache = "PASS";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    set resp.http.X-Cache-Hits = obj.hits;
    set resp.http.X-Obj = "grace=" + obj.grace + " keep=" + obj.keep;
    set resp.http.X-Client = "gzip=" + req.can_gzip + " proto=" + req.proto + " resp=" + resp.proto;
    if (resp.http.X-Cache == "HIT") {
        set resp.http.Cache-Status = "varnish; hit";
    } elsif (resp.http.X-Cache ~ "PASS") {
        set resp.http.Cache-Status = "varnish; fwd=bypass";
    } else {
        set resp.http.Cache-Status = "varnish; fwd=miss; stored";
    }
}

sub vcl_synth {
    set resp.http.X-Cache = "SYNTH";
    set resp.http.Cache-Status = "varnish; fwd=synth";
}
