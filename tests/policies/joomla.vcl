# Imitates: the Joomla 3/4 VCLs from hosting blogs and the "jvarnish"
# style templates: /administrator passed, com_users/com_ajax tasks and
# logged-in state (the joomla_user_state cookie) passed, the 32-hex
# session cookie names stripped for anonymous visitors, editors allowed
# to BAN by URL regex, language cookies kept in the hash, a pass for
# token= query strings, Expires/Pragma from PHP removed on cached pages.
# Our own writing.
vcl 4.1;

backend joomla {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .connect_timeout = 600s;
    .first_byte_timeout = 600s;
    .between_bytes_timeout = 600s;
}

acl editors {
    "127.0.0.1";
    "192.168.0.0"/16;
}

sub vcl_recv {
    if (req.method == "BAN" || req.method == "PURGE") {
        if (!client.ip ~ editors) {
            return (synth(405, "Not allowed."));
        }
        if (req.http.X-Purge-Regex) {
            ban("req.url ~ " + req.http.X-Purge-Regex);
            return (synth(200, "Ban added"));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/administrator" || req.url ~ "option=com_(users|ajax|config)" ||
        req.url ~ "[?&](task|token)=") {
        return (pass);
    }
    if (req.http.Cookie ~ "joomla_user_state=logged_in") {
        return (pass);
    }
    if (req.http.Cookie) {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|; )[a-f0-9]{32}=[^;]*", "");
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|; )(_ga|_gid|__utm[a-z]+|PHPSESSID)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^; ", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
    if (req.http.Authorization) {
        return (pass);
    }
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    hash_data(req.http.host);
    if (req.http.Cookie ~ "lang=") {
        hash_data(regsub(req.http.Cookie, "^.*lang=([^;]*).*$", "\1"));
    }
    return (lookup);
}

sub vcl_backend_response {
    if (bereq.url ~ "^/administrator") {
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.http.Set-Cookie ~ "joomla_user_state") {
        set beresp.uncacheable = true;
        set beresp.ttl = 30s;
        return (deliver);
    }
    if (beresp.status == 200 || beresp.status == 301 || beresp.status == 404) {
        unset beresp.http.Set-Cookie;
        unset beresp.http.Expires;
        unset beresp.http.Pragma;
        if (beresp.ttl < 15m) {
            set beresp.ttl = 15m;
        }
    }
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Joomla-Cache = "HIT";
    } else {
        set resp.http.X-Joomla-Cache = "MISS";
    }
}
