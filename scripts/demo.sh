#!/usr/bin/env bash
# Quick start: format (or reuse) a pool whose PM tier lives in /dev/shm, mount it
# in a local folder, write a few files and print `terrace status`.
#
# Usage: scripts/demo.sh TERRACE_BIN POOL SIZE MOUNTPOINT
# Re-running is safe: a live mount is unmounted first and an existing pool is reused.
set -euo pipefail

terrace=$1 pool=$2 size=$3 mnt=$4
rel_mnt=$(realpath -m --relative-to="$PWD" "$mnt" 2>/dev/null || echo "$mnt")
case $rel_mnt in /*) ;; *) rel_mnt=./$rel_mnt ;; esac

is_mounted() { awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/self/mounts; }

if is_mounted "$mnt"; then
    echo "demo: $rel_mnt is mounted; unmounting it first"
    "$terrace" umount "$mnt" || umount -l "$mnt"
fi
mkdir -p "$mnt"

if [ -e "$pool" ]; then
    echo "demo: reusing the pool $pool"
else
    echo "demo: formatting $pool ($size, PM tier in /dev/shm)"
    "$terrace" mkfs --tier "pm:$pool:$size"
fi

"$terrace" mount "$pool" "$mnt" --daemon
echo "demo: mounted $pool on $rel_mnt"

# A few files, to show that it is a file system.
mkdir -p "$mnt/hello"
echo "Hello from Terrace, $(date -u +%FT%TZ)" >"$mnt/hello/greeting.txt"
head -c 4M /dev/urandom >"$mnt/hello/random.bin"
ln -sf greeting.txt "$mnt/hello/link-to-greeting"
sync "$mnt/hello/random.bin"
ls -la "$mnt/hello"
cat "$mnt/hello/greeting.txt"
echo

"$terrace" status "$mnt"

cat <<MSG

Terrace is mounted on $rel_mnt (it stays mounted).
Unmount it with:
    target/release/terrace umount $rel_mnt
MSG
