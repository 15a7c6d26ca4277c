# Normalise what Vary and the hash see: Accept-Encoding, Accept-Language,
# query strings, and cookies (keep only the ones the application reads).
vcl 4.1;

import std;

backend default {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

sub vcl_recv {
    set req.url = std.querysort(req.url);
    set req.url = regsuball(req.url, "(utm_[a-z]+|gclid|fbclid)=[^&]*&?", "");
    set req.url = regsub(req.url, "[?&]$", "");
    if (req.http.Accept-Encoding) {
        if (req.http.Accept-Encoding ~ "br") {
            set req.http.Accept-Encoding = "br";
        } elsif (req.http.Accept-Encoding ~ "gzip") {
            set req.http.Accept-Encoding = "gzip";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
    if (req.http.Accept-Language) {
        set req.http.Accept-Language = std.tolower(regsub(req.http.Accept-Language, "^([a-zA-Z]{2}).*$", "\1"));
    }
    if (req.http.Cookie) {
        set req.http.Cookie = ";" + req.http.Cookie;
        set req.http.Cookie = regsuball(req.http.Cookie, "; +", ";");
        set req.http.Cookie = regsuball(req.http.Cookie, ";(lang)=", "; \1=");
        set req.http.Cookie = regsuball(req.http.Cookie, ";[^ ][^;]*", "");
        set req.http.Cookie = regsuball(req.http.Cookie, "^[; ]+|[; ]+$", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
    # What is left of the cookies is in the hash: cache despite them.
    if ((req.method == "GET" || req.method == "HEAD") && !req.http.Authorization) {
        return (hash);
    }
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.Host) {
        hash_data(req.http.Host);
    }
    if (req.http.Cookie ~ "lang=") {
        hash_data(regsub(req.http.Cookie, "^.*lang=([^;]*).*$", "\1"));
    }
    return (lookup);
}

sub vcl_backend_fetch {
    # The origin sees the application's cookie only.
    if (bereq.http.Cookie) {
        set bereq.http.X-Lang = regsub(bereq.http.Cookie, "^.*lang=([^;]*).*$", "\1");
        unset bereq.http.Cookie;
    }
}

sub vcl_deliver {
    set resp.http.X-Url = req.url;
}
