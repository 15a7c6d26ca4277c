#!/usr/bin/env bash
# Instructions per request in cache-d's child, counted by valgrind's
# callgrind: user-space work only, and the same from run to run to a
# fraction of a percent, where CPU time on this 2-core machine moves by
# 5-10% between runs. For telling whether a change to the hit path costs
# or saves (the kernel's part, which it does not count, is what the
# bench-cpu.sh floors show).
# Each cache-d binary given runs under callgrind in front of cache-bench's
# origin; after a warm-up, callgrind's counters are zeroed, N requests of a
# SIZE-byte object are sent on 4 kept connections, and the child's counts
# are dumped: its instructions over N. With TOP=n, the n functions with
# the most instructions of their own follow each figure.
# Usage: scripts/bench-instructions.sh [CACHE_D...] [-- SIZE N]
#   (default: target/release/cache-d; SIZE 1, N 5000)
#   A/B: scripts/bench-instructions.sh /tmp/old/cache-d target/release/cache-d
set -euo pipefail
cd "$(dirname "$0")/.."
bins=(); size=1; n=5000
while [ $# -gt 0 ]; do
    case $1 in
        --) size=${2:-1}; n=${3:-5000}; break ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "usage: scripts/bench-instructions.sh [CACHE_D...] [-- SIZE N]" >&2; exit 2 ;;
        *) bins+=("$1"); shift ;;
    esac
done
[ ${#bins[@]} -gt 0 ] || bins=(target/release/cache-d)
for t in valgrind callgrind_control callgrind_annotate; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install valgrind)" >&2; exit 2; }
done
[ -x target/release/cache-bench ] || cargo build --release --locked -p cache-bench >&2
w=$(mktemp -d); pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
target/release/cache-bench origin --listen 127.0.0.1:0 >"$w/origin" & pids+=($!)
until grep -q listening "$w/origin"; do sleep 0.05; done
origin=$(sed -n 's/^listening on //p' "$w/origin")
for bin in "${bins[@]}"; do
    [ -x "$bin" ] || { echo "bench: $bin is not an executable" >&2; exit 2; }
    d=$(mktemp -d -p "$w")
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$d/cg.%p" \
        "$bin" -F -a 127.0.0.1:0 -b "$origin" -n "$d/inst" -s malloc,64m -l 8m >"$d/out" 2>&1 & vp=$!
    for _ in $(seq 600); do [ -s "$d/inst/_.listen" ] && break; sleep 0.2; done
    [ -s "$d/inst/_.listen" ] || { echo "bench: $bin did not start under valgrind:" >&2; tail -5 "$d/out" >&2; exit 1; }
    read -r _ ip port <"$d/inst/_.listen"
    url="http://$ip:$port/size/$size?max_age=3600"
    target/release/cache-bench run -q -n 200 -c 4 -k "$url" >/dev/null
    sleep 1
    callgrind_control -z >/dev/null 2>&1
    target/release/cache-bench run -q -n "$n" -c 4 -k "$url" >/dev/null
    callgrind_control -d >/dev/null 2>&1
    sleep 1
    kill "$vp" 2>/dev/null; wait "$vp" 2>/dev/null || true
    # The child's dump is the one with the most instructions.
    best=$(for f in "$d"/cg.*.1; do echo "$(awk '/^(summary|totals):/ {print $2}' "$f" | tail -1) $f"; done | sort -n | tail -1)
    ir=${best%% *}; file=${best#* }
    awk -v ir="$ir" -v n="$n" -v b="$bin" -v s="$size" 'BEGIN {printf "%-40s %d instructions per %s B hit\n", b, ir / n, s}'
    if [ -n "${TOP:-}" ]; then
        callgrind_annotate --threshold=100 "$file" 2>/dev/null | grep -E '^ *[0-9,]+ \(' |
            awk -v top="$TOP" '{p = $2; gsub(/[(%)]/, "", p)} p + 0 < 50 && ++k <= top' |
            awk -v n="$n" '{ir = $1; gsub(",", "", ir); s = $0; sub(/^[^)]*\) +/, "", s); sub(/ \[.*$/, "", s); sub(/^[^:]*:/, "", s); printf "  %7.0f  %s\n", ir / n, substr(s, 1, 110)}'
    fi
done
