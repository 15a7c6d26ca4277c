#!/usr/bin/env bash
# The differential conformance suite: every scenario in tests/conformance
# (varnishtest files: a scripted origin and clients, the proxy a black box)
# run once against varnishd and once against cache-d. A scenario that fails
# on varnishd is wrong; one that fails on cache-d is a difference to fix.
# Usage: scripts/conformance.sh [varnishd|cache-d|both] [scenario.vtc...]
# tests/conformance/pending/ holds scenarios cache-d does not pass yet: run
# only when named. A scenario that starts with `feature cmd "test ${kind} =
# KIND"` runs on one server only (a deliberate difference, recorded with the
# other server's answer in a twin file): varnishtest skips it (status 77)
# on the other.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}; shift || true
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(tests/conformance/*.vtc)
command -v varnishtest >/dev/null || { echo "conformance: needs varnishtest (apt-get install varnish)" >&2; exit 2; }
bin=$(pwd)/${CARGO_TARGET_DIR:-target}/debug
[ -x "$bin/cache-d" ] || { echo "conformance: build first (cargo build --workspace)" >&2; exit 2; }
kinds=(varnishd cache-d); [ "$which" = both ] || kinds=("$which")
export CONFORMANCE_PIDS; CONFORMANCE_PIDS=$(mktemp)
trap 'xargs -r kill 2>/dev/null <"$CONFORMANCE_PIDS"; rm -f "$CONFORMANCE_PIDS" "$CONFORMANCE_PIDS.out"' EXIT
# A port below Linux's ephemeral range (32768 and up: outgoing connections
# take those) that nothing listens on.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
}
run_one() { # kind file port
    varnishtest -v -t 60 -D "proxy=$(pwd)/tests/conformance/proxy.sh $1 $bin $3" \
        -D "paddr=127.0.0.1 $3" -D "kind=$1" "$2" >"$CONFORMANCE_PIDS.out" 2>&1
}
failed=(); n=0; skipped=0
for kind in "${kinds[@]}"; do
    for f in "${files[@]}"; do
        n=$((n + 1)); ok=0
        # A port taken between the check and the bind: try another.
        for _ in 1 2 3; do
            rc=0; run_one "$kind" "$f" "$(free_port)" || rc=$?
            if [ $rc = 0 ]; then ok=1; break; fi
            if [ $rc = 77 ]; then ok=2; break; fi
            grep -q "Address already in use" "$CONFORMANCE_PIDS.out" || break
            xargs -r kill 2>/dev/null <"$CONFORMANCE_PIDS" || true; : >"$CONFORMANCE_PIDS"
        done
        if [ $ok = 1 ]; then
            printf 'ok    %-8s %s\n' "$kind" "$f"
        elif [ $ok = 2 ]; then
            printf 'skip  %-8s %s (a deliberate difference: runs on the other server)\n' "$kind" "$f"
            skipped=$((skipped + 1))
        else
            printf 'FAIL  %-8s %s\n' "$kind" "$f"
            # What failed: the failure line, and the last expectations before it.
            grep -E '^---- |EXPECT|FAILED|shell_out|proxy.sh' "$CONFORMANCE_PIDS.out" | tail -8 | sed 's/^/      /'
            failed+=("$kind $f")
        fi
        xargs -r kill 2>/dev/null <"$CONFORMANCE_PIDS" || true; : >"$CONFORMANCE_PIDS"
    done
done
rm -f "$CONFORMANCE_PIDS.out"
echo "conformance: $((n - ${#failed[@]} - skipped)) of $n runs passed, $skipped skipped as deliberate differences"
[ ${#failed[@]} -eq 0 ]
