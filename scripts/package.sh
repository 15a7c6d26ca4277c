#!/usr/bin/env bash
# Build the Debian package: target/debian/cachekit_VERSION_ARCH.deb, with
# dpkg-deb (part of dpkg, on every Debian system; nothing to install).
#   /usr/bin                      the six programs
#   /usr/share/man/man1, man7     the man pages
#   /lib/systemd/system           cache-d.service (Type=notify; reload =
#                                 vcl.load + vcl.use of /etc/cachekit/default.vcl),
#                                 cache-ncsa.service, cache-stat-exporter.service
#   /etc/cachekit/default.vcl, /etc/default/cachekit   conffiles
#   /etc/logrotate.d/cache-ncsa
#   bash, zsh and fish completions for every program (clap_complete)
#   /usr/share/doc/cachekit       copyright (BSD-2-Clause), changelog
#   postinst: the cachekit system user, /var/lib/cachekit, /var/log/cachekit;
#             the units enabled (deb-systemd-helper), not started on a first
#             install, restarted on an upgrade when they ran (deb-systemd-invoke)
#   Depends: the libraries the binaries link, versioned (dpkg-shlibdeps)
# The binaries are stripped; their debug information goes into
# cachekit-dbgsym_VERSION_ARCH.deb beside it, as Debian's dh_strip does
# (/usr/lib/debug/.build-id/XX/YYYY.debug, found by gdb and perf through
# the build id).
# cache-d is the profile-guided build of scripts/build-pgo.sh (trained on
# the benchmarks' loads; about a quarter less CPU per hit, issue 37), the
# other programs the plain release build. CACHEKIT_PACKAGE_PGO=0 packages
# the plain release cache-d (a build of minutes, not twenty).
# Usage: scripts/package.sh            (then: dpkg -c target/debian/*.deb)
# The tests package the debug build they already have, without building:
#   CACHEKIT_PACKAGE_PROFILE=debug CACHEKIT_PACKAGE_OUT=DIR scripts/package.sh
# CACHEKIT_PACKAGE_DBGSYM=0 strips without keeping the debug information
# (no dbgsym package; the end-to-end test's quick build).
# It prints the package's path (the dbgsym package's path on stderr);
# `lintian target/debian/*.deb` finds nothing in either.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v dpkg-deb >/dev/null || { echo "package: needs dpkg-deb (a Debian system)" >&2; exit 2; }
progs=(cache-d cache-adm cache-stat cache-log cache-ncsa cache-bench)
profile=${CACHEKIT_PACKAGE_PROFILE:-release}
pgo=0
[ "$profile" = release ] && [ "${CACHEKIT_PACKAGE_PGO:-1}" = 1 ] && pgo=1
if [ "$profile" = release ]; then
    echo "package: building the release binaries" >&2
    # With the profile-guided cache-d, the workspace, as build-pgo.sh's
    # training (scripts/bench-pair.sh) builds it: one feature set, one build.
    if [ $pgo = 1 ]; then
        cargo build --release --locked --workspace >&2
    else
        cargo build --release --locked $(printf -- '-p %s ' "${progs[@]}") -p cachekit-pkg >&2
    fi
fi
bin=target/$profile
for p in "${progs[@]}" cachekit-pkg; do
    [ -x "$bin/$p" ] || { echo "package: $bin/$p is missing (cargo build --workspace)" >&2; exit 2; }
done
cache_d=$bin/cache-d
if [ $pgo = 1 ]; then
    echo "package: building cache-d profile-guided (scripts/build-pgo.sh; CACHEKIT_PACKAGE_PGO=0 skips)" >&2
    cache_d=$(bash scripts/build-pgo.sh)
fi
version=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture)
out=${CACHEKIT_PACKAGE_OUT:-target/debian}
root=$out/root
dbg=$out/root-dbgsym
rm -rf "$root" "$dbg"
mkdir -p "$dbg/DEBIAN" "$dbg/usr/share/doc"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" "$root/usr/share/man/man7" \
    "$root/lib/systemd/system" "$root/etc/cachekit" "$root/etc/default" "$root/etc/logrotate.d" \
    "$root/usr/share/cachekit" "$root/usr/share/doc/cachekit" \
    "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
for p in "${progs[@]}"; do
    src=$bin/$p
    [ "$p" != cache-d ] || src=$cache_d
    install -m 0755 "$src" "$root/usr/bin/$p"
done
# Debug information goes to the dbgsym package, under the build id.
build_ids=()
for p in "${progs[@]}"; do
    f=$root/usr/bin/$p
    id=$(readelf -n "$f" | sed -n 's/^ *Build ID: *\([0-9a-f]*\)$/\1/p')
    [ "${CACHEKIT_PACKAGE_DBGSYM:-1}" = 1 ] || id=
    if [ -n "$id" ]; then
        d=$dbg/usr/lib/debug/.build-id/${id:0:2}
        mkdir -p "$d"
        objcopy --only-keep-debug --compress-debug-sections "$f" "$d/${id:2}.debug"
        chmod 0644 "$d/${id:2}.debug"
        build_ids+=("$id")
    fi
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$f"
    [ -z "$id" ] || objcopy --add-gnu-debuglink="$d/${id:2}.debug" "$f"
done
for m in man/*.1; do gzip -9n <"$m" >"$root/usr/share/man/man1/$(basename "$m").gz"; done
for m in man/*.7; do gzip -9n <"$m" >"$root/usr/share/man/man7/$(basename "$m").gz"; done
install -m 0644 contrib/debian/cache-d.service contrib/debian/cache-ncsa.service \
    contrib/debian/cache-stat-exporter.service "$root/lib/systemd/system/"
install -m 0644 contrib/debian/default.vcl "$root/etc/cachekit/default.vcl"
install -m 0644 contrib/debian/default "$root/etc/default/cachekit"
install -m 0644 contrib/debian/cache-ncsa.logrotate "$root/etc/logrotate.d/cache-ncsa"
install -m 0755 contrib/debian/cachekit-reload "$root/usr/share/cachekit/cachekit-reload"
comp=$(mktemp -d)
trap 'rm -rf "$comp"' EXIT
"$bin/cachekit-pkg" completions "$comp"
for p in "${progs[@]}"; do
    install -m 0644 "$comp/bash/$p" "$root/usr/share/bash-completion/completions/$p"
    install -m 0644 "$comp/zsh/_$p" "$root/usr/share/zsh/vendor-completions/_$p"
    install -m 0644 "$comp/fish/$p.fish" "$root/usr/share/fish/vendor_completions.d/$p.fish"
done
{
    printf '%s\n' "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" \
        "Upstream-Name: cachekit" "Source: https://example.invalid/cachekit" "" \
        "Files: *" "Copyright: 2026 the cachekit developers" "License: BSD-2-Clause" "" "License: BSD-2-Clause"
    # The license's text from LICENSE, below its title and copyright lines,
    # as a copyright file's paragraph: each line indented, blank ones ".".
    sed -n '/^Redistribution/,$p' LICENSE | sed 's/^$/./; s/^/ /'
} >"$root/usr/share/doc/cachekit/copyright"
grep -q "^cachekit ($version) " contrib/debian/changelog ||
    { echo "package: contrib/debian/changelog has no entry for $version (the workspace's version)" >&2; exit 2; }
gzip -9n <contrib/debian/changelog >"$root/usr/share/doc/cachekit/changelog.gz"
for s in postinst prerm postrm; do install -m 0755 "contrib/debian/$s" "$root/DEBIAN/$s"; done
printf '%s\n' /etc/cachekit/default.vcl /etc/default/cachekit /etc/logrotate.d/cache-ncsa >"$root/DEBIAN/conffiles"
# md5sums of every file but the conffiles (dpkg keeps theirs), for debsums.
md5sums() { (cd "$1" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0r md5sum) >"$1/DEBIAN/md5sums"; }
md5sums "$root"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
# The shared libraries the programs link (libc6 and libgcc-s1, with the
# versions their symbols need), as dpkg-shlibdeps reads them from the
# binaries; without dpkg-dev, an unversioned libc6.
bins=$(realpath "$root"/usr/bin/*)
shlibs=$(cd "$comp" && mkdir -p debian && printf 'Source: cachekit\n\nPackage: cachekit\nArchitecture: any\n' >debian/control \
    && dpkg-shlibdeps -O $bins 2>/dev/null | sed -n 's/^shlibs:Depends=//p') || true
[ -n "$shlibs" ] || shlibs=libc6
cat >"$root/DEBIAN/control" <<EOF
Package: cachekit
Version: $version
Architecture: $arch
Maintainer: cachekit developers <cachekit@example.invalid>
Installed-Size: $size
Depends: $shlibs, adduser, procps
Recommends: logrotate
Section: web
Priority: optional
Homepage: https://example.invalid/cachekit
Description: Varnish-compatible HTTP caching toolkit
 cache-d, a caching reverse proxy with Varnish's interfaces (VCL, the admin
 protocol, counters, the shared-memory log), and the tools beside it:
 cache-adm, cache-stat (with a Prometheus exporter), cache-log, cache-ncsa
 and the load generator cache-bench.
EOF
deb="$out/cachekit_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2

# The dbgsym package: what Debian's debhelper makes, by hand. Its doc
# directory is a link to cachekit's, as in Debian's own dbgsym packages.
if [ ${#build_ids[@]} = 0 ]; then
    echo "$deb"
    exit 0
fi
ln -s cachekit "$dbg/usr/share/doc/cachekit-dbgsym"
md5sums "$dbg"
cat >"$dbg/DEBIAN/control" <<EOF
Package: cachekit-dbgsym
Source: cachekit
Version: $version
Auto-Built-Package: debug-symbols
Architecture: $arch
Maintainer: cachekit developers <cachekit@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$dbg" | cut -f1)
Depends: cachekit (= $version)
Section: debug
Priority: optional
Description: debug symbols for cachekit
Build-Ids: ${build_ids[*]}
EOF
dbgdeb="$out/cachekit-dbgsym_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz -z1 --build "$dbg" "$dbgdeb" >&2
echo "package: debug information in $dbgdeb" >&2
echo "$deb"
