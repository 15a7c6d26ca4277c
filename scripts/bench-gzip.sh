#!/usr/bin/env bash
# Compression, cache-d against varnishd side by side in one run (issue 17):
# hits/s on a 100 KiB text object the origin sends gzip (stored gzip by
# both), delivered
#   1. to gzip clients (sent as stored),
#   2. to clients that cannot take gzip (gunzipped on every hit),
# and, for the cost of the feature on the hit path, 3. hits on the same
# text stored plain; plus what cache-d alone does beyond Varnish:
#   4. Brotli copies (http_brotli_support, beresp.do_brotli) to br clients.
# wrk -t1 -c50, alternating rounds, medians. varnishd runs daemonized as
# packaged (scripts/bench-pair.sh). Compression itself runs once per fetch
# (n_gzip/n_test_gunzip stay at one per object), never per hit; only the
# gunzip for plain clients is per hit, as in Varnish.
# Usage: scripts/bench-gzip.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}
for t in wrk varnishd varnishadm; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish)" >&2; exit 2; }
done
. scripts/bench-pair.sh
cat >"$work/br.vcl" <<'VCL'
vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_backend_response { set beresp.do_brotli = true; }
VCL
start_pair "" 256m
# Brotli is cache-d's alone (varnishd cannot load the VCL): a second one.
sed "s/ORIGIN_PORT/${origin##*:}/" "$work/br.vcl" >"$work/br-policy.vcl"
"$bin/cache-d" -F -a 127.0.0.1:0 -f "$work/br-policy.vcl" -n "$work/br-inst" -s malloc,256m -p http_brotli_support=on &
pids+=($!)
until [ -s "$work/br-inst/_.listen" ]; do sleep 0.05; done
read -r _ ip port <"$work/br-inst/_.listen"
br_url="http://$ip:$port"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
rps() { # url [header]
    if [ -n "${2:-}" ]; then wrk -t1 -c50 -d"${secs}s" -H "$2" "$1"; else wrk -t1 -c50 -d"${secs}s" "$1"; fi | awk '/^Requests\/sec/ {print $2}'
}
echo "wrk -t1 -c50 -d${secs}s on hits of a 100 KiB text object, medians of $rounds alternating rounds; varnishd: $varnish_config"
printf '%-34s %14s %14s %7s\n' case "cache-d hits/s" "varnish hits/s" ratio
row() { # label path header
    local c=() v=()
    for u in "$c_url" "$v_url"; do curl -s -o /dev/null ${3:+-H "$3"} "$u$2"; wrk -t1 -c50 -d1s ${3:+-H "$3"} "$u$2" >/dev/null; done
    for _ in $(seq 1 "$rounds"); do
        c+=("$(rps "$c_url$2" "${3:-}")"); v+=("$(rps "$v_url$2" "${3:-}")")
    done
    local mc mv
    mc=$(printf '%s\n' "${c[@]}" | median); mv=$(printf '%s\n' "${v[@]}" | median)
    awk -v l="$1" -v a="$mc" -v b="$mv" 'BEGIN {printf "%-34s %14.0f %14.0f %6.2fx\n", l, a, b, a/b}'
}
gz="/text/102400?gzip=1&max_age=3600"
row "gzip-stored, gzip client" "$gz" "Accept-Encoding: gzip"
row "gzip-stored, plain client (gunzip)" "$gz" ""
row "plain-stored, plain client" "/text/102400?max_age=3600" ""
curl -s -o /dev/null -H "Accept-Encoding: br" "$br_url$gz"
c=(); for _ in $(seq 1 "$rounds"); do c+=("$(rps "$br_url$gz" "Accept-Encoding: br, gzip")"); done
mc=$(printf '%s\n' "${c[@]}" | median)
awk -v a="$mc" 'BEGIN {printf "%-34s %14.0f %14s %7s\n", "Brotli copy, br client", a, "(no Brotli)", "-"}'
n() { "$bin/cache-stat" -1 -n "$c_inst" -f "$1" | awk '{print $2}'; }
echo "cache-d: n_test_gunzip $(n MAIN.n_test_gunzip) (once per fetch), n_gunzip $(n MAIN.n_gunzip) (per plain-client hit)"
echo "cache-d with Brotli: n_brotli $("$bin/cache-stat" -1 -n "$work/br-inst" -f MAIN.n_brotli | awk '{print $2}') (once per fetch)"
