#!/bin/bash
# make-deb.sh TERRACE OUTDIR: builds OUTDIR/terrace_VERSION_ARCH.deb with
# dpkg-deb from the built binary TERRACE (`make deb` runs it on
# target/release/terrace and puts the package in target/).
#
# The package holds:
#   /usr/bin/terrace
#   /sbin/mount.fuse.terrace -> /usr/bin/terrace   (mount -t fuse.terrace, fstab)
#   /lib/systemd/system/terrace@.service           (dist/systemd, paths to /usr/bin)
#   /etc/terrace/                                  (the unit's INSTANCE.env files)
#   bash, zsh and fish completions; man pages (terrace.1, terrace-*.1), generated
#   by the binary itself
# and depends on fuse3 (fusermount3, mount.fuse3).
set -euo pipefail

TERRACE=${1:?usage: make-deb.sh TERRACE OUTDIR}
OUT=${2:?usage: make-deb.sh TERRACE OUTDIR}
REPO=$(cd "$(dirname "$0")/.." && pwd)
command -v dpkg-deb >/dev/null || { echo "make-deb.sh: dpkg-deb is not installed (apt-get install dpkg)" >&2; exit 1; }

VERSION=$("$TERRACE" --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
NAME="terrace_${VERSION}_${ARCH}"
mkdir -p "$OUT"
STAGE=$(mktemp -d "$OUT/.deb-stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
ROOT="$STAGE/$NAME"

install -D -m 0755 "$TERRACE" "$ROOT/usr/bin/terrace"
# Without the debug information of the release profile (a tenth of the size).
if command -v strip >/dev/null; then strip --strip-debug "$ROOT/usr/bin/terrace"; fi
install -d "$ROOT/sbin" "$ROOT/etc/terrace"
ln -s /usr/bin/terrace "$ROOT/sbin/mount.fuse.terrace"
install -D -m 0644 "$REPO/dist/systemd/terrace@.service" "$ROOT/lib/systemd/system/terrace@.service"
sed -i 's#/usr/local/bin/terrace#/usr/bin/terrace#g' "$ROOT/lib/systemd/system/terrace@.service"
make -C "$REPO" --no-print-directory -s install-docs TERRACE="$ROOT/usr/bin/terrace" DESTDIR="$ROOT" \
    PREFIX=/usr ZSHCOMPDIR=/usr/share/zsh/vendor-completions MANGZIP=1 >/dev/null
install -D -m 0644 /dev/stdin "$ROOT/usr/share/doc/terrace/copyright" <<COPYRIGHT
Terrace: a tiered file system with metadata and logs on persistent memory.
License: Apache-2.0 (see /usr/share/common-licenses/Apache-2.0).
COPYRIGHT

SIZE_KB=$(du -sk "$ROOT" | cut -f1)
install -d "$ROOT/DEBIAN"
cat > "$ROOT/DEBIAN/control" <<CONTROL
Package: terrace
Version: $VERSION
Architecture: $ARCH
Maintainer: Terrace developers <terrace@localhost>
Depends: fuse3
Section: admin
Priority: optional
Installed-Size: $SIZE_KB
Homepage: https://github.com/terrace-fs/terrace
Description: tiered FUSE file system with metadata and logs on persistent memory
 Terrace keeps a pool of files on a persistent-memory tier (a DAX file, or a
 file on /dev/shm) and optional SSD/HDD tiers, mounted through FUSE, moving
 data between the tiers as it cools and warms. The package installs the
 terrace command, the mount(8) helper for mount -t fuse.terrace and fstab,
 the systemd template unit terrace@.service, shell completions and manual
 pages.
CONTROL
# Reload systemd's units when it runs (the unit is a template: nothing starts).
for script in postinst postrm; do
    cat > "$ROOT/DEBIAN/$script" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
SCRIPT
    chmod 0755 "$ROOT/DEBIAN/$script"
done

dpkg-deb --root-owner-group -Zgzip --build "$ROOT" "$OUT/$NAME.deb" >/dev/null
echo "$OUT/$NAME.deb"
