#!/usr/bin/env bash
# The proxy under test, for the conformance scenarios: started, stopped and
# administered the same way whether it is varnishd or cache-d.
#   proxy.sh KIND BIN PORT start DIR [--listen-proto PROTO] [proxy flags...]
#                                       (VCL on stdin if no -b; PROTO, e.g.
#                                       PROXY, is added to the -a listener)
#   proxy.sh KIND BIN PORT stop DIR
#   proxy.sh KIND BIN PORT adm DIR COMMAND...
#   proxy.sh KIND BIN PORT stat DIR COUNTER          (prints its value)
#   proxy.sh KIND BIN PORT log DIR ARGS...           (varnishlog / cache-log)
#   proxy.sh KIND BIN PORT ncsa DIR ARGS...          (varnishncsa / cache-ncsa)
#   proxy.sh KIND BIN PORT statx DIR ARGS...         (varnishstat / cache-stat)
# KIND is varnishd or cache-d; BIN the directory holding cache-d and
# cache-adm; PORT the listening port the runner chose. Every proxy started
# is recorded in $CONFORMANCE_PIDS (the runner kills leftovers).
set -euo pipefail
kind=$1 bin=$2 port=$3 cmd=$4 dir=$5; shift 5
mkdir -p "$dir"
case "$cmd" in
start)
    listen="127.0.0.1:$port"
    if [ "${1:-}" = --listen-proto ]; then listen="$listen,$2"; shift 2; fi
    args=("$@")
    # No pipe into `grep -q` here: under pipefail, grep quitting at the
    # first match can fail printf with SIGPIPE, and the -b went unseen.
    backend=no
    for a in "${args[@]}"; do if [ "$a" = -b ]; then backend=yes; fi; done
    if [ "$backend" = no ]; then
        cat >"$dir/proxy.vcl"
        args+=(-f "$dir/proxy.vcl")
    fi
    if [ "$kind" = varnishd ]; then
        varnishd -j none -a "$listen" -n "$dir/inst" -P "$dir/pid" -T 127.0.0.1:0 "${args[@]}" >"$dir/proxy.log" 2>&1 ||
            { cat "$dir/proxy.log"; exit 1; }
    else
        "$bin/cache-d" -a "$listen" -n "$dir/inst" -P "$dir/pid" "${args[@]}" >"$dir/proxy.log" 2>&1 ||
            { cat "$dir/proxy.log"; exit 1; }
    fi
    echo "$(cat "$dir/pid")" >>"${CONFORMANCE_PIDS:-/dev/null}"
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && exit 0
        sleep 0.05
    done
    echo "proxy.sh: $kind did not listen on $port" >&2; cat "$dir/proxy.log" >&2; exit 1
    ;;
stop)
    [ -s "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null || true
    ;;
adm)
    if [ "$kind" = varnishd ]; then varnishadm -n "$dir/inst" "$@"; else "$bin/cache-adm" -n "$dir/inst" "$@"; fi
    ;;
stat)
    if [ "$kind" = varnishd ]; then varnishstat -n "$dir/inst" -1 -f "$1"; else "$bin/cache-stat" -n "$dir/inst" -1 -f "$1"; fi | awk '{print $2}'
    ;;
log | ncsa | statx)
    declare -A theirs=([log]=varnishlog [ncsa]=varnishncsa [statx]=varnishstat)
    declare -A ours=([log]=cache-log [ncsa]=cache-ncsa [statx]=cache-stat)
    if [ "$kind" = varnishd ]; then tool=${theirs[$cmd]}; else tool=$bin/${ours[$cmd]}; fi
    exec "$tool" -n "$dir/inst" "$@"
    ;;
*) echo "proxy.sh: unknown command $cmd" >&2; exit 2 ;;
esac
