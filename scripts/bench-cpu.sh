#!/usr/bin/env bash
# CPU per request (issue 37), cache-d against varnishd side by side in one
# run: both get the same open-loop rate of cache hits (cache-bench -r, below
# both servers' capacity), and each server's own CPU time (utime + stime of
# its manager and its child, from /proc/PID/stat, over the run) is divided
# by the requests it answered. On this 2-core machine the load generator
# shares the cores, so requests per second mostly measure the client; CPU
# per request is what the server costs.
# Rows: hits of 1 B, 1 KiB, 10 KiB, 100 KiB and 1 MiB objects at the rates
# issue 37 names, 20 connections, ROUNDS alternating rounds of SECS seconds,
# medians. Both run as bench-pair.sh starts them (varnishd daemonized as
# packaged), -s malloc,512m, the test origin behind them.
# Usage: scripts/bench-cpu.sh [secs] [rounds]
#   BENCH_ROWS="1:12000 1048576:500" picks the rows (size:rate).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}; rounds=${2:-3}
rows=${BENCH_ROWS:-1:12000 1024:12000 10240:10000 102400:4000 1048576:500}
for t in wrk varnishd varnishadm jq; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish jq)" >&2; exit 2; }
done
. scripts/bench-pair.sh
start_pair "" 512m
c_mgr=${pids[-1]}
v_mgr=$(cat "$work/varnish.pid")
tick=$(getconf CLK_TCK)

# utime + stime of these processes, in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the command name's closing parenthesis).
cpu_ticks() {
    local total=0 p rest
    for p in "$@"; do
        rest=$(sed 's/^.*) //' "/proc/$p/stat")
        set -- $rest
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}

# One run: SERVER-URL SIZE RATE PIDS...; prints µs of CPU per request.
run_one() {
    local url=$1 size=$2 rate=$3; shift 3
    local before after n
    before=$(cpu_ticks "$@")
    "$bin/cache-bench" run -r "$rate" -c 20 -d "${secs}s" --json "$url/size/$size?max_age=3600" >"$work/run.json" 2>/dev/null
    after=$(cpu_ticks "$@")
    n=$(jq '.requests' "$work/run.json")
    [ "$n" -gt 0 ] || { echo "bench: no request answered at $url" >&2; exit 1; }
    echo "scale=2; ($after - $before) * 1000000 / $tick / $n" | bc
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "CPU per hit at a fixed open-loop rate ($secs s rounds, $rounds alternating, medians; $varnish_config)"
printf '%-8s %8s %16s %16s %7s\n' size rate cache-d-us/req varnishd-us/req ratio
for row in $rows; do
    size=${row%%:*}; rate=${row##*:}
    # The object in both caches first.
    for u in "$c_url" "$v_url"; do "$bin/cache-bench" run -n 20 -c 2 "$u/size/$size?max_age=3600" >/dev/null 2>&1; done
    : >"$work/c"; : >"$work/v"
    for _ in $(seq "$rounds"); do
        run_one "$c_url" "$size" "$rate" "$c_mgr" "$c_child" >>"$work/c"
        run_one "$v_url" "$size" "$rate" "$v_mgr" "$v_child" >>"$work/v"
    done
    c=$(median <"$work/c"); v=$(median <"$work/v")
    printf '%-8s %8s %16.1f %16.1f %6.2fx\n' "$size" "$rate/s" "$c" "$v" "$(echo "$c / $v" | bc -l)"
done
