#!/usr/bin/env bash
# Two cache-d builds side by side on cache hits (same origin, same storage),
# wrk alternating between them, medians of the rounds: does a change cost
# anything on the hot path?
# Build the old one first, e.g.:
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p cache-d)
# Usage: scripts/bench-builds.sh OLD_CACHE_D [NEW_CACHE_D] [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/bench-builds.sh OLD_CACHE_D [NEW_CACHE_D] [seconds] [rounds]}
cargo build --release --workspace --locked >&2
new=${2:-target/release/cache-d}; secs=${3:-5}; rounds=${4:-3}
command -v wrk >/dev/null || { echo "bench: needs wrk" >&2; exit 2; }
w=$(mktemp -d); pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
target/release/cache-bench origin --listen 127.0.0.1:0 >"$w/origin" & pids+=($!)
until [ -s "$w/origin" ]; do sleep 0.05; done
origin=$(awk '{print $NF}' "$w/origin"); origin=${origin##*/}
"$old" -F -a 127.0.0.1:0 -b "$origin" -n "$w/old" -s malloc,256m 2>/dev/null & pids+=($!)
"$new" -F -a 127.0.0.1:0 -b "$origin" -n "$w/new" -s malloc,256m 2>/dev/null & pids+=($!)
until [ -s "$w/old/_.listen" ] && [ -s "$w/new/_.listen" ]; do sleep 0.05; done
read -r _ _ po <"$w/old/_.listen"; read -r _ _ pn <"$w/new/_.listen"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-8s %12s %12s %7s\n' size old-req/s new-req/s ratio
for size in 1 10240 102400; do
    url() { echo "http://127.0.0.1:$1/size/$size?max_age=3600"; }
    for p in $po $pn; do wrk -t1 -c32 -d2s "$(url $p)" >/dev/null; done
    : >"$w/o"; : >"$w/n"
    for _ in $(seq "$rounds"); do
        wrk -t1 -c32 -d"${secs}s" "$(url $po)" | awk '/Requests\/sec/ {print $2}' >>"$w/o"
        wrk -t1 -c32 -d"${secs}s" "$(url $pn)" | awk '/Requests\/sec/ {print $2}' >>"$w/n"
    done
    o=$(median <"$w/o"); n=$(median <"$w/n")
    printf '%-8s %12.0f %12.0f %6.2fx\n' "$size" "$o" "$n" "$(echo "$n / $o" | bc -l)"
done
echo "(wrk -t1 -c32 -d${secs}s, medians of $rounds alternating rounds)"
