#!/usr/bin/env bash
# Build cache-d profile-guided (PGO): target/pgo/release/cache-d, the
# binary the package ships (scripts/package.sh) and the one issue 37's
# figures are measured on (CACHE_D=target/pgo/release/cache-d
# scripts/bench-cpu.sh).
#
# Why: cache-d's hit path is short (about 25,000 instructions for a 1 B
# hit, callgrind) but runs at a low rate of instructions per cycle: its
# code is spread over async state machines, the log writer, the policy
# and tokio, and each request runs it once between two system calls that
# evict the caches. Told which branches and functions are hot, the
# compiler lays the hot path out together and moves the cold code (error
# handling, rare protocol cases) away. Measured at 12,000 1 B hits/s over
# 20 connections (user + system CPU of the manager and child, /proc): 28.9
# -> 21.7 us of CPU per hit, medians of 3 alternating runs (README).
#
# How (rustc's -Cprofile-generate / -Cprofile-use, LLVM's instrumentation):
#  1. cache-d built with counters (target/pgo-gen, its own target dir:
#     the normal release build stays as it is);
#  2. that binary in front of cache-bench's origin, with the benchmarks'
#     policy (scripts/bench-policy.vcl: ESI, pass, PURGE), an https listener and
#     HTTP/2, serves a training load of every kind the benchmarks measure:
#     HTTP/1.1 hits from 1 B to 1 MiB, misses on new URLs, passes, ESI
#     pages, gzip bodies gunzipped for a plain client and sent as they are
#     to one that takes gzip, HTTP/2 streams, TLS on kept and new
#     connections, HTTP/3, purges and 404s; then stops, its child writing
#     its counts;
#  3. llvm-profdata (rustup's llvm-tools, added if missing) merges them
#     into target/pgo/cache-d.profdata;
#  4. cache-d built again with them (target/pgo).
# Code the training does not run is still compiled and correct, only
# optimized for size, not speed.
# Takes two release builds of cache-d (about 20 minutes on 2 cores) and
# a quarter of a minute of load. Progress goes to stderr; the binary's path is
# printed at the end.
# Usage: scripts/build-pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
    "") ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/build-pgo.sh" >&2; exit 2 ;;
esac
for t in openssl jq; do
    command -v "$t" >/dev/null || { echo "build-pgo: needs $t (apt-get install openssl jq)" >&2; exit 2; }
done
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    echo "build-pgo: adding rustup's llvm-tools (llvm-profdata)" >&2
    rustup component add llvm-tools >&2 || { echo "build-pgo: needs llvm-profdata: rustup component add llvm-tools" >&2; exit 2; }
fi
step() { echo "build-pgo: [$1/4] $2 ($(date +%T))" >&2; }

raw=$PWD/target/pgo/raw
rm -rf "$raw"; mkdir -p "$raw"
step 1 "building cache-d with profile counters (target/pgo-gen)"
RUSTFLAGS="-Cprofile-generate=$raw" CARGO_TARGET_DIR=target/pgo-gen cargo build --release --locked -p cache-d >&2
# Build scripts ran instrumented too: only the training's counts are kept.
rm -rf "$raw"; mkdir -p "$raw"
step 2 "training load"
# The origin (and the release build of the workspace it runs from, as the
# benchmarks build it) and the certificates: the benchmarks' own helpers.
. scripts/bench-cpu-peers.sh
. scripts/bench-pair.sh
make_certs
sed "s/ORIGIN_PORT/${origin##*:}/" scripts/bench-policy.vcl >"$work/policy.vcl"
inst=$work/inst
target/pgo-gen/release/cache-d -F -a 127.0.0.1:0 -a tls=127.0.0.1:0,https -A "$work/tls.conf" -f "$work/policy.vcl" \
    -n "$inst" -s malloc,256m -p feature=+http2 -p feature=+http3 >"$work/cache-d.log" 2>&1 &
mgr=$!
pids+=("$mgr")
for _ in $(seq 300); do [ -s "$inst/_.listen" ] && grep -q '^tls ' "$inst/_.listen" && break; sleep 0.1; done
grep -q '^tls ' "$inst/_.listen" 2>/dev/null || { echo "build-pgo: the instrumented cache-d did not start:" >&2; tail -5 "$work/cache-d.log" >&2; exit 1; }
read -r _ ip port < <(head -n1 "$inst/_.listen")
tls=$(awk '$1 == "tls" {print $3}' "$inst/_.listen")
plain="http://$ip:$port"
awk 'BEGIN {for (i = 0; i < 4000; i++) printf "/size/1024?max_age=3600&m=%d\n", i}' >"$work/urls"
# load NAME cache-bench-args...: one closed-loop run; prints the answers
# (a status other than 2xx counts among cache-bench's errors).
load() {
    local name=$1; shift
    local n
    n=$("$bin/cache-bench" run -q --json "$@" | jq '"\(.requests) answers, \(.errors.total) errors"') ||
        { echo "build-pgo: training load '$name' failed" >&2; exit 1; }
    printf 'build-pgo:   %-24s %s\n' "$name" "${n//\"/}" >&2
}
for size in 1 1024 10240 102400; do load "hits $size B" -n 20000 -c 20 "$plain/size/$size?max_age=3600"; done
load "hits 1 MiB" -n 1000 -c 10 "$plain/size/1048576?max_age=3600"
load "misses, new URLs" -c 20 --urls "$work/urls" --pick seq -n 4000 "$plain"
load "pass" -n 4000 -c 20 "$plain/pass/size/1024?max_age=3600"
load "ESI, 10 fragments" -n 3000 -c 20 "$plain/esi/10?max_age=3600&frag_size=1024"
load "gzip, gunzipped" -n 2000 -c 20 --expect-size 102400 "$plain/text/102400?gzip=1&max_age=3600"
load "gzip, as stored" -n 2000 -c 20 -H 'Accept-Encoding: gzip' "$plain/text/102400?gzip=1&max_age=3600"
load "h2c, 10 streams" -n 20000 -c 10 --h2 --streams 10 "$plain/size/1024?max_age=3600"
load "TLS, kept" -n 20000 -c 20 -k "https://127.0.0.1:$tls/size/1024?max_age=3600"
load "TLS h2" -k -n 10000 -c 10 --h2 --streams 10 "https://127.0.0.1:$tls/size/1024?max_age=3600"
load "TLS, new connections" -n 500 -c 10 -k --new-conn "https://127.0.0.1:$tls/size/1024?max_age=3600"
load "TLS ECDSA, new" -k -n 500 -c 10 --new-conn --resolve ecdsa.test:127.0.0.1 "https://ecdsa.test:$tls/size/1024?max_age=3600"
load "HTTP/3" -k -n 5000 -c 2 --h3 --streams 10 --resolve bench.test:127.0.0.1 "https://bench.test:$tls/size/1024?max_age=3600"
load "404 from the origin" -n 2000 -c 10 "$plain/missing?status=404"
load "POST, passed" -n 2000 -c 10 -m POST --body "a=1&b=2" "$plain/form"
load "purge" -n 500 -c 5 -m PURGE "$plain/size/1024?max_age=3600"
# The manager stops its child on SIGTERM; the child's counts are written
# as it exits (one file a binary, merged online: the manager's too).
kill "$mgr"
wait "$mgr" 2>/dev/null || true
ls "$raw"/*.profraw >/dev/null 2>&1 || { echo "build-pgo: the training wrote no profile (in $raw)" >&2; exit 1; }

step 3 "merging the profile (target/pgo/cache-d.profdata)"
mkdir -p target/pgo
"$profdata" merge -o target/pgo/cache-d.profdata "$raw"/*.profraw

step 4 "building cache-d with the profile (target/pgo)"
RUSTFLAGS="-Cprofile-use=$PWD/target/pgo/cache-d.profdata" CARGO_TARGET_DIR=target/pgo cargo build --release --locked -p cache-d >&2
echo "target/pgo/release/cache-d"
