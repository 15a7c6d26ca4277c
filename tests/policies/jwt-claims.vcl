# Imitates: the "identity at the edge" VCLs built on vmod blob (JWT and
# Basic-auth decoding write-ups for Varnish 6+): the Basic user name
# decoded with blob.transcode(BASE64 -> IDENTITY) into X-User, a JWT's
# payload segment decoded with BASE64URLNOPAD and its role claim cut out
# with regsub into X-Role, the role (not the token) in the hash so users
# of one role share a cache, the raw Authorization removed before the
# backend, a hex fingerprint of the token from blob.encode(HEX) for the
# logs, and anonymous visitors cached normally. Our own writing.
vcl 4.1;

import blob;
import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    unset req.http.X-User;
    unset req.http.X-Role;
    if (req.http.Authorization ~ "^Basic [A-Za-z0-9+/=]+$") {
        set req.http.X-User = regsub(
            blob.transcode(decoding = BASE64, encoded = regsub(req.http.Authorization, "^Basic ", "")),
            ":.*$", "");
        set req.http.X-Role = "basic";
    } elsif (req.http.Authorization ~ "^Bearer [A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$") {
        set req.http.X-Claims = blob.transcode(decoding = BASE64URLNOPAD,
            encoded = regsub(req.http.Authorization, "^Bearer [^.]+\.([^.]+)\..*$", "\1"));
        set req.http.X-Role = regsub(req.http.X-Claims, {"^.*"role"\s*:\s*"([^"]+)".*$"}, "\1");
    } elsif (req.http.Authorization) {
        set req.http.X-Role = "opaque-" + blob.encode(HEX, blob = blob.decode(encoded = req.http.Authorization));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    if (req.http.X-Role) {
        hash_data(req.http.X-Role);
    }
}

sub vcl_backend_fetch {
    unset bereq.http.Authorization;
    unset bereq.http.X-Claims;
}

sub vcl_deliver {
    if (req.http.X-User) {
        set resp.http.X-User = req.http.X-User;
    }
    if (req.http.X-Role) {
        set resp.http.X-Role = req.http.X-Role;
    }
}
