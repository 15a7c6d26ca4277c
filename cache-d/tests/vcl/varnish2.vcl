# Varnish 2.x habits: must fail with the 4.1 spelling.
backend default { .host = "127.0.0.1"; .port = "8080"; }

sub vcl_recv {
    if (req.request == "PURGE") {
        purge("req.url == " req.url);
        error 200 "Purged.";
    }
    lookup;
}
