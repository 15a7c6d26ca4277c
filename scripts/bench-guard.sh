#!/usr/bin/env bash
# A regression guard for cache-d's performance (not a timed test: run it by
# hand or from cron on one quiet machine). `save` records this build's
# figures; `check` measures again and exits 1 when a figure lost more than
# the tolerance against the saved ones:
#   - hits/s (wrk -t1 -c50, median of rounds) on 1 B, 10 KiB, 100 KiB, 1 MiB;
#   - CPU per hit (µs: utime + stime of cache-d's manager and child over
#     the run, from /proc, divided by requests answered) at bench-cpu.sh's
#     fixed open-loop rates, median of rounds: the figure issue 37 is
#     about, which throughput on 2 shared cores hardly shows; and the same
#     for 1 KiB hits over HTTP/2 in the clear (10 streams a connection)
#     and an ESI page of 10 cached fragments;
#   - anonymous memory per cached 1 KiB object (20,000 objects);
#   - with valgrind installed, instructions per 1 B hit in the child
#     (scripts/bench-instructions.sh), steady to a fraction of a percent.
# The usual use: `save` on main's build, then `check` on a change's.
# Usage: scripts/bench-guard.sh save|check [FILE] [seconds] [rounds] [tolerance%]
#   FILE defaults to target/bench-guard.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}; file=${2:-target/bench-guard.tsv}; secs=${3:-4}; rounds=${4:-5}; tol=${5:-10}
case $mode in save|check) ;; *) echo "usage: scripts/bench-guard.sh save|check [FILE] [seconds] [rounds] [tolerance%]" >&2; exit 2 ;; esac
for t in wrk jq; do command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk jq)" >&2; exit 2; }; done
if [ "$mode" = check ] && [ ! -s "$file" ]; then echo "bench-guard: no saved figures in $file (run save first)" >&2; exit 2; fi
. scripts/stack.sh
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
out=$work/now.tsv
for size in 1 10240 102400 1048576; do
    url="http://$ip:$port/size/$size?max_age=3600"
    curl -s -o /dev/null "$url"; wrk -t1 -c50 -d1s "$url" >/dev/null
    for _ in $(seq "$rounds"); do wrk -t1 -c50 -d"${secs}s" "$url" | awk '/^Requests\/sec/ {print $2}'; done | median |
        awk -v s="$size" '{printf "hits_per_s_%s\t%.0f\thigher\n", s, $1}' >>"$out"
done
# CPU per hit at a fixed open-loop rate (as scripts/bench-cpu.sh).
child=$(pgrep -P "${pids[-1]}" | head -n1)
tick=$(getconf CLK_TCK)
cpu_ticks() {
    local total=0 p rest
    for p in "${pids[-1]}" "$child"; do
        rest=$(sed 's/^.*) //' "/proc/$p/stat")
        set -- $rest
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}
# cpu_row NAME URL cache-bench-args...: the median CPU per request.
cpu_row() {
    local name=$1 url=$2; shift 2
    "$bin/cache-bench" run -q -n 20 -c 2 "$@" "$url" >/dev/null 2>&1 || true
    for _ in $(seq "$rounds"); do
        before=$(cpu_ticks)
        "$bin/cache-bench" run -d "${secs}s" --json "$@" "$url" >"$work/run.json" 2>/dev/null
        after=$(cpu_ticks)
        awk -v a="$after" -v b="$before" -v t="$tick" -v n="$(jq '.requests' "$work/run.json")" 'BEGIN {printf "%.2f\n", (a - b) * 1e6 / t / n}'
    done | median | awk -v s="$name" '{printf "cpu_us_%s\t%.2f\tlower\n", s, $1}' >>"$out"
}
for row in 1:12000 10240:10000 102400:4000 1048576:500; do
    size=${row%%:*}; rate=${row##*:}
    cpu_row "per_hit_$size" "http://$ip:$port/size/$size?max_age=3600" -r "$rate" -c 20
done
# HTTP/2 in the clear and ESI, as bench-cpu.sh's rows: the feature set
# and a policy with do_esi loaded through the admin socket.
"$bin/cache-adm" -n "$work/inst" param.set feature +http2 >/dev/null
cat >"$work/guard.vcl" <<VCL
vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "${origin##*:}"; }
sub vcl_backend_response { if (bereq.url ~ "^/esi/") { set beresp.do_esi = true; } }
VCL
"$bin/cache-adm" -n "$work/inst" vcl.load guard "$work/guard.vcl" >/dev/null
"$bin/cache-adm" -n "$work/inst" vcl.use guard >/dev/null
cpu_row h2c_1024 "http://$ip:$port/size/1024?max_age=3600" -r 8000 -c 10 --h2 --streams 10
cpu_row esi_page_10 "http://$ip:$port/esi/10?max_age=3600&frag_size=1024" -r 1500 -c 20
# Anonymous memory per cached object: 20,000 objects of 1 KiB.
before=$(awk '/^RssAnon/ {print $2}' "/proc/$child/status")
cat >"$work/fill.lua" <<'LUA'
local n = -1
request = function()
    n = n + 1
    return wrk.format(nil, "/size/1024?max_age=3600&guard=" .. n)
end
LUA
wrk -t1 -c1 -d3s -s "$work/fill.lua" "http://$ip:$port/" >/dev/null
objs=$("$bin/cache-stat" -1 -n "$work/inst" -f MAIN.n_object | awk '{print $2}')
after=$(awk '/^RssAnon/ {print $2}' "/proc/$child/status")
awk -v a="$before" -v b="$after" -v n="$objs" 'BEGIN {printf "anon_bytes_per_object\t%.0f\tlower\n", (b-a)*1024/n}' >>"$out"
# Instructions per 1 B hit (callgrind; scripts/bench-instructions.sh), when
# valgrind is installed: the one figure here that does not move between runs.
if command -v valgrind >/dev/null; then
    bash scripts/bench-instructions.sh "$bin/cache-d" | awk '{printf "instructions_per_hit_1\t%d\tlower\n", $2}' >>"$out"
fi

if [ "$mode" = save ]; then
    mkdir -p "$(dirname "$file")"; cp "$out" "$file"
    echo "saved to $file:"; cut -f1,2 "$file"
    exit 0
fi
# check: join saved and current figures by name.
awk -F'\t' -v tol="$tol" '
    NR == FNR {base[$1] = $2; next}
    ($1 in base) {
        b = base[$1]; v = $2
        worse = ($3 == "higher") ? (v < b * (1 - tol/100)) : (v > b * (1 + tol/100))
        printf "%-24s saved %10s  now %10s  %+6.1f%%  %s\n", $1, b, v, (v - b) * 100 / b, worse ? "REGRESSED" : "ok"
        if (worse) bad = 1
    }
    END {exit bad}' "$file" "$out"
