# The built-in policy of cache-d, as VCL: what runs after a subroutine of
# yours that does not return (Varnish appends its builtin.vcl the same
# way). cache-d runs it as native code; a unit test checks that this text,
# compiled, decides the same. `vcl.show -v` prints it.

vcl 4.1;

import std;

sub vcl_recv {
    call vcl_req_host;
    call vcl_req_method;
    call vcl_req_authorization;
    call vcl_req_cookie;
    return (hash);
}

# The parts of vcl_recv (and of vcl_backend_response below) a program may
# define a version of, as in Varnish 7: its version runs first; a bare
# `return;` in it skips the part here, falling through runs it.
sub vcl_req_host {
    if (req.http.host ~ "[A-Z]") {
        set req.http.host = std.tolower(req.http.host);
    }
    if (!req.http.host && req.esi_level == 0 && req.proto == "HTTP/1.1") {
        return (synth(400));
    }
}

sub vcl_req_method {
    if (req.method == "PRI") {
        return (synth(405));
    }
    if (req.method != "GET" &&
      req.method != "HEAD" &&
      req.method != "PUT" &&
      req.method != "POST" &&
      req.method != "TRACE" &&
      req.method != "OPTIONS" &&
      req.method != "DELETE" &&
      req.method != "PATCH") {
        return (pipe);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
}

sub vcl_req_authorization {
    if (req.http.Authorization) {
        return (pass);
    }
}

sub vcl_req_cookie {
    if (req.http.Cookie) {
        return (pass);
    }
}

sub vcl_pipe {
    return (pipe);
}

sub vcl_pass {
    return (fetch);
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.host) {
        hash_data(req.http.host);
    } else {
        hash_data(server.ip);
    }
    return (lookup);
}

sub vcl_purge {
    return (synth(200, "Purged"));
}

sub vcl_hit {
    return (deliver);
}

sub vcl_miss {
    return (fetch);
}

sub vcl_deliver {
    return (deliver);
}

sub vcl_synth {
    set resp.http.Content-Type = "text/html; charset=utf-8";
    set resp.http.Retry-After = "5";
    synthetic({"<!DOCTYPE html>
<html>
  <head>
    <title>"} + resp.status + " " + resp.reason + {"</title>
  </head>
  <body>
    <h1>Error "} + resp.status + " " + resp.reason + {"</h1>
    <p>"} + resp.reason + {"</p>
    <h3>Guru Meditation:</h3>
    <p>XID: "} + req.xid + {"</p>
    <hr>
    <p>cachekit cache server</p>
  </body>
</html>
"});
    return (deliver);
}

sub vcl_backend_fetch {
    if (bereq.method == "GET") {
        unset bereq.body;
    }
    return (fetch);
}

sub vcl_backend_response {
    if (bereq.uncacheable) {
        return (deliver);
    }
    call vcl_beresp_stale;
    call vcl_beresp_cookie;
    call vcl_beresp_control;
    call vcl_beresp_vary;
    return (deliver);
}

sub vcl_beresp_stale {
    if (beresp.ttl <= 0s) {
        call vcl_beresp_hitmiss;
    }
}

sub vcl_beresp_cookie {
    if (beresp.http.Set-Cookie) {
        call vcl_beresp_hitmiss;
    }
}

sub vcl_beresp_control {
    if (beresp.http.Surrogate-Control ~ "(?i)no-store" ||
      (!beresp.http.Surrogate-Control &&
        beresp.http.Cache-Control ~ "(?i:no-cache|no-store|private)")) {
        call vcl_beresp_hitmiss;
    }
}

sub vcl_beresp_vary {
    if (beresp.http.Vary == "*") {
        call vcl_beresp_hitmiss;
    }
}

# Remember for two minutes that this is uncacheable (hit-for-miss).
sub vcl_beresp_hitmiss {
    set beresp.ttl = 120s;
    set beresp.uncacheable = true;
    return (deliver);
}

sub vcl_backend_error {
    set beresp.http.Content-Type = "text/html; charset=utf-8";
    set beresp.http.Retry-After = "5";
    synthetic({"<!DOCTYPE html>
<html>
  <head>
    <title>"} + beresp.status + " " + beresp.reason + {"</title>
  </head>
  <body>
    <h1>Error "} + beresp.status + " " + beresp.reason + {"</h1>
    <p>"} + beresp.reason + {"</p>
    <h3>Guru Meditation:</h3>
    <p>XID: "} + bereq.xid + {"</p>
    <hr>
    <p>cachekit cache server</p>
  </body>
</html>
"});
    return (deliver);
}

sub vcl_init {
    return (ok);
}

sub vcl_fini {
    return (ok);
}
