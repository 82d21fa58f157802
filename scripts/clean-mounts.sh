#!/usr/bin/env bash
# Lazily unmount every FUSE mount left behind by the Terrace demo, tests or
# benchmarks (a daemon killed by a test or a crash leaves its mount point dead
# with ENOTCONN until it is unmounted).
#
# Usage: scripts/clean-mounts.sh [EXTRA_DIR...]
# Mounts under /tmp/terrace-test-*, /tmp/terrace-bench-* and the given dirs are handled.
set -euo pipefail

prefixes=(/tmp/terrace-test- /tmp/terrace-bench- "$@")
count=0
# Mount points in /proc/self/mounts escape spaces as \040; printf %b decodes them.
while read -r _ mnt fstype _; do
    case $fstype in fuse|fuse.*|fuseblk) ;; *) continue ;; esac
    mnt=$(printf '%b' "$mnt")
    for p in "${prefixes[@]}"; do
        if [[ $mnt == "$p"* ]]; then
            echo "clean-mounts: umount -l $mnt"
            umount -l "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
            count=$((count + 1))
            break
        fi
    done
done < <(tac /proc/self/mounts)
echo "clean-mounts: $count mount(s) removed"
