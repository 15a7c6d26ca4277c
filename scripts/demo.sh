#!/usr/bin/env bash
# The demo: build, start the test origin and cache-d in front of it on free
# loopback ports with a throw-away instance directory, send some requests,
# show the access log and the counters, stop everything.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null || { echo "demo: needs curl (apt-get install curl)" >&2; exit 2; }
. scripts/stack.sh
echo "== origin on $origin"
echo "== cache-d on $ip:$port, instance dir $work/inst"

urls=()
for i in $(seq 1 200); do urls+=("http://$ip:$port/size/$(( (i % 20) * 512 ))?max_age=60"); done
echo "== 200 requests through cache-d: 20 objects, 10 requests each"
curl -s "${urls[@]}" >/dev/null
echo "== the origin answered: $(curl -s "http://$origin/__stats")"
echo "== cache-ncsa -d (last 3 lines)"
"$bin/cache-ncsa" -d -n "$work/inst" | tail -n 3
echo "== cache-stat -1"
"$bin/cache-stat" -1 -n "$work/inst"
