#!/usr/bin/env bash
# wrk against the test origin directly and through cache-d, in one run,
# alternating, and print the medians and the ratio (cache-d / origin).
# Usage: scripts/bench-proxy.sh [seconds-per-run] [rounds] [path]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; path=${3:-/size/1024}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
. scripts/stack.sh

rps() { wrk -t1 -c32 -d"${secs}s" "$1" | awk '/^Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
o=(); c=()
for r in $(seq 1 "$rounds"); do
    o+=("$(rps "http://$origin$path")")
    c+=("$(rps "http://$ip:$port$path")")
    echo "round $r: origin ${o[-1]} req/s, through cache-d ${c[-1]} req/s" >&2
done
mo=$(printf '%s\n' "${o[@]}" | median); mc=$(printf '%s\n' "${c[@]}" | median)
echo "path $path, wrk -t1 -c32 -d${secs}s, $rounds rounds (median req/s)"
echo "origin direct:    $mo"
echo "through cache-d:  $mc"
awk -v a="$mc" -v b="$mo" 'BEGIN {printf "ratio cache-d/origin: %.2f\n", a/b}'
echo "cache-d counters: $("$bin/cache-stat" -1 -n "$work/inst" -f MAIN.client_req -f MAIN.backend_req | awk '{printf "%s=%s ", $1, $2}')"
