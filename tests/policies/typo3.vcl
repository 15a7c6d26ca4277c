# Imitates: the VCL of TYPO3's Varnish extensions (opsone/varnish and
# the older "varnish" extension): BAN requests keyed by
# X-Varnish-Ban-TYPO3-Sitename and X-Varnish-Ban-TYPO3-Pid (here also the
# generic tag header), backend-user cookies passed, fe_typo_user kept
# only when set, ESI enabled for TYPO3's content, a TYPO3-Cache header
# to mark what may be cached. Our own writing.
vcl 4.1;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl typo3_editors {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.method == "BAN") {
        if (client.ip !~ typo3_editors) {
            return (synth(405, "Not allowed"));
        }
        if (req.http.X-Varnish-Ban-TYPO3-Sitename && req.http.X-Varnish-Ban-TYPO3-Pid) {
            ban("obj.http.X-TYPO3-Sitename == " + req.http.X-Varnish-Ban-TYPO3-Sitename +
                " && obj.http.X-TYPO3-Pid == " + req.http.X-Varnish-Ban-TYPO3-Pid);
        } elsif (req.http.Cache-Tags) {
            ban("obj.http.xkey ~ " + req.http.Cache-Tags);
        } else {
            ban("obj.http.X-Url ~ ^" + req.url);
        }
        return (synth(200, "Banned"));
    }
    if (req.method == "PURGE") {
        if (client.ip !~ typo3_editors) {
            return (synth(405, "Not allowed"));
        }
        return (purge);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.url ~ "^/typo3" || req.url ~ "^/admin" || req.url ~ "(\?|&)no_cache=1") {
        return (pass);
    }
    if (req.http.Cookie ~ "be_typo_user") {
        return (pass);
    }
    if (req.http.Cookie !~ "fe_typo_user") {
        unset req.http.Cookie;
    }
    return (hash);
}

sub vcl_backend_response {
    set beresp.http.X-Url = bereq.url;
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    if (beresp.http.Set-Cookie && beresp.http.Set-Cookie !~ "fe_typo_user") {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
        return (deliver);
    }
    set beresp.grace = 1h;
}

sub vcl_deliver {
    unset resp.http.X-Url;
    unset resp.http.X-TYPO3-Sitename;
    unset resp.http.X-TYPO3-Pid;
    unset resp.http.xkey;
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT (" + obj.hits + ")";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
