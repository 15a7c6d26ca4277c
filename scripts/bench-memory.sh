#!/usr/bin/env bash
# Bytes per object, cache-d against varnishd side by side (issue 16):
#  1. the same -s budget (default malloc,32m) and N distinct objects
#     requested (default 100,000) of 1 KiB and of 10 KiB: how many each
#     keeps, and the anonymous memory of the process that holds the cache
#     (the child) against the budget + 10%;
#  2. a budget that holds all N objects of 1 KiB: anonymous memory per
#     cached object (after minus before, divided by the objects).
# varnishd is daemonized as packaged (scripts/bench-pair.sh).
# Usage: scripts/bench-memory.sh [objects] [budget]
set -euo pipefail
cd "$(dirname "$0")/.."
nobj=${1:-100000}; budget=${2:-32m}
for t in wrk varnishd varnishadm varnishstat; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish)" >&2; exit 2; }
done
. scripts/bench-pair.sh

counter() { # who name
    if [ "$1" = cache-d ]; then
        "$bin/cache-stat" -1 -n "$c_inst" -f "$2" | awk '{print $2}'
    else
        varnishstat -n "$v_inst" -1 -f "$2" | awk '{print $2}'
    fi
}
anon_kib() { awk '/^RssAnon/ {print $2}' "/proc/$1/status"; }
stop_pair() {
    [ -s "$work/varnish.pid" ] && kill "$(cat "$work/varnish.pid")" 2>/dev/null
    for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done
    pids=("${pids[0]}")
    sleep 1
    rm -rf "$work/inst" "$work/varnish" "$work/varnish.pid"
}

budget_bytes=$(numfmt --from=iec "${budget^^}")
echo "same budget: -s malloc,$budget, $nobj distinct objects requested once each; varnishd: daemonized as packaged"
printf '%-8s %-8s %9s %12s %14s  %s\n' size who objects "anon MiB" "anon/budget" ""
for size in 1024 10240; do
    start_pair "" "$budget"
    declare -A kept anon
    for who in cache-d varnish; do
        if [ "$who" = cache-d ]; then url=$c_url; pid=$c_child; else url=$v_url; pid=$v_child; fi
        fill "$url" "$size" "$nobj" $(( nobj + nobj / 20 ))
        kept[$who]=$(counter "$who" MAIN.n_object); anon[$who]=$(anon_kib "$pid")
        awk -v s="$size" -v w="$who" -v n="${kept[$who]}" -v a="${anon[$who]}" -v b="$budget_bytes" \
            'BEGIN {printf "%-8s %-8s %9d %12.1f %13.2fx  %s\n", s, w, n, a/1024, a*1024/b, (w == "cache-d") ? ((a*1024 <= b*1.1) ? "within budget+10%" : "OVER budget+10%") : ""}'
    done
    awk -v a="${kept[cache-d]}" -v b="${kept[varnish]}" \
        'BEGIN {printf "%-8s objects kept cache-d/varnishd %.2fx  goal >=1.00x %s\n", "", a/b, (a >= b) ? "met" : "MISSED"}'
    stop_pair
done

echo
echo "per object: $nobj objects of 1 KiB in a budget that holds them all (-s malloc,1g)"
start_pair "" 1g
for who in cache-d varnish; do
    if [ "$who" = cache-d ]; then url=$c_url; pid=$c_child; else url=$v_url; pid=$v_child; fi
    curl -s -o /dev/null "$url/size/1024?max_age=3600&n=warm"
    before=$(anon_kib "$pid")
    fill "$url" 1024 "$nobj" $(( nobj + nobj / 20 ))
    after=$(anon_kib "$pid"); n=$(counter "$who" MAIN.n_object)
    awk -v w="$who" -v n="$n" -v a="$before" -v b="$after" -v g="$(counter "$who" SMA.s0.g_bytes)" \
        'BEGIN {d=(b-a)*1024/n; printf "%-8s objects %8d  anon %.1f -> %.1f MiB: %6.0f bytes per object; storage charged %.0f bytes per object  %s\n", w, n, a/1024, b/1024, d, g/n, (w == "cache-d") ? ((d <= 1500) ? "goal <=1500 met" : "goal <=1500 MISSED") : ""}'
done
