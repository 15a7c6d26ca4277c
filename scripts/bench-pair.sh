# Sourced by the benchmarks that put cache-d and varnishd side by side:
# builds the release binaries, starts the test origin, then
#   start_pair [policy.vcl] BUDGET [extra cache-d args...]
# starts cache-d (-F under this shell) and varnishd daemonized as Debian's
# package runs it (-j unix,user=vcache when root, the packaged jail; without
# root, -j none), both -b to the origin (or -f the policy, ORIGIN_PORT in it
# replaced by the origin's port) and -s malloc,BUDGET, on free loopback
# ports, all stopped at exit. varnishd also gets the arguments in the
# array varnish_extra, if set (e.g. (-p feature=+http2)).
# Sets: bin, work, origin, c_url, v_url, c_inst, v_inst, c_child, v_child,
# varnish_config, cache_d. Also defines fill (below).
# CACHE_D=PATH runs that cache-d binary instead of target/release's (e.g.
# target/pgo/release/cache-d, the profile-guided build of
# scripts/build-pgo.sh, as the package ships it).
cargo build --release --workspace --locked >&2
bin=target/release
cache_d=${CACHE_D:-$bin/cache-d}
[ -x "$cache_d" ] || { echo "bench: CACHE_D=$cache_d is not an executable" >&2; exit 2; }
work=$(mktemp -d)
# The jailed varnish child (user vcache) must reach its instance directory.
chmod 755 "$work"
pids=()
cleanup() {
    [ -s "$work/varnish.pid" ] && kill "$(cat "$work/varnish.pid")" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
"$bin/cache-bench" origin --listen 127.0.0.1:0 >"$work/origin.out" &
pids+=($!)
until grep -q listening "$work/origin.out" 2>/dev/null; do sleep 0.05; done
origin=$(sed -n 's/^listening on //p' "$work/origin.out")

start_pair() {
    local vclsrc=$1 budget=$2; shift 2
    local policy=(-b "$origin")
    if [ -n "$vclsrc" ]; then
        sed "s/ORIGIN_PORT/${origin##*:}/" "$vclsrc" >"$work/policy.vcl"
        policy=(-f "$work/policy.vcl")
        echo "policy: $vclsrc (both)"
    fi
    c_inst=$work/inst
    "$cache_d" -F -a 127.0.0.1:0 "${policy[@]}" -n "$c_inst" -s "malloc,$budget" "$@" &
    pids+=($!)
    local cpid=$!
    until [ -s "$c_inst/_.listen" ]; do sleep 0.05; done
    local ip port
    read -r _ ip port <"$c_inst/_.listen"
    c_url="http://$ip:$port"
    c_child=$(pgrep -P "$cpid" | head -n1)

    local jail=(-j none)
    varnish_config="varnishd daemonized, -j none, -s malloc,$budget"
    if [ "$(id -u)" = 0 ] && id vcache >/dev/null 2>&1; then
        jail=(-j unix,user=vcache)
        varnish_config="varnishd daemonized as packaged (-j unix,user=vcache, no -F), -s malloc,$budget"
    fi
    v_inst=$work/varnish
    varnishd "${jail[@]}" -a 127.0.0.1:0 "${policy[@]}" -n "$v_inst" -s "malloc,$budget" \
        ${varnish_extra[@]+"${varnish_extra[@]}"} -P "$work/varnish.pid" >"$work/varnish.log" 2>&1 || { cat "$work/varnish.log" >&2; exit 1; }
    local vport=""
    for _ in $(seq 200); do
        vport=$(varnishadm -n "$v_inst" debug.listen_address 2>/dev/null | awk '{print $3; exit}') && [ -n "$vport" ] && break
        sleep 0.1
    done
    [ -n "$vport" ] || { echo "bench: varnishd did not start" >&2; cat "$work/varnish.log" >&2; exit 1; }
    v_url="http://127.0.0.1:$vport"
    v_child=$(pgrep -P "$(cat "$work/varnish.pid")" | head -n1)
}

# fill URL SIZE N TOTAL: request objects 0..N-1 of SIZE bytes in order
# (wrapping around), TOTAL requests at least, with a wrk Lua script; a few
# requests more than TOTAL are harmless (they hit).
fill() {
    local reqs=0
    while [ "$reqs" -lt "$4" ]; do
        cat >"$work/fill.lua" <<LUA
local n = $reqs - 1
request = function()
    n = n + 1
    return wrk.format(nil, "/size/$2?max_age=3600&n=" .. (n % $3))
end
LUA
        wrk -t1 -c8 -d2s -s "$work/fill.lua" "$1" >"$work/fill.out"
        reqs=$(( reqs + $(awk '/requests in/ {print $1}' "$work/fill.out") ))
    done
}
