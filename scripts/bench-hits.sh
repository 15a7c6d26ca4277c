#!/usr/bin/env bash
# Cache hits: cache-d and varnishd (Debian's varnish, -b to the same origin,
# -s malloc,256m) side by side in one run, wrk on hits of 1 B, 10 KiB and
# 100 KiB objects, alternating, medians of the rounds; then the RSS of each
# after caching 100,000 objects of 1 KiB.
# With a VCL file as the fourth argument (ORIGIN_PORT in it is replaced by
# the test origin's port), both run that policy (-f) instead of -b.
# Usage: scripts/bench-hits.sh [seconds-per-run] [rounds] [objects-for-rss] [policy.vcl]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; nobj=${3:-100000}; vclsrc=${4:-}
for t in wrk varnishd varnishadm varnishstat; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish)" >&2; exit 2; }
done
. scripts/stack.sh
# stack.sh started cache-d with defaults; restart it with the same storage as Varnish.
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'
rm -f "$work/inst/_.listen"
policy=(-b "$origin")
if [ -n "$vclsrc" ]; then
    sed "s/ORIGIN_PORT/${origin##*:}/" "$vclsrc" >"$work/policy.vcl"
    policy=(-f "$work/policy.vcl")
    echo "policy: $vclsrc (both)"
fi
"$bin/cache-d" -F -a 127.0.0.1:0 "${policy[@]}" -n "$work/inst" -s malloc,256m &
cpid=$!; pids+=($cpid)
until [ -s "$work/inst/_.listen" ]; do sleep 0.05; done
read -r _ ip port <"$work/inst/_.listen"
varnishd -j none -F -a 127.0.0.1:0 "${policy[@]}" -n "$work/varnish" -s malloc,256m -p default_ttl=3600 >"$work/varnish.log" 2>&1 &
vpid=$!; pids+=($vpid)
vport=""
for _ in $(seq 200); do
    vport=$(varnishadm -n "$work/varnish" debug.listen_address 2>/dev/null | awk '{print $3; exit}') && [ -n "$vport" ] && break
    sleep 0.1
done
[ -n "$vport" ] || { echo "bench: varnishd did not start" >&2; cat "$work/varnish.log" >&2; exit 1; }

# wrk prints "Requests/sec: N" and, with --latency, "99% X{us,ms,s}".
measure() {
    wrk -t1 -c32 -d"${secs}s" --latency "$1" | awk '
        /^Requests\/sec/ {rps=$2}
        $1=="99%" {v=$2; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
                   f=(u=="us")?0.001:(u=="ms")?1:(u=="s")?1000:1; p99=v*f}
        END {printf "%s %.3f\n", rps, p99}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Warm both up (first touches of log and storage pages) before measuring.
wrk -t1 -c32 -d2s "http://$ip:$port/size/1?max_age=3600" >/dev/null
wrk -t1 -c32 -d2s "http://127.0.0.1:$vport/size/1?max_age=3600" >/dev/null
printf '%-8s %14s %14s %12s %12s %8s\n' size "cache-d req/s" "varnish req/s" "cache-d p99" "varnish p99" ratio
for size in 1 10240 102400; do
    path="/size/$size?max_age=3600"
    curl -s -o /dev/null "http://$ip:$port$path"; curl -s -o /dev/null "http://127.0.0.1:$vport$path"
    c=(); v=(); cl=(); vl=()
    for r in $(seq 1 "$rounds"); do
        read -r a b < <(measure "http://$ip:$port$path"); c+=("$a"); cl+=("$b")
        read -r a b < <(measure "http://127.0.0.1:$vport$path"); v+=("$a"); vl+=("$b")
    done
    mc=$(printf '%s\n' "${c[@]}" | median); mv=$(printf '%s\n' "${v[@]}" | median)
    mcl=$(printf '%s\n' "${cl[@]}" | median); mvl=$(printf '%s\n' "${vl[@]}" | median)
    awk -v s="$size" -v a="$mc" -v b="$mv" -v x="$mcl" -v y="$mvl" \
        'BEGIN {printf "%-8s %14.0f %14.0f %10.2fms %10.2fms %7.2fx\n", s, a, b, x, y, a/b}'
done
echo "(wrk -t1 -c32 -d${secs}s, medians of $rounds alternating rounds; ratio = cache-d/varnish hits/s)"

# RSS after caching $nobj objects of 1 KiB: a wrk Lua script walks the URLs.
cat >"$work/fill.lua" <<LUA
local n = 0
request = function()
    n = n + 1
    return wrk.format(nil, "/size/1024?max_age=3600&n=" .. (n % $nobj))
end
LUA
counter() { # who name
    if [ "$1" = cache-d ]; then
        "$bin/cache-stat" -1 -n "$work/inst" -f "$2" | awk '{print $2}'
    else
        varnishstat -n "$work/varnish" -1 -f "$2" | awk '{print $2}'
    fi
}
objects() { counter "$1" MAIN.n_object; }
vchild=$(pgrep -P "$vpid" | head -n1)
# Both run a manager and a child that holds the cache: measure the children.
cchild=$(pgrep -P "$cpid" | head -n1)
for who in cache-d varnish; do
    if [ "$who" = cache-d ]; then url="http://$ip:$port/"; pid=$cchild; else url="http://127.0.0.1:$vport/"; pid=$vchild; fi
    for _ in $(seq 20); do
        n=$(objects "$who"); [ "${n:-0}" -ge "$nobj" ] && break
        wrk -t1 -c16 -d3s -s "$work/fill.lua" "$url" >/dev/null
    done
    # RssAnon is the heap (objects, indexes); RssFile/RssShmem the mapped
    # shared-memory log and counters that were touched.
    awk -v who="$who" -v n="$(objects "$who")" -v g="$(counter "$who" SMA.s0.g_bytes)" '
        /^VmRSS|^RssAnon|^RssFile|^RssShmem/ {v[$1]=$2/1024}
        END {printf "%-8s objects %8s  RSS %7.1f MiB (anon %.1f, file %.1f, shmem %.1f); storage accounts %.1f MiB\n", who, n, v["VmRSS:"], v["RssAnon:"], v["RssFile:"], v["RssShmem:"], g/1048576}' "/proc/$pid/status"
done
