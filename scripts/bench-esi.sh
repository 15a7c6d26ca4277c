#!/usr/bin/env bash
# ESI, cache-d against varnishd side by side in one run (issue 18): a page
# of 10 cached fragments (the test origin's /esi/10, fragments of
# /text/FRAG bytes, all hits after the first request), assembled on every
# request. Closed loop: wrk -t1 -c50, hits/s; open loop: cache-bench -r
# at 50% of varnishd's measured capacity, p99 and p99.9 (corrected for
# coordinated omission). Alternating rounds, medians. varnishd runs
# daemonized as packaged (scripts/bench-pair.sh), both with the same VCL
# (beresp.do_esi for /esi/ pages).
# Usage: scripts/bench-esi.sh [seconds-per-run] [rounds] [fragment-bytes]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; frag=${3:-1024}
for t in wrk varnishd varnishadm jq; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish jq)" >&2; exit 2; }
done
. scripts/bench-pair.sh
cat >"$work/esi.vcl" <<'VCL'
vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_backend_response {
    if (bereq.url ~ "^/esi/") { set beresp.do_esi = true; }
}
VCL
start_pair "$work/esi.vcl" 256m
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
path="/esi/10?max_age=3600&frag_size=$frag"
for u in "$c_url" "$v_url"; do
    curl -s -o "$work/page" "$u$path"
    [ "$(grep -c '<div id=' "$work/page")" = 10 ] || { echo "bench: $u did not assemble the page" >&2; exit 1; }
    wrk -t1 -c50 -d1s "$u$path" >/dev/null
done
cmp -s <(curl -s "$c_url$path") <(curl -s "$v_url$path") || { echo "bench: the two pages differ" >&2; exit 1; }
echo "a page of 10 ESI fragments of $frag bytes, all cached; varnishd: $varnish_config"
c=(); v=()
for _ in $(seq 1 "$rounds"); do
    c+=("$(wrk -t1 -c50 -d"${secs}s" "$c_url$path" | awk '/^Requests\/sec/ {print $2}')")
    v+=("$(wrk -t1 -c50 -d"${secs}s" "$v_url$path" | awk '/^Requests\/sec/ {print $2}')")
done
mc=$(printf '%s\n' "${c[@]}" | median); mv=$(printf '%s\n' "${v[@]}" | median)
awk -v a="$mc" -v b="$mv" -v s="$secs" -v r="$rounds" 'BEGIN {printf "closed loop wrk -t1 -c50 -d%ss, medians of %s: cache-d %.0f pages/s, varnishd %.0f pages/s, ratio %.2fx\n", s, r, a, b, a/b}'
rate=$(awk -v b="$mv" 'BEGIN {printf "%d", b * 0.5}')
cp99=(); vp99=(); cp999=(); vp999=()
for _ in $(seq 1 "$rounds"); do
    for who in c v; do
        if [ $who = c ]; then u=$c_url; else u=$v_url; fi
        j=$("$bin/cache-bench" run -q --json -c50 -r "$rate" -d"${secs}s" "$u$path")
        p99=$(jq -r '.latency_ms.p99' <<<"$j"); p999=$(jq -r ".latency_ms.p999" <<<"$j")
        if [ $who = c ]; then cp99+=("$p99"); cp999+=("$p999"); else vp99+=("$p99"); vp999+=("$p999"); fi
    done
done
awk -v r="$rate" -v a="$(printf '%s\n' "${cp99[@]}" | median)" -v b="$(printf '%s\n' "${vp99[@]}" | median)" \
    -v c="$(printf '%s\n' "${cp999[@]}" | median)" -v d="$(printf '%s\n' "${vp999[@]}" | median)" \
    'BEGIN {printf "open loop at %d pages/s (50%% of varnishd): p99 cache-d %.2f ms, varnishd %.2f ms; p99.9 cache-d %.2f ms, varnishd %.2f ms\n", r, a, b, c, d}'
