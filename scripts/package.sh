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
#   postinst: the cachekit system user, /var/lib/cachekit, /var/log/cachekit
#   Depends: the libraries the binaries link, versioned (dpkg-shlibdeps)
# Usage: scripts/package.sh            (then: dpkg -c target/debian/*.deb)
# The tests package the debug build they already have, without building:
#   CACHEKIT_PACKAGE_PROFILE=debug CACHEKIT_PACKAGE_OUT=DIR scripts/package.sh
# It prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v dpkg-deb >/dev/null || { echo "package: needs dpkg-deb (a Debian system)" >&2; exit 2; }
progs=(cache-d cache-adm cache-stat cache-log cache-ncsa cache-bench)
profile=${CACHEKIT_PACKAGE_PROFILE:-release}
if [ "$profile" = release ]; then
    echo "package: building the release binaries" >&2
    cargo build --release --locked $(printf -- '-p %s ' "${progs[@]}") -p cachekit-pkg >&2
fi
bin=target/$profile
for p in "${progs[@]}" cachekit-pkg; do
    [ -x "$bin/$p" ] || { echo "package: $bin/$p is missing (cargo build --workspace)" >&2; exit 2; }
done
version=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture)
out=${CACHEKIT_PACKAGE_OUT:-target/debian}
root=$out/root
rm -rf "$root"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" "$root/usr/share/man/man7" \
    "$root/lib/systemd/system" "$root/etc/cachekit" "$root/etc/default" "$root/etc/logrotate.d" \
    "$root/usr/share/cachekit" "$root/usr/share/doc/cachekit" \
    "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
for p in "${progs[@]}"; do
    install -m 0755 "$bin/$p" "$root/usr/bin/$p"
done
# Debug information stays in the build, not in the package.
strip --strip-debug "$root"/usr/bin/* 2>/dev/null || true
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
cat >"$root/usr/share/doc/cachekit/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cachekit
Files: *
License: BSD-2-Clause
EOF
for s in postinst prerm postrm; do install -m 0755 "contrib/debian/$s" "$root/DEBIAN/$s"; done
printf '%s\n' /etc/cachekit/default.vcl /etc/default/cachekit /etc/logrotate.d/cache-ncsa >"$root/DEBIAN/conffiles"
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
Depends: $shlibs, adduser
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
echo "$deb"
