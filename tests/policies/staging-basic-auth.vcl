# Imitates: the "password-protect the staging site at the edge" VCLs
# (agency and hosting snippets): HTTP Basic credentials checked in
# vcl_recv against a base64 string built with vmod blob
# (blob.encode(BASE64, blob=blob.decode(encoded="user:pass"))), an
# office ACL let through without a password, a 401 with
# WWW-Authenticate rendered in vcl_synth, the Authorization header
# removed before the backend once checked so authenticated pages can
# still be cached, the health URL and robots.txt left open, and
# X-Robots-Tag: noindex on everything delivered. Our own writing.
vcl 4.1;

import blob;
import std;

backend staging {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl office {
    "10.0.0.0"/8;
    "192.168.1.0"/24;
}

sub vcl_recv {
    if (req.url ~ "^/(health|robots\.txt)$") {
        return (synth(200, "OK"));
    }
    if (client.ip !~ office) {
        if (!req.http.Authorization) {
            set req.http.X-Auth = "missing";
        } elsif (req.http.Authorization == "Basic " +
                 blob.encode(BASE64, blob=blob.decode(encoded="user:pass"))) {
            set req.http.X-Auth = "ok";
            unset req.http.Authorization;
        } else {
            return (synth(401, "Wrong credentials"));
        }
    }
    if (req.http.X-Auth == "missing" && req.url !~ "^/static/") {
        return (synth(401, "Restricted"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    hash_data(req.http.X-Auth);
}

sub vcl_backend_fetch {
    unset bereq.http.X-Auth;
}

sub vcl_deliver {
    set resp.http.X-Robots-Tag = "noindex, nofollow";
    set resp.http.X-Auth = req.http.X-Auth;
}

sub vcl_synth {
    if (resp.status == 401) {
        set resp.http.WWW-Authenticate = {"Basic realm="Staging", charset="UTF-8""};
        set resp.http.Content-Type = "text/plain; charset=utf-8";
        synthetic("Authentication required: " + resp.reason + {"
"});
        return (deliver);
    }
    set resp.http.X-Robots-Tag = "noindex, nofollow";
}
