#!/usr/bin/env bash
# Miss throughput and backend connection reuse: wrk asks for a new URL on
# every request (a Lua counter), so every request is a cache miss and a
# backend fetch over keep-alive connections; cache-d and (if installed)
# varnishd in turn, medians of the rounds; then each one's
# backend_reuse / backend_req.
# Usage: scripts/bench-miss.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
. scripts/stack.sh

cat >"$work/miss.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/size/1024?max_age=600&n=" .. n .. "&t=" .. os.time() .. math.random(1, 1000000000))
end
LUA

vport=""
if command -v varnishd >/dev/null; then
    varnishd -j none -F -a 127.0.0.1:0 -b "$origin" -n "$work/varnish" -s malloc,256m >"$work/varnish.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        vport=$(varnishadm -n "$work/varnish" debug.listen_address 2>/dev/null | awk '{print $3; exit}') && [ -n "$vport" ] && break
        sleep 0.1
    done
fi

rps() { wrk -t2 -c16 -d"${secs}s" -s "$work/miss.lua" "$1" | awk '/^Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
c=(); v=()
for r in $(seq 1 "$rounds"); do
    c+=("$(rps "http://$ip:$port")")
    msg="round $r: cache-d ${c[-1]} misses/s"
    if [ -n "$vport" ]; then
        v+=("$(rps "http://127.0.0.1:$vport")")
        msg="$msg, varnishd ${v[-1]} misses/s"
    fi
    echo "$msg" >&2
done
stat() { "$bin/cache-stat" -1 -n "$work/inst" -f "$1" | awk '{print $2}'; }
reuse=$(stat MAIN.backend_reuse); req=$(stat MAIN.backend_req); conn=$(stat MAIN.backend_conn)
mc=$(printf '%s\n' "${c[@]}" | median)
echo "cache-d  misses/s (median of $rounds): $mc; backend_req $req, backend_conn $conn, backend_reuse $reuse, reuse/req $(echo "$reuse / $req" | bc -l | cut -c1-6)"
if [ -n "$vport" ]; then
    vs() { varnishstat -n "$work/varnish" -1 -f "$1" | awk '{print $2}'; }
    vreuse=$(vs MAIN.backend_reuse); vreq=$(vs MAIN.backend_req)
    mv=$(printf '%s\n' "${v[@]}" | median)
    echo "varnishd misses/s (median of $rounds): $mv; backend_req $vreq, backend_reuse $vreuse, reuse/req $(echo "$vreuse / $vreq" | bc -l | cut -c1-6)"
    echo "ratio cache-d/varnishd: $(echo "$mc / $mv" | bc -l | cut -c1-5)x"
fi
