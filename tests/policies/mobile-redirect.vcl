# Imitates: the mobile-redirect VCLs of the Varnish 3-6 era (the
# devicedetect INSTALL "redirect to m." example, newspaper VCLs): a
# short User-Agent classifier, mobile visitors on www sent to m. with a
# custom synth status (750) turned into a 302 with Location in
# vcl_synth, a "full site" cookie or ?nomobile query opting out, the
# opt-out also set as a cookie from vcl_synth, the m. host mapped back
# to the same backend with a device header, custom error pages for 404
# and 5xx through vcl_backend_response/vcl_synth. Our own writing.
vcl 4.1;

backend site {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.url ~ "[?&]nomobile=1") {
        return (synth(751, regsub(req.url, "[?&]nomobile=1", "")));
    }
    if (req.http.User-Agent ~ "(?i)(iphone|ipod|android.*mobile|windows phone|blackberry|opera mini|iemobile)" &&
        req.http.Cookie !~ "fullsite=1" && req.http.host ~ "^www\.") {
        return (synth(750, "http://" + regsub(req.http.host, "^www\.", "m.") + req.url));
    }
    if (req.http.host ~ "^m\.") {
        set req.http.X-Device = "mobile";
        set req.http.host = regsub(req.http.host, "^m\.", "www.");
    } else {
        set req.http.X-Device = "desktop";
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "PHPSESSID") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_hash {
    hash_data(req.http.X-Device);
}

sub vcl_backend_response {
    if (beresp.status == 404) {
        set beresp.ttl = 10s;
    }
    if (beresp.status >= 500) {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
    }
}

sub vcl_deliver {
    if (resp.status >= 500 && resp.status < 600) {
        set req.http.X-Error-Status = resp.status;
        return (synth(resp.status, "Origin error"));
    }
    set resp.http.X-Device = req.http.X-Device;
}

sub vcl_synth {
    if (resp.status == 750) {
        set resp.http.Location = resp.reason;
        set resp.status = 302;
        set resp.reason = "Found";
        return (deliver);
    }
    if (resp.status == 751) {
        set resp.http.Location = resp.reason;
        set resp.http.Set-Cookie = "fullsite=1; path=/";
        set resp.status = 302;
        set resp.reason = "Found";
        return (deliver);
    }
    if (req.http.X-Error-Status) {
        set resp.http.Content-Type = "text/html; charset=utf-8";
        synthetic({"<!DOCTYPE html><html><body><h1>Sorry</h1><p>Error "} + resp.status +
                  {" while loading "} + req.url + {"</p></body></html>"});
        return (deliver);
    }
}
