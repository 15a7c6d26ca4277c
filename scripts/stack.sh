# Sourced by demo.sh and bench-proxy.sh: build the release binaries, then
# start the test origin and cache-d in front of it on free loopback ports
# with a throw-away instance directory, all stopped at exit.
# Sets: bin, work, origin (host:port), ip, port (cache-d's).
cargo build --release --workspace --locked >&2
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$bin/cache-bench" origin --listen 127.0.0.1:0 >"$work/origin.out" &
pids+=($!)
until grep -q listening "$work/origin.out" 2>/dev/null; do sleep 0.05; done
origin=$(sed -n 's/^listening on //p' "$work/origin.out")
"$bin/cache-d" -F -a 127.0.0.1:0 -b "$origin" -n "$work/inst" &
pids+=($!)
until [ -s "$work/inst/_.listen" ]; do sleep 0.05; done
read -r _ ip port <"$work/inst/_.listen"
