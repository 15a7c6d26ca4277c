#!/usr/bin/env bash
# The demo: build, start the test origin and cache-d in front of it on free
# loopback ports with a throw-away instance directory, send a short load
# with cache-bench (200 objects picked by Zipf popularity, so most requests
# hit), show its summary beside the cache's own counters and the access
# log, stop everything.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null || { echo "demo: needs curl (apt-get install curl)" >&2; exit 2; }
. scripts/stack.sh
echo "== origin on $origin"
echo "== cache-d on $ip:$port, instance dir $work/inst"

for i in $(seq 1 200); do echo "/size/$(( i * 100 ))?max_age=60"; done >"$work/urls.txt"
echo "== cache-bench: 3 s, 16 connections, 200 URLs by Zipf popularity, server counters sampled"
"$bin/cache-bench" run "http://$ip:$port/" --urls "$work/urls.txt" --zipf 1 -c 16 -d 3s --stat "$work/inst" --csv "$work/run.csv" -q
echo "== the origin answered: $(curl -s "http://$origin/__stats")"
echo "== cache-bench --csv (per second)"
cat "$work/run.csv"
echo "== cache-ncsa -d (last 3 lines)"
"$bin/cache-ncsa" -d -n "$work/inst" | tail -n 3
echo "== cache-stat -1 -f 'MAIN.*' -f 'VBE.*'"
"$bin/cache-stat" -1 -n "$work/inst" -f 'MAIN.*' -f 'VBE.*'
