# Imitates: the "hide that we run Varnish" hardening snippets (security
# checklists, hosting-panel templates, the "remove fingerprinting
# headers" sections of most public VCLs): Via, X-Varnish, Server,
# X-Powered-By, X-Generator, X-Drupal-*, X-AspNet-Version and the tag
# headers removed in vcl_deliver, a Server header of our own set in
# their place, the same done for synthetic pages in vcl_synth, and the
# backend's own fingerprinting removed in vcl_backend_response so it is
# not even stored. Our own writing.
vcl 4.1;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

acl purge {
    "127.0.0.1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purge) {
            return (synth(403, "Forbidden"));
        }
        return (purge);
    }
    unset req.http.X-Forwarded-Host;
    unset req.http.Proxy;
}

sub vcl_backend_response {
    unset beresp.http.X-Powered-By;
    unset beresp.http.X-Generator;
    unset beresp.http.X-AspNet-Version;
    unset beresp.http.X-AspNetMvc-Version;
    unset beresp.http.X-Drupal-Cache;
    unset beresp.http.X-Drupal-Dynamic-Cache;
}

sub vcl_deliver {
    unset resp.http.Via;
    unset resp.http.X-Varnish;
    unset resp.http.Server;
    unset resp.http.X-Origin-Server;
    unset resp.http.X-Magento-Tags;
    unset resp.http.X-Cache-Tags;
    unset resp.http.Cache-Tags;
    unset resp.http.xkey;
    unset resp.http.Age;
    set resp.http.Server = "edge";
}

sub vcl_synth {
    unset resp.http.Via;
    unset resp.http.X-Varnish;
    unset resp.http.Server;
    set resp.http.Server = "edge";
}
