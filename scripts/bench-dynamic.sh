#!/usr/bin/env bash
# What a dynamic director costs per request: the same passes (every
# request fetched from the test origin, 1 KiB) and the same hits through
# cache-d with a static backend and with `dynamic.director` +
# `d.backend("127.0.0.1")` (an address: no DNS in the measurement, only
# the director's work), in alternating rounds; medians and the ratio
# dynamic/static. varnishd (the static policy, daemonized as packaged) is
# there for scale: vmod-dynamic is not packaged for Debian.
# Usage: scripts/bench-dynamic.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
. scripts/stack.sh
oport=${origin##*:}

start() { # name vcl-file
    "$bin/cache-d" -F -a 127.0.0.1:0 -n "$work/$1" -f "$2" -s malloc,256m >"$work/$1.log" 2>&1 &
    pids+=($!)
    until [ -s "$work/$1/_.listen" ]; do sleep 0.05; done
}
policy() { # hint-lines init-lines
    cat <<VCL
vcl 4.1;
import dynamic;
backend origin { .host = "127.0.0.1"; .port = "$oport"; }
sub vcl_init { $2 }
sub vcl_recv {
    $1
    if (req.url ~ "[?&]pass=1") { return (pass); }
}
VCL
}
policy 'set req.backend_hint = origin;' '' >"$work/static.vcl"
grep -v "import dynamic" "$work/static.vcl" >"$work/varnish.vcl"
chmod a+x "$work"; chmod a+r "$work/varnish.vcl"  # varnishd reads it as its own user
policy 'set req.backend_hint = d.backend("127.0.0.1");' "new d = dynamic.director(port = \"$oport\", ttl = 10s);" >"$work/dynamic.vcl"
start static "$work/static.vcl"
start dynamic "$work/dynamic.vcl"
sport=$(awk '{print $3}' "$work/static/_.listen")
dport=$(awk '{print $3}' "$work/dynamic/_.listen")

vport=""
if command -v varnishd >/dev/null; then
    # As packaged: daemonized, dropping privileges to the vcache user.
    varnishd -a 127.0.0.1:0 -f "$work/varnish.vcl" -n "$work/varnish" -s malloc,256m -P "$work/varnish.pid"
    for _ in $(seq 100); do
        vport=$(varnishadm -n "$work/varnish" debug.listen_address 2>/dev/null | awk '{print $3; exit}') && [ -n "$vport" ] && break
        sleep 0.1
    done
    trap 'kill "$(cat "$work/varnish.pid")" 2>/dev/null || true; cleanup' EXIT
fi

rps() { wrk -t2 -c32 -d"${secs}s" "$1" | awk '/^Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for kind in pass hit; do
    url="/size/1024?pass=1"; [ "$kind" = hit ] && url="/size/1024?max_age=600"
    s=(); d=(); v=()
    for r in $(seq 1 "$rounds"); do
        s+=("$(rps "http://127.0.0.1:$sport$url")")
        d+=("$(rps "http://127.0.0.1:$dport$url")")
        [ -n "$vport" ] && v+=("$(rps "http://127.0.0.1:$vport$url")")
        echo "$kind round $r: static ${s[-1]}/s, dynamic ${d[-1]}/s${vport:+, varnishd ${v[-1]:-}/s}" >&2
    done
    ms=$(printf '%s\n' "${s[@]}" | median); md=$(printf '%s\n' "${d[@]}" | median)
    line="$kind/s (median of $rounds): static $ms, dynamic $md, dynamic/static $(echo "$md / $ms" | bc -l | cut -c1-5)x"
    if [ -n "$vport" ]; then
        mv=$(printf '%s\n' "${v[@]}" | median)
        line="$line; varnishd (static) $mv, dynamic/varnishd $(echo "$md / $mv" | bc -l | cut -c1-5)x"
    fi
    echo "$line"
done
"$bin/cache-adm" -n "$work/dynamic" backend.list
