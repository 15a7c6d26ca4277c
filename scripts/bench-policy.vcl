vcl 4.1;
# The benchmarks' policy, the same for cache-d and varnishd
# (scripts/bench-cpu.sh; scripts/build-pgo.sh trains on it): ESI for
# /esi/, pass for /pass/, PURGE. ORIGIN_PORT is replaced by the port of
# cache-bench's origin on 127.0.0.1.
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_recv {
    if (req.method == "PURGE") { return (purge); }
    if (req.url ~ "^/pass/") { set req.url = regsub(req.url, "^/pass", ""); return (pass); }
}
sub vcl_backend_response {
    if (bereq.url ~ "^/esi/") { set beresp.do_esi = true; }
}
