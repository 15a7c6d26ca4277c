#!/usr/bin/env bash
# CPU per request (issue 37), cache-d against its peers side by side in one
# run. Every CPU row sends the same open-loop rate (cache-bench run -r,
# below every server's capacity) to each server in turn and divides the
# server's own CPU time (utime + stime, all threads, from /proc/PID/stat,
# over the run) by the requests it answered. On this 2-core machine the load
# generator shares the cores, so requests per second mostly measure the
# client; CPU per request is what the server costs. The process set of each
# server is explicit: its root pids (cache-d's manager, varnishd's manager,
# hitch's and nginx's masters) and their descendants, listed at each run's
# start and printed in the header; the origin and cache-bench are never
# counted. ROUNDS alternating rounds of SECS seconds for every row, medians.
# Groups (rows):
#   hits       1 B, 1 KiB, 10 KiB, 100 KiB, 1 MiB hits over HTTP/1.1, -c 20;
#              and the floors (see g_hits)
#   tls        1 KiB hits over TLS on kept connections (-k -c 20): cache-d's
#              https listener vs hitch -> varnishd (PROXY v2; hitch's CPU +
#              varnishd's) vs nginx proxy_cache; RSA-2048 for all
#   handshake  full TLS handshakes per CPU-second (--new-conn: rustls, no
#              resumption; 1 KiB hits), cache-d vs nginx, RSA-2048 and
#              ECDSA P-256 (picked by SNI)
#   h2         1 KiB hits over HTTP/2 in the clear (prior knowledge), 10
#              connections x 10 streams, vs varnishd -p feature=+http2
#   esi        a page of 10 cached 1 KiB ESI fragments (beresp.do_esi)
#   gzip       a 100 KiB text stored gzip, to a client without
#              Accept-Encoding: gunzipped on every hit (--expect-size checks)
#   miss       every request a new URL (cache-bench --urls, a fresh list per
#              run): a miss, a fetch from the origin on loopback, a store
#   pass       /pass/... URLs, return(pass) in the policy: a fetch, no store
#   h3         1 KiB hits over HTTP/3 on cache-d (feature http3 set for
#              the group through the admin socket) against HTTP/2 and
#              HTTP/1.1 over TLS on cache-d, and against Caddy over
#              HTTP/3 (a file: Caddy has no cache); then QUIC handshakes
#              per CPU-second, full (--new-conn) and resumed
#              (--requests-per-conn 1), cache-d against Caddy
#   tail       open loop at 50% of varnishd's capacity (closed loop -c 20 for
#              3 s first), 1 KiB, 100 KiB, 1 MiB: p99 latency (corrected for
#              coordinated omission), -c 50, requests paced to the
#              microsecond (cache-bench --fine-pace: on the timer's 1 ms
#              tick they leave in bunches, and every server's p99, the
#              floor's too, is then the bunch's wait, about 1 ms);
#              TAIL_ROUNDS rounds (default 9, or ROUNDS if more): a 6 s
#              p99 moves by 2-3x from round to round on 2 shared cores
# One policy for both cache-d and varnishd (scripts/bench-policy.vcl: do_esi for /esi/, pass
# for /pass/). A peer whose tool is missing prints "skipped: needs X".
# Usage: scripts/bench-cpu.sh [secs] [rounds] [group...]   (default: all)
#   BENCH_GROUPS="tls h2" picks groups too; BENCH_ROWS="1:12000 1048576:500"
#   picks the hits rows (size:rate). CACHE_D=PATH measures that cache-d
#   binary (e.g. target/pgo/release/cache-d from scripts/build-pgo.sh, the
#   profile-guided build the package ships). BENCH_PACE=fine paces every
#   row's requests with cache-bench --fine-pace (the tail rows always are).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}; rounds=${2:-3}
tail_rounds=${TAIL_ROUNDS:-$((rounds > 9 ? rounds : 9))}
shift $(( $# < 2 ? $# : 2 ))
all_groups="hits tls handshake h2 esi gzip miss pass tail h3"
groups=${*:-${BENCH_GROUPS:-$all_groups}}
hit_rows=${BENCH_ROWS:-1:12000 1024:12000 10240:10000 102400:4000 1048576:500}
for g in $groups; do
    [[ " $all_groups " == *" $g "* ]] || { echo "bench: unknown group $g (groups: $all_groups)" >&2; exit 2; }
done
want() { [[ " $groups " == *" $1 "* ]]; }
for t in varnishd varnishadm jq python3 openssl; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install varnish jq python3 openssl)" >&2; exit 2; }
done

# Start everything: the origin (bench-pair.sh), certificates, cache-d
# (plain and https listeners, feature=+http2) and varnishd (plus a PROXY
# listener for hitch, feature=+http2), both -s malloc,512m with the policy;
# then nginx and hitch if installed.
. scripts/bench-cpu-peers.sh
varnish_proxy=$(free_port)
varnish_extra=(-a "127.0.0.1:$varnish_proxy,PROXY" -p feature=+http2)
. scripts/bench-pair.sh
trap stop_peers EXIT
make_certs
start_pair scripts/bench-policy.vcl 512m -a tls=127.0.0.1:0,https -A "$work/tls.conf" -p feature=+http2 >&2
c_mgr=${pids[-1]}
v_mgr=$(cat "$work/varnish.pid")
c_tls=$(awk '$1 == "tls" {print $3}' "$c_inst/_.listen")
n_port=; h_port=; n_master=; h_master=; y_port=; y_master=
if want h3 && command -v caddy >/dev/null; then start_caddy; fi
if want tls || want handshake; then
    if command -v nginx >/dev/null; then start_nginx; fi
    if command -v hitch >/dev/null; then start_hitch; fi
fi
tick=$(getconf CLK_TCK)
floor=
if want hits; then
    cargo build --release --locked -p cache-bench --example floor >&2
    floor=target/release/examples/floor
fi

# Endpoints: a URL base and the root pids whose process trees are counted.
declare -A ep_url=([cache-d]=$c_url [varnishd]=$v_url
    [cache-d/tls]="https://127.0.0.1:$c_tls" [cache-d/ecdsa]="https://ecdsa.test:$c_tls")
declare -A ep_root=([cache-d]=$c_mgr [varnishd]=$v_mgr [cache-d/tls]=$c_mgr [cache-d/ecdsa]=$c_mgr)
if [ -n "$n_port" ]; then
    ep_url[nginx]="https://127.0.0.1:$n_port"; ep_url[nginx/ecdsa]="https://ecdsa.test:$n_port"
    ep_root[nginx]=$n_master; ep_root[nginx/ecdsa]=$n_master
fi
if [ -n "$h_port" ]; then ep_url[hitch+varnishd]="https://127.0.0.1:$h_port"; ep_root[hitch+varnishd]="$h_master $v_mgr"; fi
# The ecdsa.test names connect to 127.0.0.1 (SNI picks the ECDSA certificate).
declare -A ep_args=([cache-d/ecdsa]="--resolve ecdsa.test:127.0.0.1" [nginx/ecdsa]="--resolve ecdsa.test:127.0.0.1")

# tree PID...: these processes and all their descendants, one a line.
# (Unquoted pid lists below are split on purpose.)
# shellcheck disable=SC2046,SC2086
tree() { local p; for p in "$@"; do echo "$p"; tree $(pgrep -P "$p" || true); done; }
# ticks PID...: "PID TICKS" lines, TICKS = utime + stime in clock ticks
# (fields 14 and 15 of /proc/PID/stat, counted after the name's ')'; a
# process's fields include all its threads, live and exited).
ticks() {
    local p
    for p in "$@"; do sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk -v p="$p" '{print p, $12 + $13}' || true; done | sort
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# run_one ENDPOINT PATH [cache-bench args...]: one run of SECS seconds
# against the endpoint's URL + PATH (PATH @miss: a list of new URLs);
# prints the server's µs of CPU per answered request (over the processes
# alive at both ends) and leaves the summary in $work/run.json.
pace=(); [ "${BENCH_PACE:-}" != fine ] || pace=(--fine-pace)
run_one() {
    local ep=$1 path=$2 procs target n; shift 2
    # shellcheck disable=SC2086
    read -ra procs <<<"$(tree ${ep_root[$ep]} | tr '\n' ' ')"
    read -ra target <<<"${ep_args[$ep]:-}"
    target+=("${ep_url[$ep]}$path")
    if [ "$path" = @miss ]; then
        awk -v n=$((rate * secs * 2)) -v t="$(date +%s%N)" \
            'BEGIN {for (i = 0; i < n; i++) printf "/size/1024?max_age=3600&m=%s-%d\n", t, i}' >"$work/urls"
        target=(--urls "$work/urls" --pick seq "${ep_url[$ep]}")
    fi
    ticks "${procs[@]}" >"$work/t0"
    "$bin/cache-bench" run -q --json -d "${secs}s" "${pace[@]}" "$@" "${target[@]}" >"$work/run.json" 2>"$work/run.err" ||
        { echo "bench: cache-bench failed against $ep" >&2; cat "$work/run.err" >&2; exit 1; }
    ticks "${procs[@]}" >"$work/t1"
    n=$(jq .requests "$work/run.json")
    [ "$n" -gt 0 ] || { echo "bench: no request answered by $ep" >&2; exit 1; }
    jq -r --arg ep "$ep" --arg exp "${expect:-}" '[
        (select(.errors.total > 0) | "\(.errors.total) errors"),
        (select((.open_loop.dropped // 0) > 0) | "\(.open_loop.dropped) requests never sent (generator behind)"),
        (select($exp == "hit" and .hit_rate < 0.99) | "hit rate \(.hit_rate)"),
        (select($exp == "miss" and .hit_rate > 0.01) | "hit rate \(.hit_rate), expected misses")]
        | select(length > 0) | "bench: note: \($ep): " + join(", ")' "$work/run.json" >&2
    join "$work/t0" "$work/t1" | awk -v n="$n" -v t="$tick" '{d += $3 - $2} END {printf "%.2f\n", d * 1e6 / t / n}'
}

fmt='%-26s %-9s %10s  %-16s %10s %7s  %s\n'
line() { # label load cache-d peer peer-value unit
    awk -v l="$1" -v r="$2" -v c="$3" -v p="$4" -v v="$5" -v u="$6" -v f="$fmt" \
        'BEGIN {printf f, l, r, sprintf("%.1f", c), p, sprintf("%.1f", v), sprintf("%.2fx", c / v), u}'
}
skip() { printf '%-26s %-9s %10s  %-16s %s\n' "$1" "$2" - "$3" "skipped: needs $4"; }

# row LABEL LOAD UNIT PATH "ENDPOINT..." [cache-bench args...]: warm each
# endpoint's PATH, then ROUNDS rounds of one run per endpoint in turn; one
# line per peer with the medians and cache-d (the first endpoint) / peer.
# UNIT: "us CPU/req", "handshakes/CPU-s" (10^6 / µs per request) or
# "ms p99" (the runs' p99 latency instead of CPU). $expect: hit, miss or "".
row() {
    local label=$1 load=$2 unit=$3 path=$4 eps ep v; read -ra eps <<<"$5"; shift 5
    for ep in "${eps[@]}"; do
        : >"$work/m.${ep//\//_}"
        # shellcheck disable=SC2086
        [ "$path" = @miss ] || "$bin/cache-bench" run -q -n 20 -k ${ep_args[$ep]:-} "${ep_url[$ep]}$path" >/dev/null 2>&1
    done
    for _ in $(seq "$rounds"); do
        for ep in "${eps[@]}"; do
            v=$(run_one "$ep" "$path" "$@")
            case $unit in
                handshakes*) v=$(awk -v v="$v" 'BEGIN {printf "%.1f", 1e6 / v}') ;;
                ms*) v=$(jq .latency_ms.p99 "$work/run.json") ;;
            esac
            echo "$v" >>"$work/m.${ep//\//_}"
        done
    done
    v=$(median <"$work/m.${eps[0]//\//_}")
    for ep in "${eps[@]:1}"; do line "$label" "$load" "$v" "$ep" "$(median <"$work/m.${ep//\//_}")" "$unit"; done
}

# The groups.
kib='/size/1024?max_age=3600'
# Each hits row also runs the floors (cache-bench/examples/floor.rs: a
# server that answers every request with one writev of the same size and
# does nothing else): "floor", one epoll thread (cache-d's shape), and
# "floor/threads", a blocking thread per connection (varnishd's). What the
# kernel's read, write and wake-up cost per request here: the least any
# server of that shape can pay.
g_hits() {
    local r size rate mode
    for r in $hit_rows; do
        size=${r%%:*}; rate=${r##*:}
        for mode in epoll threads; do
            local ep=floor; [ "$mode" = epoll ] || ep=floor/$mode
            local port; port=$(free_port)
            "$floor" "$port" "$size" "$mode" & ep_root[$ep]=$!
            ep_url[$ep]="http://127.0.0.1:$port"
        done
        expect=hit row "hits $size B" "$rate/s" "us CPU/req" "/size/$size?max_age=3600" "cache-d varnishd floor floor/threads" \
            -r "$rate" -c 20
        kill "${ep_root[floor]}" "${ep_root[floor/threads]}"
        wait "${ep_root[floor]}" "${ep_root[floor/threads]}" 2>/dev/null || true
    done
}
g_tls() {
    local list="cache-d/tls"
    if [ -n "$h_port" ]; then list+=" hitch+varnishd"; else skip "TLS 1 KiB hits" 6000/s hitch+varnishd hitch; fi
    if [ -n "$n_port" ]; then list+=" nginx"; else skip "TLS 1 KiB hits" 6000/s nginx nginx; fi
    [ "$list" = cache-d/tls ] || row "TLS 1 KiB hits, kept conn" 6000/s "us CPU/req" "$kib" "$list" -r 6000 -c 20 -k
}
g_handshake() {
    [ -n "$n_port" ] || { skip "TLS full handshakes" 300/s nginx nginx; return; }
    # The certificate each one presents for each name, checked first.
    local s k f
    for s in "bench.test $c_tls rsaEncryption" "ecdsa.test $c_tls id-ecPublicKey" \
        "bench.test $n_port rsaEncryption" "ecdsa.test $n_port id-ecPublicKey"; do
        read -r -a f <<<"$s"; set -- "${f[@]}"
        k=$(served_key "$1" "$2")
        [ "$k" = "$3" ] || { echo "bench: port $2 served $k for $1, not $3" >&2; exit 1; }
    done
    row "full handshakes RSA-2048" 300/s "handshakes/CPU-s" "$kib" "cache-d/tls nginx" -r 300 -c 20 -k --new-conn
    row "full handshakes ECDSA-P256" 300/s "handshakes/CPU-s" "$kib" "cache-d/ecdsa nginx/ecdsa" \
        -r 300 -c 20 -k --new-conn
}
g_h2() { expect=hit row "h2c 1 KiB hits, 10 streams" 8000/s "us CPU/req" "$kib" "cache-d varnishd" -r 8000 -c 10 --h2 --streams 10; }
g_esi() {
    expect=hit row "ESI page, 10 fragments" 1500/s "us CPU/req" "/esi/10?max_age=3600&frag_size=1024" "cache-d varnishd" -r 1500 -c 20
}
g_gzip() {
    expect=hit row "gzip 100 KiB, gunzipped" 2000/s "us CPU/req" "/text/102400?gzip=1&max_age=3600" "cache-d varnishd" \
        -r 2000 -c 20 --expect-size 102400
    # Gunzipped on every hit: n_gunzip counts one per plain-client hit.
    echo "bench: note: gzip row: n_gunzip cache-d $("$bin/cache-stat" -1 -n "$c_inst" -f MAIN.n_gunzip | awk '{print $2}')," \
        "varnishd $(varnishstat -1 -n "$v_inst" -f MAIN.n_gunzip | awk '{print $2}') (runs of $((2000 * secs)) requests)" >&2
}
g_miss() { rate=3000 expect=miss row "miss 1 KiB, new URLs" 3000/s "us CPU/req" @miss "cache-d varnishd" -r 3000 -c 20; }
g_pass() { expect=miss row "pass 1 KiB" 3000/s "us CPU/req" "/pass$kib" "cache-d varnishd" -r 3000 -c 20; }
g_tail() {
    local size cap rate rounds=$tail_rounds pace=(--fine-pace)
    for size in 1024 102400 1048576; do
        "$bin/cache-bench" run -q -n 20 -c 2 "$v_url/size/$size?max_age=3600" >/dev/null 2>&1
        cap=$("$bin/cache-bench" run -q --json -c 20 -d 3s "$v_url/size/$size?max_age=3600" | jq .rps)
        rate=$(awk -v c="$cap" 'BEGIN {printf "%d", c / 2}')
        expect=hit row "tail p99 $size B" "$rate/s" "ms p99" "/size/$size?max_age=3600" "cache-d varnishd" -r "$rate" -c 50
    done
}

g_h3() {
    # The same 1 KiB hit in each protocol: 2 connections of 10 streams for
    # HTTP/2 and HTTP/3, 20 kept connections for HTTP/1.1.
    local at="--resolve bench.test:127.0.0.1" eps="cache-d/h3 cache-d/h2 cache-d/h1"
    ep_url[cache-d/h3]="https://bench.test:$c_tls"; ep_args[cache-d/h3]="$at --h3 -c 2 --streams 10"
    ep_url[cache-d/h2]="https://bench.test:$c_tls"; ep_args[cache-d/h2]="$at --h2 -c 2 --streams 10"
    ep_url[cache-d/h1]="https://bench.test:$c_tls"; ep_args[cache-d/h1]="$at -c 20"
    ep_root[cache-d/h3]=$c_mgr; ep_root[cache-d/h2]=$c_mgr; ep_root[cache-d/h1]=$c_mgr
    if [ -n "$y_port" ]; then
        ep_url[caddy/h3]="https://bench.test:$y_port"; ep_args[caddy/h3]="$at --h3 -c 2 --streams 10"; ep_root[caddy/h3]=$y_master
        ep_url[caddy/hs]="https://bench.test:$y_port"; ep_args[caddy/hs]="$at --h3 -c 20"; ep_root[caddy/hs]=$y_master
        eps+=" caddy/h3"
    else
        skip "HTTP/3 1 KiB hits" 4000/s caddy caddy
    fi
    ep_url[cache-d/hs]="https://bench.test:$c_tls"; ep_args[cache-d/hs]="$at --h3 -c 20"; ep_root[cache-d/hs]=$c_mgr
    "$bin/cache-adm" -n "$c_inst" param.set feature +http3 >/dev/null
    # (No hit check: Caddy serves a file, with no Age or X-Varnish.)
    row "1 KiB hits over HTTP/3" 4000/s "us CPU/req" "$kib" "$eps" -r 4000 -k
    if [ -n "$y_port" ]; then
        row "QUIC full handshakes" 300/s "handshakes/CPU-s" "$kib" "cache-d/hs caddy/hs" -r 300 -k --new-conn
        row "QUIC resumed handshakes" 300/s "handshakes/CPU-s" "$kib" "cache-d/hs caddy/hs" -r 300 -k --requests-per-conn 1
    fi
    "$bin/cache-adm" -n "$c_inst" param.set feature -http3 >/dev/null
}

# shellcheck disable=SC2086
pidset() { tree ${ep_root[$1]} | tr '\n' ' '; }
echo "CPU per request at fixed open-loop rates: $rounds alternating rounds of ${secs}s, medians (the tail rows: $tail_rounds rounds, --fine-pace); ratio = cache-d / peer"
echo "  cache-d ($cache_d): -s malloc,512m, the policy below, -p feature=+http2, https listener (rustls, TLS 1.2/1.3); pids $(pidset cache-d)"
echo "  varnishd $(varnishd -V 2>&1 | sed -n 's/^varnishd (\(varnish-[0-9.]*\).*/\1/p'): $varnish_config, -p feature=+http2, a PROXY listener for hitch; pids $(pidset varnishd)"
[ -z "$h_port" ] || echo "  hitch $(hitch --version 2>&1 | awk '{print $2; exit}'): 2 workers, PROXY v2 to varnishd, RSA-2048; counted with varnishd; pids $(pidset hitch+varnishd)"
[ -z "$n_port" ] || echo "  $(nginx -v 2>&1 | sed 's/.*: //'): proxy_cache, 2 workers, TLS 1.2/1.3, keepalive to the origin; pids $(pidset nginx)"
[ -z "$y_port" ] || echo "  $(caddy version 2>/dev/null | awk '{print "Caddy " $1}'): HTTP/1.1, 2 and 3 (quic-go), TLS 1.2/1.3, file_server of a 1 KiB file, GOMAXPROCS default; pids $(tree "$y_master" | tr '\n' ' ')"
echo "  policy (both): scripts/bench-policy.vcl, builtin + do_esi for /esi/, return(pass) for /pass/, PURGE; origin: cache-bench origin on loopback, not counted"
# shellcheck disable=SC2059
printf "$fmt" row load cache-d peer peer ratio unit
for g in $groups; do "g_$g"; done
