#!/usr/bin/env bash
# Forwarding cost: wrk against the test origin directly and through cache-d
# with every request passed (a Cookie header, as the built-in policy
# passes those), in one run, alternating; prints medians and the ratio.
# If varnishd is installed, Varnish in pass mode (every request forwarded, as
# cache-d does until caching lands) joins the rotation for a like-for-like
# ratio.
# Usage: scripts/bench-proxy.sh [seconds-per-run] [rounds] [path]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; path=${3:-/size/1024}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
. scripts/stack.sh

vport=""
if command -v varnishd >/dev/null; then
    ohost=${origin%:*}; oport=${origin##*:}
    printf 'vcl 4.1;\nbackend default { .host = "%s"; .port = "%s"; }\nsub vcl_recv { return (pass); }\n' "$ohost" "$oport" >"$work/pass.vcl"
    varnishd -j none -F -a 127.0.0.1:0 -f "$work/pass.vcl" -n "$work/varnish" -s malloc,64m >"$work/varnish.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        vport=$(varnishadm -n "$work/varnish" debug.listen_address 2>/dev/null | awk '{print $3; exit}') && [ -n "$vport" ] && break
        sleep 0.1
    done
fi

rps() { wrk -t1 -c32 -d"${secs}s" -H "Cookie: bench=1" "$1" | awk '/^Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
o=(); c=(); v=()
for r in $(seq 1 "$rounds"); do
    o+=("$(rps "http://$origin$path")")
    c+=("$(rps "http://$ip:$port$path")")
    msg="round $r: origin ${o[-1]} req/s, through cache-d ${c[-1]} req/s"
    if [ -n "$vport" ]; then
        v+=("$(rps "http://127.0.0.1:$vport$path")")
        msg="$msg, through varnishd (pass) ${v[-1]} req/s"
    fi
    echo "$msg" >&2
done
mo=$(printf '%s\n' "${o[@]}" | median); mc=$(printf '%s\n' "${c[@]}" | median)
echo "path $path, wrk -t1 -c32 -d${secs}s, $rounds rounds (median req/s)"
echo "origin direct:    $mo"
echo "through cache-d:  $mc"
awk -v a="$mc" -v b="$mo" 'BEGIN {printf "ratio cache-d/origin: %.2f\n", a/b}'
if [ -n "$vport" ]; then
    mv=$(printf '%s\n' "${v[@]}" | median)
    echo "through varnishd: $mv (return(pass))"
    awk -v a="$mc" -v b="$mv" 'BEGIN {printf "ratio cache-d/varnishd: %.2f\n", a/b}'
fi
echo "cache-d counters: $("$bin/cache-stat" -1 -n "$work/inst" -f MAIN.client_req -f MAIN.backend_req | awk '{printf "%s=%s ", $1, $2}')"
