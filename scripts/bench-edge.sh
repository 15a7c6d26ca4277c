#!/usr/bin/env bash
# The edge protocols side by side in one run (issue 19), 1 KiB cache hits:
#  1. TLS, HTTP/1.1: wrk -t1 -c50 against cache-d's https listener, nginx
#     (proxy_cache, the same certificate) and hitch in front of varnishd
#     (PROXY v2), alternating, medians;
#  2. TLS handshakes/s: resumed ones (wrk -H 'Connection: close': wrk's
#     OpenSSL resumes with the ticket it got) and full ones (cache-bench
#     --new-conn: rustls, no resumption);
#  3. HTTP/2: h2load -c10 -m10 over TLS (ALPN h2) against the three, and
#     in the clear (prior knowledge) cache-d against varnishd -p feature=+http2;
#  4. the load generators: cache-bench --h2 against h2load on the same
#     cache-d listener.
# RSA-2048 certificate; varnishd (Debian's 7.1) daemonized as packaged
# (bench-pair.sh); nginx (Debian's 1.22) 2 workers, one per core, with
# TLS 1.3 on (1.22 defaults to 1.2 and older only, whose session-id
# resumption skips the key exchange: not the same work) and
# keepalive_requests raised, hitch 2 workers.
# Usage: scripts/bench-edge.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}
for t in wrk varnishd varnishadm jq h2load nginx hitch openssl; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish jq nghttp2-client nginx hitch openssl)" >&2; exit 2; }
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
varnish_proxy=$(free_port)
varnish_extra=(-a "127.0.0.1:$varnish_proxy,PROXY" -p feature=+http2)
. scripts/bench-pair.sh

# One certificate for all three.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench.test \
    -addext subjectAltName=DNS:bench.test -addext basicConstraints=critical,CA:FALSE \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cat "$work/cert.pem" "$work/key.pem" >"$work/bundle.pem"
printf 'pem-file = "%s"\n' "$work/bundle.pem" >"$work/tls.conf"
start_pair "" 256m -a tls=127.0.0.1:0,https -A "$work/tls.conf" -p feature=+http2
c_tls=$(awk '$1 == "tls" {print $3}' "$c_inst/_.listen")

n_port=$(free_port)
mkdir -p "$work/ngx"
cat >"$work/nginx.conf" <<NGX
daemon on;
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx.err;
$([ "$(id -u)" = 0 ] && echo "user root;")
events { worker_connections 4096; }
http {
    access_log off;
    # Not 1000 (the default): h2load does not reopen a connection nginx
    # closes after that many requests.
    keepalive_requests 1000000;
    proxy_cache_path $work/ngx levels=1:2 keys_zone=c:10m max_size=256m;
    upstream origin { server $origin; keepalive 32; }
    server {
        listen 127.0.0.1:$n_port ssl http2;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_session_cache shared:SSL:10m;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache c;
        }
    }
}
NGX
nginx -c "$work/nginx.conf" -p "$work"
h_port=$(free_port)
hitch --frontend="[127.0.0.1]:$h_port" --backend="[127.0.0.1]:$varnish_proxy" --write-proxy-v2=on \
    --alpn-protos="h2,http/1.1" --workers=2 --daemon=off $([ "$(id -u)" = 0 ] && echo --user=nobody) \
    "$work/bundle.pem" >"$work/hitch.log" 2>&1 &
pids+=($!)
stop_more() { [ -s "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; cleanup; }
trap stop_more EXIT
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 100); do listening "$h_port" && break; sleep 0.05; done
listening "$h_port" || { echo "bench: hitch did not start" >&2; cat "$work/hitch.log" >&2; exit 1; }
listening "$n_port" || { echo "bench: nginx did not start" >&2; cat "$work/nginx.err" >&2; exit 1; }

path="/size/1024?max_age=3600"
declare -A url=([cache-d]="https://127.0.0.1:$c_tls" [nginx]="https://127.0.0.1:$n_port" [hitch+varnishd]="https://127.0.0.1:$h_port")
order=(cache-d nginx hitch+varnishd)
for k in "${order[@]}"; do curl -sk -o /dev/null "${url[$k]}$path"; curl -sk -o /dev/null "${url[$k]}$path"; done
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
wrk_rps() { wrk -t1 -c50 -d"${secs}s" "$@" | awk '/^Requests\/sec/ {print $2}'; }
h2_rps() { h2load -c10 -m10 -t1 -D "$secs" "$1" 2>/dev/null | awk '/^finished in/ {print $4}'; }
bench_rps() { "$bin/cache-bench" run -q --json -k -t1 -d"${secs}s" "$@" | jq -r .rps; }

# measure NAME CMD...: run CMD (with URL appended) against each proxy in
# turn, $rounds times, and print the medians and ratios to cache-d.
measure() {
    local name=$1; shift
    declare -A got=()
    for _ in $(seq 1 "$rounds"); do
        for k in "${order[@]}"; do got[$k]+="$("$@" "${url[$k]}$path") "; done
    done
    local c; c=$(tr ' ' '\n' <<<"${got[cache-d]}" | grep . | median)
    printf '%-34s' "$name"
    for k in "${order[@]}"; do
        local m; m=$(tr ' ' '\n' <<<"${got[$k]}" | grep . | median)
        printf ' %16s' "$(awk -v m="$m" -v c="$c" -v k="$k" 'BEGIN {if (k == "cache-d") printf "%.0f", m; else printf "%.0f (%.2fx)", m, c/m}')"
    done
    echo
}

echo "1 KiB hits, medians of $rounds alternating rounds of ${secs}s; (Nx) = cache-d / that one; $varnish_config"
printf '%-34s %16s %16s %16s\n' "" "${order[@]}"
measure "TLS HTTP/1.1 hits/s (wrk -c50)" wrk_rps
measure "resumed handshakes/s (wrk, close)" wrk_rps -H "Connection: close"
measure "full handshakes/s (--new-conn)" bench_rps --new-conn -c50
measure "TLS h2 hits/s (h2load -c10 -m10)" h2_rps

echo
echo "HTTP/2 in the clear (prior knowledge), h2load -c10 -m10 -t1:"
c=(); v=()
for _ in $(seq 1 "$rounds"); do c+=("$(h2_rps "$c_url$path")"); v+=("$(h2_rps "$v_url$path")"); done
mc=$(printf '%s\n' "${c[@]}" | median); mv=$(printf '%s\n' "${v[@]}" | median)
awk -v c="$mc" -v v="$mv" 'BEGIN {printf "  cache-d %.0f   varnishd -p feature=+http2 %.0f   ratio %.2fx\n", c, v, c/v}'

echo
echo "load generators on cache-d's h2c listener, 10 connections x 10 streams, one thread:"
b=(); h=()
for _ in $(seq 1 "$rounds"); do
    b+=("$("$bin/cache-bench" run -q --json -t1 -c10 --h2 --streams 10 -d"${secs}s" "$c_url$path" | jq -r .rps)")
    h+=("$(h2_rps "$c_url$path")")
done
mb=$(printf '%s\n' "${b[@]}" | median); mh=$(printf '%s\n' "${h[@]}" | median)
awk -v b="$mb" -v h="$mh" 'BEGIN {printf "  cache-bench --h2 %.0f   h2load %.0f   ratio %.2fx\n", b, h, b/h}'
