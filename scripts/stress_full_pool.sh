#!/usr/bin/env bash
# fsstress until a small tiered pool is full on every tier, with migration,
# `terrace migrate`, scrub and kill -9 beside it, then `rm -rf` of everything:
# the run that found the symlink, compaction and rescue faults of
# docs/design.md §5f rule 6 (before them, the first `rm -rf` refused 2,500
# names or more with ENOSPC).
#
# Fails when fsstress or `terrace status` reports a bug, when fsck (with
# --data) finds a problem after any round, or when the `rm -rf` refuses any
# name. Every mount it makes is unmounted when it exits, whatever happens.
#
# Usage: scripts/stress_full_pool.sh [ROUNDS]   (default 6; about 35 s a round)
# Environment: TERRACE (the binary; default target/release/terrace),
# FSSTRESS (default: the xfstests build that `make xfstests-short` makes),
# STRESS_DIR (work directory; default a new one under /tmp), STRESS_OPTIONS
# (mount options added to the run's own, e.g. discard_interval_ns=100ms).
set -euo pipefail

rounds=${1:-6}
repo=$(cd "$(dirname "$0")/.." && pwd)
T=${TERRACE:-$repo/target/release/terrace}
FSSTRESS=${FSSTRESS:-/var/tmp/terrace-xfstests/xfstests/ltp/fsstress}
dir=${STRESS_DIR:-$(mktemp -d /tmp/terrace-test-stress.XXXXXX)}
pm=/dev/shm/$(basename "$dir").pm
mnt=$dir/mnt

die() { echo "stress_full_pool: $*" >&2; exit 1; }
[ -x "$T" ] || die "no terrace binary at $T (run make build)"
[ -x "$FSSTRESS" ] || die "no fsstress at $FSSTRESS (make xfstests-short builds it; or set FSSTRESS)"

cleanup() {
    if mountpoint -q "$mnt" 2>/dev/null; then
        "$T" umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
    fi
    pkill -9 -f "terrace mount $pm " 2>/dev/null || true
    rm -rf "$dir" "$pm"
}
trap cleanup EXIT

mkdir -p "$mnt"
"$T" mkfs --tier "pm:$pm:32M" --tier "ssd:$dir/ssd.img:768M" --force >/dev/null
opts=migration_threshold=20,migration_age_ns=1s,size_fresh_large_bytes=64K${STRESS_OPTIONS:+,$STRESS_OPTIONS}

check_fsck() {
    "$T" fsck "$pm" --data --quiet >"$dir/fsck.log" 2>&1 ||
        { cat "$dir/fsck.log" >&2; die "fsck found problems after $1"; }
}

for round in $(seq 1 "$rounds"); do
    "$T" mount "$pm" "$mnt" --daemon -o "$opts" >/dev/null
    mkdir -p "$mnt/s$round"
    seed=$RANDOM
    timeout 60 "$FSSTRESS" -d "$mnt/s$round" -n 4000 -p 3 -s "$seed" >"$dir/fsstress.$round.log" 2>&1 &
    fp=$!
    for _ in 1 2 3; do
        sleep 4
        "$T" migrate "$mnt" --to ssd --quiet >/dev/null 2>&1 || true
        sleep 2
        "$T" migrate "$mnt" --to pm --quiet "$mnt/s$round" >/dev/null 2>&1 || true
        "$T" scrub "$mnt" --quiet >/dev/null 2>&1 || die "round $round: scrub failed"
    done
    if [ $((round % 2)) = 0 ]; then
        sleep 2
        pkill -9 -f "terrace mount $pm " || true
        wait "$fp" || true
        umount -l "$mnt" 2>/dev/null || true
        "$T" umount "$mnt" >/dev/null 2>&1 || true
        what="killed"
    else
        wait "$fp" || true
        ! "$T" status "$mnt" | grep -E 'BUG|damaged [1-9]' || die "round $round: status reports damage"
        "$T" umount "$mnt" >/dev/null
        what="unmounted"
    fi
    ! grep -E 'BUG|[Pp]anic' "$dir/fsstress.$round.log" || die "round $round: fsstress reports a bug"
    check_fsck "round $round"
    echo "round $round (fsstress seed $seed): $what, fsck clean"
done

"$T" mount "$pm" "$mnt" --daemon >/dev/null
df -h "$mnt" | tail -1
refused=0
rm -rf "${mnt:?}"/* 2>"$dir/rm.err" || refused=$(grep -c "cannot remove" "$dir/rm.err" || true)
echo "rm -rf: $refused names refused"
[ "$refused" = 0 ] || { head -3 "$dir/rm.err" >&2; die "rm -rf of the full pool refused $refused names"; }
"$T" umount "$mnt" >/dev/null
check_fsck "rm -rf"
echo "stress_full_pool: passed ($rounds rounds)"
