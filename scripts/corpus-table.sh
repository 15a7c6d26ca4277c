#!/usr/bin/env bash
# The conformance corpus as a table: for each series of Varnish 7.1's own
# test suite (tests/conformance/corpus/*.tsv, one line per Varnish test:
# NAME STATE SCENARIOS NOTE), how many tests apply to cache-d, how many our
# scenarios cover, how many are deliberate differences, pending or not
# applicable. --check fails when a line names a scenario that is in
# neither tests/conformance/ nor pending/, or has an unknown state (a row
# covered in part may name pending scenarios for the part not matched yet).
set -euo pipefail
cd "$(dirname "$0")/.."
check=no; [ "${1:-}" = --check ] && check=yes
shopt -s nullglob
files=(tests/conformance/corpus/*.tsv)
[ ${#files[@]} -gt 0 ] || { echo "corpus-table: no corpus files" >&2; exit 1; }
cat "${files[@]}" | awk -F'\t' -v check=$check '
function exists(f) { return (system("test -f " f) == 0) }
/^[ \t]*(#|$)/ { next }
{
    s = substr($1, 1, 1); state = $2; series[s] = 1; total[s]++
    if (state == "covered") cov[s]++
    else if (state == "difference") diff[s]++
    else if (state == "pending") pend[s]++
    else if (state == "n/a") na[s]++
    else if (state == "todo") todo[s]++
    else { print "corpus-table: " $1 ": unknown state " state > "/dev/stderr"; bad = 1 }
    if (check == "yes" && $3 != "-" && $3 != "") {
        n = split($3, sc, ",")
        for (i = 1; i <= n; i++) {
            f = sc[i]; gsub(/ /, "", f)
            if (!exists("tests/conformance/" f ".vtc") && !exists("tests/conformance/pending/" f ".vtc")) {
                print "corpus-table: " $1 " names " f ", in neither tests/conformance/ nor pending/" > "/dev/stderr"; bad = 1
            }
        }
    }
}
END {
    print "| series | Varnish 7.1 tests | apply | covered | deliberate differences | pending | not applicable | not yet read |"
    print "|---|---|---|---|---|---|---|---|"
    n = 0
    for (s in series) order[++n] = s
    for (i = 2; i <= n; i++) for (j = i; j > 1 && order[j - 1] > order[j]; j--) { t = order[j]; order[j] = order[j - 1]; order[j - 1] = t }
    for (i = 1; i <= n; i++) {
        s = order[i]
        printf "| %s | %d | %d | %d | %d | %d | %d | %d |\n", s, total[s], total[s] - na[s] - todo[s], cov[s], diff[s], pend[s], na[s], todo[s]
        T += total[s]; A += total[s] - na[s] - todo[s]; C += cov[s]; D += diff[s]; P += pend[s]; N += na[s]; O += todo[s]
    }
    printf "| all | %d | %d | %d | %d | %d | %d | %d |\n", T, A, C, D, P, N, O
    exit bad
}'
