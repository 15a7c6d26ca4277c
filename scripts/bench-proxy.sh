#!/usr/bin/env bash
# wrk against the test origin directly and through cache-d, in one run,
# alternating, and print the medians and the ratio (cache-d / origin).
# Usage: scripts/bench-proxy.sh [seconds-per-run] [rounds] [path]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; path=${3:-/size/1024}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
cargo build --release --workspace --locked >/dev/null
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$bin/cache-bench" origin --listen 127.0.0.1:0 >"$work/origin.out" &
pids+=($!)
until grep -q listening "$work/origin.out" 2>/dev/null; do sleep 0.05; done
origin=$(sed -n 's/^listening on //p' "$work/origin.out")
"$bin/cache-d" -F -a 127.0.0.1:0 -b "$origin" -n "$work/inst" &
pids+=($!)
until [ -s "$work/inst/_.listen" ]; do sleep 0.05; done
read -r _ ip port <"$work/inst/_.listen"

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
