#!/usr/bin/env bash
# Cache hits, cache-d against varnishd side by side in one run:
#  1. closed loop: wrk -t1 -c50 on hits of 1 B, 1 KiB, 10 KiB, 100 KiB and
#     1 MiB objects, alternating between the two, medians of the rounds;
#  2. open loop: cache-bench -r at 50% and 80% of varnishd's measured
#     capacity for 1 KiB, 100 KiB and 1 MiB, p99 and p99.9 (corrected for
#     coordinated omission), alternating, medians.
# Both get the same origin (the test origin) and -s malloc,256m. varnishd
# (Debian's 7.1) runs daemonized as its package runs it (-j unix,user=vcache,
# no -F): the fastest of the configurations we tried (README, Benchmarks).
# With a VCL file as the third argument (ORIGIN_PORT in it is replaced by
# the test origin's port), both run that policy (-f) instead of -b.
# Goals (issue 16) are printed next to each ratio.
# Usage: scripts/bench-hits.sh [seconds-per-run] [rounds] [policy.vcl]
#   BENCH_SIZES="1 10240" BENCH_OPEN=0 ... narrow a run;
#   BENCH_CLIENT=cache-bench measures the closed loop with cache-bench -t2.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; vclsrc=${3:-}
sizes=${BENCH_SIZES:-1 1024 10240 102400 1048576}
open_sizes=${BENCH_OPEN_SIZES:-1024 102400 1048576}
for t in wrk varnishd varnishadm jq; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish jq)" >&2; exit 2; }
done
. scripts/bench-pair.sh
start_pair "$vclsrc" 256m

# The closed-loop client: wrk -t1 (default) or, with BENCH_CLIENT=cache-bench,
# cache-bench with two generator threads (a client that is not itself the
# bottleneck on large objects).
client=${BENCH_CLIENT:-wrk}
rps() {
    if [ "$client" = cache-bench ]; then
        "$bin/cache-bench" run -q --json -t2 -c50 -d"${secs}s" "$1" | jq -r .rps
    else
        wrk -t1 -c50 -d"${secs}s" "$1" | awk '/^Requests\/sec/ {print $2}'
    fi
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
goal() { # size ratio -> "goal >=X met|MISSED" for the sizes issue 16 names
    local want=""
    case $1 in 1|10240) want=1.5 ;; 102400|1048576) want=1.2 ;; esac
    [ -n "$want" ] || return 0
    awk -v r="$2" -v w="$want" 'BEGIN {printf "goal >=%.1fx %s", w, (r >= w) ? "met" : "MISSED"}'
}

if [ "$client" = cache-bench ]; then cl="cache-bench -t2 -c50"; else cl="wrk -t1 -c50"; fi
echo "closed loop: $cl -d${secs}s, medians of $rounds alternating rounds; varnishd: $varnish_config"
printf '%-8s %14s %14s %7s\n' size "cache-d hits/s" "varnish hits/s" ratio
declare -A cap
for size in $sizes; do
    path="/size/$size?max_age=3600"
    for u in "$c_url" "$v_url"; do curl -s -o /dev/null "$u$path"; wrk -t1 -c50 -d1s "$u$path" >/dev/null; done
    c=(); v=()
    for _ in $(seq 1 "$rounds"); do
        c+=("$(rps "$c_url$path")"); v+=("$(rps "$v_url$path")")
    done
    mc=$(printf '%s\n' "${c[@]}" | median); mv=$(printf '%s\n' "${v[@]}" | median)
    cap[$size]=$mv
    ratio=$(awk -v a="$mc" -v b="$mv" 'BEGIN {printf "%.2f", a/b}')
    printf '%-8s %14.0f %14.0f %6sx  %s\n' "$size" "$mc" "$mv" "$ratio" "$(goal "$size" "$ratio")"
done

[ "${BENCH_OPEN:-1}" = 1 ] || exit 0
echo
echo "open loop: cache-bench -c50 -r RATE -d${secs}s (latency from each request's due time), medians of $rounds alternating rounds"
printf '%-8s %5s %8s %11s %11s %11s %11s  %s\n' size load rate "cache-d p99" "varnish p99" "c p99.9" "v p99.9" verdict
openloop() { # url rate -> "p99 p99.9" in ms
    "$bin/cache-bench" run -q --json -c50 -r "$2" -d"${secs}s" "$1" | jq -r '"\(.latency_ms.p99) \(.latency_ms.p999)"'
}
for size in $open_sizes; do
    path="/size/$size?max_age=3600"
    if [ -z "${cap[$size]:-}" ]; then
        for u in "$c_url" "$v_url"; do curl -s -o /dev/null "$u$path"; done
        cap[$size]=$(for _ in $(seq 1 "$rounds"); do rps "$v_url$path"; done | median)
    fi
    for load in 50 80; do
        rate=$(awk -v c="${cap[$size]}" -v l="$load" 'BEGIN {printf "%d", c*l/100}')
        : >"$work/oc"; : >"$work/ov"
        for _ in $(seq 1 "$rounds"); do
            openloop "$c_url$path" "$rate" >>"$work/oc"
            openloop "$v_url$path" "$rate" >>"$work/ov"
        done
        c99=$(awk '{print $1}' "$work/oc" | median); c999=$(awk '{print $2}' "$work/oc" | median)
        v99=$(awk '{print $1}' "$work/ov" | median); v999=$(awk '{print $2}' "$work/ov" | median)
        verdict=$(awk -v a="$c99" -v b="$v99" -v x="$c999" -v y="$v999" 'BEGIN {print (a <= b && x <= y) ? "goal met" : "goal MISSED"}')
        printf '%-8s %4s%% %8s %9sms %9sms %9sms %9sms  %s\n' "$size" "$load" "$rate" "$c99" "$v99" "$c999" "$v999" "$verdict"
    done
done
