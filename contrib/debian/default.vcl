# /etc/cachekit/default.vcl: the policy the packaged cache-d runs. Point
# the backend at your origin, then `systemctl reload cache-d` (a program
# that fails to compile is refused, with its line and column, and the
# running one stays). The language: man cache-vcl (7); the built-in
# policy runs after every subroutine that does not return.
vcl 4.1;

backend default {
    .host = "127.0.0.1";
    .port = "8080";
}

sub vcl_recv {
}

sub vcl_backend_response {
}

sub vcl_deliver {
}
