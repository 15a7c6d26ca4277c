#!/bin/sh
# cachekit-reload: load the VCL again whenever its ConfigMap changes.
#
# Kubernetes updates a mounted ConfigMap by switching the volume's ..data
# link; this sidecar watches it and then runs, through the admin socket,
#   vcl.load <new name> <file>   a program that fails to compile or whose
#                                vcl_init fails is refused: the running one
#                                stays active (the error is printed here,
#                                so `kubectl logs POD -c vcl-reload` shows
#                                it with its line and column);
#   vcl.use <new name>           on failure, back to the previous program;
#   vcl.discard                  of the programs no longer active.
# The manager replays the loaded programs into a restarted child, and a
# restarted pod starts from the file itself, so nothing else keeps state.
set -u
DIR=${CACHEKIT_INSTANCE:-/var/lib/cachekit}
VCL=${CACHEKIT_VCL:-/etc/cachekit/vcl/default.vcl}
INTERVAL=${CACHEKIT_RELOAD_INTERVAL:-5}
WATCH=$(dirname "$VCL")/..data

adm() { cache-adm -n "$DIR" "$@"; }
active() { adm vcl.list | awk '$1 == "active" { print $NF }'; }
version() { readlink "$WATCH" 2>/dev/null || cksum < "$VCL"; }

until adm ping > /dev/null 2>&1; do sleep 1; done
seen=$(version)
n=0
echo "cachekit-reload: watching $VCL (active: $(active))"
while sleep "$INTERVAL"; do
    now=$(version)
    [ "$now" = "$seen" ] && continue
    seen=$now
    old=$(active)
    n=$((n + 1))
    new=k8s_$(date +%Y%m%d_%H%M%S)_$n
    if ! adm vcl.load "$new" "$VCL"; then
        echo "cachekit-reload: $VCL was refused; $old stays active" >&2
        continue
    fi
    if ! adm vcl.use "$new"; then
        echo "cachekit-reload: vcl.use $new failed; back to $old" >&2
        adm vcl.use "$old"
        adm vcl.discard "$new"
        continue
    fi
    echo "cachekit-reload: $new active (was $old)"
    adm vcl.list | awk '$1 == "available" { print $NF }' | while read -r name; do
        adm vcl.discard "$name" > /dev/null || echo "cachekit-reload: could not discard $name" >&2
    done
done
