#!/usr/bin/env bash
# A fuzz campaign: every target under coverage-guided libFuzzer (cargo fuzz,
# on the stable toolchain through RUSTC_BOOTSTRAP), one after the other,
# starting from fuzz/seeds and keeping what it finds in fuzz/corpus.
# Crashes land in fuzz/artifacts/<target>/ and make the exit status 1.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(http_request http_response vcl_parse vcl_run vsl_query vsl_records ban_expr adm_lines agent_msg gzip_body esi_parse proxy_header h2_glue disk_records)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O --debug-assertions >&2
failed=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    [ -d "seeds/$t" ] && cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true
    log=$(mktemp)
    if cargo fuzz run -O --debug-assertions "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        status=ok
    else
        status=CRASH; failed=1
        grep -E "panicked at|ERROR: libFuzzer|Test unit written" "$log" | head -5 >&2
    fi
    execs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$log")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    printf '%-14s %-6s %10s execs in %ss, coverage %s, corpus %s\n' "$t" "$status" "${execs:-?}" "$secs" "${cov:-?}" "$(ls "corpus/$t" | wc -l)"
    rm -f "$log"
done
exit $failed
