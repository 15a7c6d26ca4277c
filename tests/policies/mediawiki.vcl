# Imitates: the Varnish configuration in MediaWiki's manual
# (Manual:Varnish_caching): a purge ACL for the wiki's own hosts,
# PURGE by hash, X-Forwarded-For set for the wiki's logs, requests with
# Authorization or a session cookie passed, If-None-Match/If-Modified-
# Since passed through, everything else keyed on URL and Host only,
# private or cookie-setting responses made hit-for-pass, a floor on TTL
# for anonymous pages. Our own writing.
vcl 4.0;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .first_byte_timeout = 20s;
    .connect_timeout = 1s;
}

acl purge {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.http.X-Forwarded-For) {
        set req.http.X-Forwarded-For = req.http.X-Forwarded-For + ", " + client.ip;
    } else {
        set req.http.X-Forwarded-For = client.ip;
    }
    if (req.method == "PURGE") {
        if (!client.ip ~ purge) {
            return (synth(405, "Not allowed."));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "([sS]ession|Token)=") {
        return (pass);
    }
    if (req.http.If-None-Match || req.http.If-Modified-Since) {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_pipe {
    set bereq.http.connection = "close";
}

sub vcl_backend_response {
    if (beresp.ttl < 48h && beresp.ttl > 0s && beresp.http.Cache-Control !~ "private") {
        set beresp.ttl = 48h;
    }
    if (beresp.ttl <= 0s || beresp.http.Set-Cookie || beresp.http.Vary == "*" ||
        beresp.http.Cache-Control ~ "private") {
        set beresp.ttl = 120s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    return (deliver);
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "cp1 hit/" + obj.hits;
    } else {
        set resp.http.X-Cache = "cp1 miss";
    }
}
