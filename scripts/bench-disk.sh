#!/usr/bin/env bash
# The disk tier, measured: N objects of 16 KiB (default 20,000: 320 MB)
# served as hits from memory (-s malloc), from a persistent store with no
# memory tier (every hit reads its body from the file: the page cache
# warm, then cold when we may drop it), and from varnishd's file storage
# (daemonized as packaged) for scale; then the origin's load in the
# first minute after a restart, with the persistent store and with
# malloc. The open time of a store of 1,000,000 objects and pread against
# mmap are `cargo bench -p cache-d --bench disk`.
# Usage: scripts/bench-disk.sh [seconds-per-run] [objects] [seconds-after-restart]
# (0 seconds after a restart: hits only)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}; n=${2:-20000}; after=${3:-60}
command -v python3 >/dev/null || { echo "bench: needs python3" >&2; exit 2; }
. scripts/stack.sh
for i in $(seq 1 "$n"); do echo "/size/16384?max_age=86400&i=$i"; done >"$work/urls"

declare -A pid
start() { # name args...; sets p, the port
    local name=$1; shift
    rm -f "$work/$name/_.listen"
    "$bin/cache-d" -F -a 127.0.0.1:0 -n "$work/$name" -b "$origin" "$@" >"$work/$name.log" 2>&1 &
    pid[$name]=$!; pids+=($!)
    until [ -s "$work/$name/_.listen" ]; do sleep 0.05; done
    p=$(awk '{print $3}' "$work/$name/_.listen")
}
stop() { kill "${pid[$1]}"; wait "${pid[$1]}" 2>/dev/null || true; }
bench() { "$bin/cache-bench" run "http://127.0.0.1:$1/" --urls "$work/urls" --host cache.test -q "${@:2}"; }
fill() { bench "$1" --pick seq -n "$n" -c 8 >/dev/null; }
# One load: requests/s, p99 (ms) and hit rate.
load() {
    bench "$1" --pick random -c 32 -d "${secs}s" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("%.0f %.2f %.3f" % (s["rps"], s["latency_ms"]["p99"], s["hit_rate"]))'
}
cold() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
origin_requests() { curl -s "http://$origin/__stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; }
row() { printf '%-44s %10s %10s %9s\n' "$@"; }

row "hits ($n objects of 16 KiB, uniform)" "req/s" "p99 ms" "hit rate"
start mem -s malloc,1G; fill "$p"
read -r r l h < <(load "$p"); row "cache-d -s malloc,1G" "$r" "$l" "$h"
stop mem
start disk -s "disk=persistent,$work,2G"; fill "$p"
read -r r l h < <(load "$p"); row "cache-d -s persistent (no memory tier), warm" "$r" "$l" "$h"
if cold; then
    read -r r l h < <(load "$p"); row "cache-d -s persistent, page cache dropped" "$r" "$l" "$h"
else
    row "cache-d -s persistent, cold" "(not root: cannot drop caches)" "" ""
fi
"$bin/cache-stat" -1 -n "$work/disk" -f 'SMP.disk.c_disk_reads' -f 'SMP.disk.g_alloc' | sed 's/^/    /'
# A memory tier of 64 MB in front of the same store (a fifth of the
# objects): hits from memory where the tier has them, else from disk.
printf 'vcl 4.1;\nbackend o { .host = "%s"; .port = "%s"; }\nsub vcl_backend_response { set beresp.storage = storage.disk; }\n' \
    "${origin%:*}" "${origin##*:}" >"$work/tier.vcl"
stop disk
start tier -f "$work/tier.vcl" -s mem=malloc,64M -s "disk=persistent,$work,2G"
read -r r l h < <(load "$p"); row "cache-d -s malloc,64M + persistent" "$r" "$l" "$h"
"$bin/cache-stat" -1 -n "$work/tier" -f 'SMP.disk.c_disk_reads' -f 'MAIN.cache_hit' -f 'SMA.mem.g_bytes' | sed 's/^/    /'
stop tier

if command -v varnishd >/dev/null; then
    chmod a+rx "$work"
    # As packaged: daemonized, dropping privileges to the vcache user.
    varnishd -a 127.0.0.1:0 -b "$origin" -n "$work/varnish" -s "file,$work/varnish.bin,2G" -P "$work/varnish.pid"
    trap 'kill "$(cat "$work/varnish.pid")" 2>/dev/null || true; cleanup' EXIT
    vport=""
    for _ in $(seq 100); do
        vport=$(varnishadm -n "$work/varnish" debug.listen_address 2>/dev/null | awk '{print $3; exit}') && [ -n "$vport" ] && break
        sleep 0.1
    done
    fill "$vport"
    read -r r l h < <(load "$vport"); row "varnishd -s file,2G (7.1), warm" "$r" "$l" "$h"
    if cold; then read -r r l h < <(load "$vport"); row "varnishd -s file, page cache dropped" "$r" "$l" "$h"; fi
    kill "$(cat "$work/varnish.pid")"
fi

[ "$after" = 0 ] && exit 0
# The first minute after a restart: the same open-loop load (2,000
# requests/s, uniform over the objects), and what reaches the origin.
echo
row "origin load in the ${after} s after a restart" "origin req" "req/s" "hit rate"
after_restart() { # label name args...
    local label=$1 name=$2; shift 2
    stop "$name"
    start "$name" "$@"
    local before; before=$(origin_requests)
    read -r r _ h < <(bench "$p" --pick random -r 2000 -d "${after}s" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("%.0f %.2f %.3f" % (s["rps"], s["latency_ms"]["p99"], s["hit_rate"]))')
    row "$label" "$(( $(origin_requests) - before ))" "$r" "$h"
    stop "$name"
}
# The persistent store is the one filled above.
start disk -s "disk=persistent,$work,2G"
after_restart "cache-d -s persistent, restarted" disk -s "disk=persistent,$work,2G"
start again -s malloc,1G; fill "$p"
after_restart "cache-d -s malloc, restarted" again -s malloc,1G
