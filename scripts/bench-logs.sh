#!/usr/bin/env bash
# Log reading speed: records a log of real traffic (wrk through cache-d,
# captured live with cache-log -w), then times cache-log and cache-ncsa
# reading it back (-r) against varnishlog and varnishncsa reading the very
# same file (the format is Varnish's), alternating; prints medians of
# records per second and the ratios.
# Usage: scripts/bench-logs.sh [seconds-of-traffic] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 2; }
. scripts/stack.sh

log="$work/traffic.vsl"
"$bin/cache-log" -g raw -n "$work/inst" -w "$log" &
cap=$!
sleep 0.5
wrk -t2 -c16 -d"${secs}s" "http://$ip:$port/size/100?max_age=600" >/dev/null
wrk -t1 -c4 -d1s "http://$ip:$port/size/100?nocache=1" -H "Cookie: a=1" >/dev/null
sleep 1
kill "$cap"; wait "$cap" 2>/dev/null || true
records=$("$bin/cache-log" -r "$log" -g raw | wc -l)
requests=$("$bin/cache-ncsa" -r "$log" | wc -l)
echo "log: $(du -h "$log" | cut -f1), $records records, $requests requests" >&2

# Seconds for one read, best effort of wall clock.
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ours_log=(); ours_ncsa=(); v_log=(); v_ncsa=()
have_v=0; command -v varnishlog >/dev/null && command -v varnishncsa >/dev/null && have_v=1
for r in $(seq 1 "$rounds"); do
    ours_log+=("$(t "$bin/cache-log" -r "$log" -g request)")
    ours_ncsa+=("$(t "$bin/cache-ncsa" -r "$log")")
    if [ $have_v = 1 ]; then
        v_log+=("$(t varnishlog -r "$log" -g request)")
        v_ncsa+=("$(t varnishncsa -r "$log")")
    fi
done
rate() { echo "$records / $1" | bc -l | awk '{printf "%.0f", $1}'; }
ml=$(printf '%s\n' "${ours_log[@]}" | median); mn=$(printf '%s\n' "${ours_ncsa[@]}" | median)
echo "cache-log   -r -g request: $(rate "$ml") records/s (${ml}s)"
echo "cache-ncsa  -r           : $(rate "$mn") records/s (${mn}s)"
if [ $have_v = 1 ]; then
    vl=$(printf '%s\n' "${v_log[@]}" | median); vn=$(printf '%s\n' "${v_ncsa[@]}" | median)
    echo "varnishlog  -r -g request: $(rate "$vl") records/s (${vl}s)"
    echo "varnishncsa -r           : $(rate "$vn") records/s (${vn}s)"
    echo "ratio cache-log/varnishlog $(echo "$vl / $ml" | bc -l | awk '{printf "%.2f", $1}')x, cache-ncsa/varnishncsa $(echo "$vn / $mn" | bc -l | awk '{printf "%.2f", $1}')x (medians of $rounds)"
fi
