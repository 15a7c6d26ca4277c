#!/usr/bin/env bash
# Is cache-bench fast enough to saturate a cache? wrk and cache-bench, with
# the same connections and one thread each, take turns against the same
# target — cache-d serving one cached object — and the medians of the
# rounds are compared (the issue asks for at least 0.9x wrk).
# Usage: scripts/bench-generator.sh [seconds-per-run] [rounds] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; conns=${3:-32}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
. scripts/stack.sh
url="http://$ip:$port/size/100?max_age=3600"
curl -s -o /dev/null "$url" || true   # cache it

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
w=(); b=()
for r in $(seq 1 "$rounds"); do
    w+=("$(wrk -t1 -c"$conns" -d"${secs}s" "$url" | awk '/^Requests\/sec/ {print $2}')")
    b+=("$("$bin/cache-bench" run "$url" -t1 -c"$conns" -d"${secs}s" -q --json | awk -F': ' '/"rps"/ {gsub(",", "", $2); print $2}')")
    echo "round $r: wrk ${w[-1]} req/s, cache-bench ${b[-1]} req/s" >&2
done
mw=$(printf '%s\n' "${w[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
echo "wrk         req/s (median of $rounds, -t1 -c$conns): $mw"
echo "cache-bench req/s (median of $rounds, -t1 -c$conns): $mb"
echo "ratio cache-bench/wrk: $(echo "$mb / $mw" | bc -l | cut -c1-5)x"
