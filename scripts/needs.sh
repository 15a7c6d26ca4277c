# What the tests need from the system, one list for .ci/run and
# scripts/test.sh (sourced by both). Each line: what to look for (a
# command, or a file's path), the Debian package that gives it, and what
# goes untested without it.
NEEDS=(
    "openssl|openssl|cache-bench's test against a self-signed server certificate (1 test)"
    "ss|iproute2|the client sockets' send buffer (cache-d's send_buffer parameter, 1 test)"
    "curl|curl|the demo and the end-to-end tests that fetch with curl (7 tests)"
    "varnishadm|varnish|every comparison with Varnish: the conformance scenarios on both servers, the regex corpus, the policy battery against live varnishd, and 20 end-to-end checks with the real varnishd, varnishadm and varnishlog"
    "/usr/lib/x86_64-linux-gnu/varnish/vmods/libvmod_var.so|varnish-modules|the varnish-modules scenarios (var, str, header, accept, vsthrottle, bodyaccess, saintmode, tcp, xkey) on varnishd"
    "tmux|tmux|cache-adm's interactive shell and cache-stat's screen (2 tests)"
    "wrk|wrk|the no-line-lost load test (1 test)"
    "nghttp|nghttp2-client|the HTTP/2 tests with nghttp and h2load (1 test)"
    "dpkg-shlibdeps|dpkg-dev|the package's library dependencies (2 tests)"
    "zsh|zsh|the package's zsh completions (1 test)"
    "fish|fish|the package's fish completions (1 test)"
    "lintian|lintian|the package's lint check (scripts/install-test.py)"
    "mmdebstrap|mmdebstrap|the package's install test in a clean Debian root (scripts/install-test.py, as root)"
    "node|nodejs|the public HTTP cache test suite (cache-tests.fyi) on cache-d and varnishd, scripts/cache-tests.py"
    "npm|npm|installing that suite's package (http-cache-tests) for scripts/cache-tests.py"
)

# The entries whose command or file is missing, one a line.
needs_missing() {
    local entry what
    for entry in "${NEEDS[@]}"; do
        what=${entry%%|*}
        case $what in
            /*) [ -e "$what" ] || echo "$entry" ;;
            *) command -v "$what" >/dev/null || echo "$entry" ;;
        esac
    done
}

# The packages of the missing entries, space separated.
needs_packages() {
    needs_missing | cut -d'|' -f2 | sort -u | tr '\n' ' '
}
