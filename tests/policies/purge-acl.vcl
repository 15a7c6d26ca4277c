# Imitates: the purge-endpoint VCLs of Varnish's "Purging and banning"
# documentation and the many hosting panels that copy it: an ACL with a
# negated entry and a subnet, PURGE answered 405 for strangers, hard
# purge by hash with the builtin vcl_purge customised, vmod purge's
# purge.hard() from vcl_hit/vcl_miss for the "X-Purge-Method: exact"
# variant, regex purges turned into bans on the lurker-friendly
# obj.http.X-Url/X-Host, a BAN answered with the ban expression, and
# vcl_synth rendering JSON for purge replies. Our own writing.
vcl 4.1;

import purge;
import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purgers {
    "localhost";
    "127.0.0.0"/8;
    ! "127.0.0.2";
    "10.0.0.0"/8;
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (!client.ip ~ purgers) {
            return (synth(405, "Not allowed for " + client.ip));
        }
        if (req.http.X-Purge-Regex) {
            ban("obj.http.X-Host == " + req.http.host + " && obj.http.X-Url ~ " + req.http.X-Purge-Regex);
            return (synth(200, "Regex purge queued"));
        }
        if (req.http.X-Purge-Method == "exact") {
            return (hash);
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (!client.ip ~ purgers) {
            return (synth(405, "Not allowed"));
        }
        set req.http.X-Ban = "obj.http.X-Host == " + req.http.host + " && obj.http.X-Url ~ " + req.url;
        ban(req.http.X-Ban);
        return (synth(200, "Ban: " + req.http.X-Ban));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "(PHPSESSID|session)") {
        return (pass);
    }
    unset req.http.Cookie;
}

sub vcl_hit {
    if (req.method == "PURGE") {
        set req.http.X-Purged = purge.hard();
        return (synth(200, "Purged " + req.http.X-Purged));
    }
}

sub vcl_miss {
    if (req.method == "PURGE") {
        return (synth(404, "Not in cache"));
    }
}

sub vcl_purge {
    return (synth(200, "Purged"));
}

sub vcl_backend_response {
    set beresp.http.X-Url = bereq.url;
    set beresp.http.X-Host = bereq.http.host;
}

sub vcl_deliver {
    unset resp.http.X-Url;
    unset resp.http.X-Host;
}

sub vcl_synth {
    if (req.method == "PURGE" || req.method == "BAN") {
        set resp.http.Content-Type = "application/json";
        synthetic({"{"status":"} + resp.status + {","message":""} + resp.reason + {"","url":""} + req.url + {"""} + "}" + {"
"});
        return (deliver);
    }
}
