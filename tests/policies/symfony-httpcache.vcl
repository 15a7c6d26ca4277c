# Imitates: the Varnish configuration in Symfony's documentation
# ("How to Use Varnish to Speed up my Website", Symfony 4-6): every
# cookie but the session removed with the ";"-prefix regsuball idiom,
# X-Forwarded-Port/X-Forwarded-Proto set from the listening side, the
# Surrogate-Capability "abc=ESI/1.0" announcement and ESI turned on from
# Surrogate-Control, PURGE for an ACL, the "Cache-Control: private" from
# a session answered by the default hit-for-miss, and a long grace so
# ESI fragments ride out a slow backend. Our own writing.
vcl 4.1;

import std;

backend symfony {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purge {
    "localhost";
    "127.0.0.1";
}

sub vcl_recv {
    if (req.http.X-Forwarded-Proto == "https") {
        set req.http.X-Forwarded-Port = "443";
    } else {
        set req.http.X-Forwarded-Port = "80";
    }
    if (req.method == "PURGE") {
        if (!client.ip ~ purge) {
            return (synth(405, "Method not allowed"));
        }
        return (purge);
    }
    if (req.http.Cookie) {
        set req.http.Cookie = ";" + req.http.Cookie;
        set req.http.Cookie = regsuball(req.http.Cookie, "; +", ";");
        set req.http.Cookie = regsuball(req.http.Cookie, ";(PHPSESSID)=", "; \1=");
        set req.http.Cookie = regsuball(req.http.Cookie, ";[^ ][^;]*", "");
        set req.http.Cookie = regsuball(req.http.Cookie, "^[; ]+|[; ]+$", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
    set req.http.Surrogate-Capability = "abc=ESI/1.0";
}

sub vcl_backend_response {
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    set beresp.grace = 1h;
}

sub vcl_purge {
    return (synth(200, "Purged"));
}

sub vcl_deliver {
    if (resp.http.X-Symfony-Cache) {
        unset resp.http.X-Symfony-Cache;
    }
}
