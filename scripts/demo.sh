#!/usr/bin/env bash
# Quick start: format (or reuse) a pool whose PM tier lives in /dev/shm and whose
# SSD tier is a sparse file in a local folder, mount it in that folder, write a
# few files (a fsync'd log, a large file, a directory pinned to the SSD tier),
# move the large file down by hand, show where the data is and print
# `terrace status`.
#
# Usage: scripts/demo.sh TERRACE_BIN POOL SIZE MOUNTPOINT SSD_FILE SSD_SIZE
# Re-running is safe: a live mount is unmounted first and an existing pool is reused.
set -euo pipefail

terrace=$1 pool=$2 size=$3 mnt=$4 ssd=$5 ssd_size=$6
rel_mnt=$(realpath -m --relative-to="$PWD" "$mnt" 2>/dev/null || echo "$mnt")
case $rel_mnt in /*) ;; *) rel_mnt=./$rel_mnt ;; esac

is_mounted() { awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/self/mounts; }

if is_mounted "$mnt"; then
    echo "demo: $rel_mnt is mounted; unmounting it first"
    "$terrace" umount "$mnt" || umount -l "$mnt"
fi
mkdir -p "$mnt"

if [ -e "$pool" ] && [ -e "$ssd" ]; then
    echo "demo: reusing the pool $pool (SSD tier $ssd)"
else
    echo "demo: formatting $pool ($size PM tier in /dev/shm) with an SSD tier in $ssd ($ssd_size, sparse)"
    rm -f "$ssd"
    "$terrace" mkfs --force --tier "pm:$pool:$size" --tier "ssd:$ssd:$ssd_size"
fi

"$terrace" mount "$pool" "$mnt" --daemon
echo "demo: mounted $pool on $rel_mnt"

# A few files, to show that it is a file system with tiers.
mkdir -p "$mnt/hello" "$mnt/archive"
echo "Hello from Terrace, $(date -u +%FT%TZ)" >"$mnt/hello/greeting.txt"
ln -sf greeting.txt "$mnt/hello/link-to-greeting"
# A log with an fsync after every record: small synchronous writes stay on PM.
python3 - "$mnt/hello/app.log" <<'PY'
import os, sys
with open(sys.argv[1], "ab") as f:
    for i in range(100):
        f.write(b"record %03d\n" % i)
        f.flush()
        os.fsync(f.fileno())
PY
# A rule: everything created in archive/ goes to the SSD tier.
"$terrace" rule "$mnt/archive" ssd
head -c 8M /dev/urandom >"$mnt/archive/old-logs.bin"
head -c 32M /dev/urandom >"$mnt/hello/big.bin"
sync "$mnt/archive/old-logs.bin" "$mnt/hello/big.bin"
# Move the large file down by hand (migration does this by itself when PM fills).
"$terrace" migrate "$mnt" "$mnt/hello/big.bin" 2>/dev/null
ls -la "$mnt/hello" "$mnt/archive"
cat "$mnt/hello/greeting.txt"
echo
for f in hello/app.log hello/big.bin archive/old-logs.bin; do
    printf '%-22s %s\n' "$f" "$("$terrace" where "$mnt/$f" | grep '^total:')"
done
echo

"$terrace" status "$mnt"

cat <<MSG

Terrace is mounted on $rel_mnt (it stays mounted).
Unmount it with:
    target/release/terrace umount $rel_mnt
MSG
