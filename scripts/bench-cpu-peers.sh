# shellcheck shell=bash disable=SC2154,SC2034
# Sourced by scripts/bench-cpu.sh after start_pair: the TLS peers.
#   - two certificates in $work: RSA-2048 for bench.test (the default one,
#     also what a client that sends no SNI, e.g. to 127.0.0.1, gets) and
#     ECDSA P-256 for ecdsa.test; cache-d (its -A tls.conf, written here
#     before start_pair) and nginx pick by SNI;
#   - nginx (when installed): proxy_cache in front of the origin, 2
#     workers (one per core), TLS 1.2/1.3 (1.22 defaults to 1.2 and older),
#     keepalive_requests raised, keepalive to the origin; daemonized, its
#     master's pid in $work/nginx.pid; sets n_port, n_master;
#   - hitch (when installed): 2 workers, PROXY v2 to varnishd's PROXY
#     listener ($varnish_proxy, in varnish_extra before start_pair); sets
#     h_port, h_master.
#   - Caddy (when installed; Debian's caddy): HTTP/1.1, HTTP/2 and HTTP/3
#     (quic-go) with the RSA certificate, a 1 KiB file at /size/1024
#     (file_server: Caddy has no cache), GOMAXPROCS 2; sets y_port,
#     y_master (group h3).
# All are stopped at exit (stop_peers, chained before bench-pair's cleanup).
# A missing tool leaves its variable empty: its rows print "skipped".

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# make_certs: before start_pair (cache-d reads tls.conf at start).
make_certs() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench.test \
        -addext subjectAltName=DNS:bench.test -addext basicConstraints=critical,CA:FALSE \
        -keyout "$work/rsa.key" -out "$work/rsa.crt" 2>/dev/null
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=ecdsa.test \
        -addext subjectAltName=DNS:ecdsa.test -addext basicConstraints=critical,CA:FALSE \
        -keyout "$work/ecdsa.key" -out "$work/ecdsa.crt" 2>/dev/null
    cat "$work/rsa.crt" "$work/rsa.key" >"$work/rsa.pem"
    cat "$work/ecdsa.crt" "$work/ecdsa.key" >"$work/ecdsa.pem"
    printf 'pem-file = "%s"\npem-file = "%s"\n' "$work/rsa.pem" "$work/ecdsa.pem" >"$work/tls.conf"
}

start_nginx() {
    n_port=$(free_port)
    mkdir -p "$work/ngx"
    local srv="" name crt dflt=" default_server"
    for name in bench.test ecdsa.test; do
        crt=rsa; [ "$name" = ecdsa.test ] && crt=ecdsa
        srv+="
    server {
        listen 127.0.0.1:$n_port ssl$dflt;
        server_name $name;
        ssl_certificate $work/$crt.crt;
        ssl_certificate_key $work/$crt.key;
        ssl_session_cache shared:SSL:10m;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_cache c;
        }
    }"
        dflt=""
    done
    cat >"$work/nginx.conf" <<NGX
daemon on;
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx.err;
$([ "$(id -u)" = 0 ] && echo "user root;")
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    proxy_cache_path $work/ngx levels=1:2 keys_zone=c:10m max_size=256m;
    upstream origin { server $origin; keepalive 32; }
$srv
}
NGX
    nginx -c "$work/nginx.conf" -p "$work" 2>"$work/nginx.start" || { cat "$work/nginx.start" >&2; n_port=; return; }
    for _ in $(seq 100); do listening "$n_port" && break; sleep 0.05; done
    listening "$n_port" || { echo "bench: nginx did not start" >&2; cat "$work/nginx.err" >&2; n_port=; return; }
    n_master=$(cat "$work/nginx.pid")
}

start_hitch() {
    h_port=$(free_port)
    # shellcheck disable=SC2046
    hitch --frontend="[127.0.0.1]:$h_port" --backend="[127.0.0.1]:$varnish_proxy" --write-proxy-v2=on \
        --alpn-protos="http/1.1" --workers=2 --daemon=off $([ "$(id -u)" = 0 ] && echo --user=nobody) \
        "$work/rsa.pem" >"$work/hitch.log" 2>&1 &
    h_master=$!
    pids+=("$h_master")
    for _ in $(seq 100); do listening "$h_port" && break; sleep 0.05; done
    listening "$h_port" || { echo "bench: hitch did not start" >&2; cat "$work/hitch.log" >&2; h_port=; }
}

start_caddy() {
    y_port=$(free_port)
    mkdir -p "$work/caddy/size" "$work/caddy/home"
    head -c 1024 /dev/zero | tr '\0' x >"$work/caddy/size/1024"
    cat >"$work/Caddyfile" <<CADDY
{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h3
	}
}
https://bench.test:$y_port {
	bind 127.0.0.1
	tls $work/rsa.crt $work/rsa.key
	root * $work/caddy
	file_server
}
CADDY
    XDG_DATA_HOME="$work/caddy/home" XDG_CONFIG_HOME="$work/caddy/home" HOME="$work/caddy/home" \
        caddy run --config "$work/Caddyfile" --adapter caddyfile >"$work/caddy.log" 2>&1 &
    y_master=$!
    pids+=("$y_master")
    for _ in $(seq 100); do listening "$y_port" && break; sleep 0.05; done
    listening "$y_port" || { echo "bench: caddy did not start" >&2; cat "$work/caddy.log" >&2; y_port=; }
}

stop_peers() { [ -s "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; cleanup; }

# served_key HOST PORT: the key type of the certificate a server presents
# for SNI HOST ("rsaEncryption" or "id-ecPublicKey"), to check the pick.
served_key() {
    openssl s_client -connect "127.0.0.1:$2" -servername "$1" </dev/null 2>/dev/null |
        openssl x509 -noout -text 2>/dev/null | awk '/Public Key Algorithm/ {print $4; exit}'
}
