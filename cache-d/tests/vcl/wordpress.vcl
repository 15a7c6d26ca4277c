# A WordPress policy: pass the admin and logged-in users, strip cookies
# from static files and cache them long, allow PURGE from localhost.
vcl 4.1;

backend default {
    .host = "127.0.0.1";
    .port = "ORIGIN_PORT";
}

acl purgers {
    "localhost";
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (!client.ip ~ purgers) {
            return (synth(405, "Not allowed."));
        }
        return (purge);
    }
    # Logged-in users, commenters and password-protected posts are personal.
    if (req.url ~ "^/wp-(admin|login)" || req.http.Cookie ~ "wordpress_logged_in_|comment_author_|wp-postpass_") {
        return (pass);
    }
    if (req.url ~ "\.(css|js|png|jpg|gif|ico)$") {
        unset req.http.Cookie;
        return (hash);
    }
    # Drop analytics cookies; pass if anything else is left.
    if (req.http.Cookie) {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|;\s*)(_ga|_gid)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^;\s*", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
}

sub vcl_backend_response {
    if (beresp.http.Content-Type ~ "octet-stream") {
        set beresp.ttl = 1h;
    }
}

sub vcl_deliver {
    set resp.http.X-Policy = "wordpress";
}
