#!/usr/bin/env bash
# Costs that must grow gently (issue 16), in one run:
#  1. vcl.load of a generated ~5,000-line VCL (410 subroutines with a regex,
#     a regsub and string work each) through the admin socket: cache-d
#     (cache-adm) and varnishd (varnishadm, which compiles it to C);
#  2. hits/s over random URLs among 1,000 objects in a cache holding
#     them alone, against random URLs among 1,000,000 in a cache holding
#     those (two cache-d, -s malloc,2g, measured in alternation);
#  3. hits/s on 1,000 objects in a third cache-d with 10,000 bans on its
#     list, added after the objects (each object tested against them once
#     first; an older object never asked for keeps the bans listed).
# The three caches are measured round by round in turn (A, bans, big), so
# the machine's drift falls on all of them alike.
# Usage: scripts/bench-growth.sh [seconds] [rounds] [objects]  (objects 0: skip part 2's fill)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; many=${3:-1000000}
for t in wrk varnishd varnishadm; do
    command -v "$t" >/dev/null || { echo "bench: needs $t (apt-get install wrk varnish)" >&2; exit 2; }
done
. scripts/bench-pair.sh
start_pair "" 2g
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
secs_of() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b-a}'; }

# 1. vcl.load of a 5,000-line VCL.
awk -v port="${origin##*:}" 'BEGIN {
    n = 410
    print "vcl 4.1;"
    print "backend default { .host = \"127.0.0.1\"; .port = \"" port "\"; }"
    print "acl purgers { \"127.0.0.1\"; \"10.0.0.0\"/8; }"
    for (i = 0; i < n; i++) {
        print "sub route_" i " {"
        print "    if (req.url ~ \"^/section" i "/[a-z]+/([0-9]+)$\") {"
        print "        set req.http.X-Section = \"" i "\";"
        print "        set req.url = regsub(req.url, \"^/section" i "/\", \"/s" i "/\");"
        print "    } elsif (req.http.host == \"site" i ".example.com\") {"
        print "        set req.http.X-Site = \"" i "\";"
        print "        unset req.http.Cookie;"
        print "    } else {"
        print "        set req.http.X-Other = req.http.X-Other + \"" i "\";"
        print "    }"
        print "}"
    }
    print "sub vcl_recv {"
    for (i = 0; i < n; i++) print "    call route_" i ";"
    print "    if (req.method == \"PURGE\" && client.ip ~ purgers) { return (purge); }"
    print "}"
}' >"$work/big.vcl"
chmod 644 "$work/big.vcl"
lines=$(wc -l <"$work/big.vcl")
c=$(for i in $(seq "$rounds"); do secs_of "$bin/cache-adm" -n "$c_inst" vcl.load "big$i" "$work/big.vcl"; echo; done | median)
v=$(for i in $(seq "$rounds"); do secs_of varnishadm -n "$v_inst" vcl.load "big$i" "$work/big.vcl"; echo; done | median)
printf 'vcl.load of a %d-line VCL: cache-d %.3f s, varnishd %.3f s  %s\n' "$lines" "$c" "$v" \
    "$(awk -v c="$c" 'BEGIN {print (c < 1) ? "goal <1 s met" : "goal <1 s MISSED"}')"

# 2. and 3.: three caches, each hit over random URLs among its objects.
randlua() { # n -> a wrk script asking for random objects 0..n-1
    cat >"$work/rand$1.lua" <<LUA
math.randomseed(42)
request = function()
    return wrk.format(nil, "/size/1?max_age=3600&n=" .. math.random(0, $1 - 1))
end
LUA
}
start_cache_d() { # name -> $url: a further cache-d (-s malloc,2g) on the origin
    local inst=$work/$1 ip port
    "$bin/cache-d" -F -a 127.0.0.1:0 -b "$origin" -n "$inst" -s malloc,2g >"$work/$1.log" 2>&1 &
    pids+=($!)
    until [ -s "$inst/_.listen" ]; do sleep 0.05; done
    read -r _ ip port <"$inst/_.listen"
    url="http://$ip:$port"
}
hits() { # url n -> hits/s over random objects among the first n
    wrk -t1 -c50 -d"${secs}s" -s "$work/rand$2.lua" "$1/" | awk '/^Requests\/sec/ {print $2}'
}
stat() { "$bin/cache-stat" -1 -n "$1" -f "$2" | awk '{print $2}'; }
randlua 1000
few_url=$c_url
fill "$few_url" 1 1000 1000
# Bans: an object older than them that is never asked for again keeps
# them all on the list (bans every object has been tested against are
# dropped); 10,000 that match nothing, added in one admin session.
start_cache_d bans; ban_url=$url
curl -s -o /dev/null "$ban_url/size/1?max_age=3600&n=anchor"
fill "$ban_url" 1 1000 1000
for i in $(seq 10000); do echo "ban req.url == /no-such-object-$i"; done | "$bin/cache-adm" -n "$work/bans" >/dev/null
wrk -t1 -c8 -d2s -s "$work/rand1000.lua" "$ban_url/" >/dev/null   # each object tests the bans once
big_url=""
if [ "$many" -gt 0 ]; then
    randlua "$many"
    start_cache_d big; big_url=$url
    echo "filling $many objects..." >&2
    fill "$big_url" 1 "$many" "$many"
fi
: >"$work/few"; : >"$work/banned"; : >"$work/lots"
for _ in $(seq "$rounds"); do
    hits "$few_url" 1000 >>"$work/few"
    hits "$ban_url" 1000 >>"$work/banned"
    [ -z "$big_url" ] || hits "$big_url" "$many" >>"$work/lots"
done
echo "rounds (hits/s): 1,000 objects: $(tr '\n' ' ' <"$work/few")| with bans: $(tr '\n' ' ' <"$work/banned")| among $many: $(tr '\n' ' ' <"$work/lots")"
few=$(median <"$work/few"); banned=$(median <"$work/banned")
bans=$(stat "$work/bans" MAIN.bans)
awk -v a="$banned" -v b="$few" -v n="$bans" 'BEGIN {printf "hits/s on 1,000 objects: no bans %.0f, with %d bans on the list %.0f (%.2fx)  %s\n", b, n, a, a/b, (a >= 0.9*b) ? "goal within 10% met" : "goal within 10% MISSED"}'
[ -n "$big_url" ] || exit 0
lots=$(median <"$work/lots")
awk -v a="$lots" -v b="$few" -v n="$(stat "$work/big" MAIN.n_object)" 'BEGIN {printf "hits/s over random objects: among 1,000 %.0f, among %d %.0f (%.2fx)  %s\n", b, n, a, a/b, (a >= 0.9*b) ? "goal within 10% met" : "goal within 10% MISSED"}'
