#!/bin/sh
# The vcl-reload sidecar: load the VCL again whenever its ConfigMap changes.
#
# Kubernetes updates a mounted ConfigMap by switching the volume's ..data
# link; this watches it and then runs cachekit-reload (the same script as
# the Debian package's `systemctl reload cache-d`):
#   vcl.load <new name> <file>   a program that fails to compile or whose
#                                vcl_init fails is refused: the running one
#                                stays active (the error is printed here,
#                                so `kubectl logs POD -c vcl-reload` shows
#                                it with its line and column);
#   vcl.use <new name>           on failure, back to the previous program;
#   vcl.discard                  of the programs no longer active that
#                                it or cache-d made (boot, reload_*).
# The manager replays the loaded programs into a restarted child, and a
# restarted pod starts from the file itself, so nothing else keeps state.
set -u
export CACHEKIT_INSTANCE=${CACHEKIT_INSTANCE:-/var/lib/cachekit}
VCL=${CACHEKIT_VCL:-/etc/cachekit/vcl/default.vcl}
INTERVAL=${CACHEKIT_RELOAD_INTERVAL:-5}
RELOAD=${CACHEKIT_RELOAD:-/usr/share/cachekit/cachekit-reload}
WATCH=$(dirname "$VCL")/..data

version() { readlink "$WATCH" 2>/dev/null || cksum < "$VCL"; }

until cache-adm -n "$CACHEKIT_INSTANCE" ping > /dev/null 2>&1; do sleep 1; done
seen=$(version)
echo "cachekit-reload: watching $VCL"
while sleep "$INTERVAL"; do
    now=$(version)
    [ "$now" = "$seen" ] && continue
    seen=$now
    "$RELOAD" "$VCL" || true
done
