# shellcheck shell=bash
# Systems under test: set up and torn down by bench/run.sh (sourced there).
#
# A system spec is NAME[@KEY=VALUE...]; the @ settings are applied with
# `terrace set` after mounting (Terrace only), e.g. terrace-pm5@sync_threshold_bytes=64K.
#
#   terrace        Terrace, PM tier only (file on /dev/shm, BENCH_POOL_SIZE); the micro jobs' target
#   terrace-pmN    Terrace with a PM tier of N% of the data set (BENCH_DATASET; at least 4 MiB;
#                  plus 256 B per inode slot and 8 MiB for logs) on /dev/shm plus
#                  an SSD tier on its own loop device over a file on the disk (direct-io on)
#   fuse           minimal FUSE passthrough example over a /dev/shm directory (the FUSE ceiling)
#   shm            PM only: a directory on /dev/shm (tmpfs), the upper bound (NOVA's role in the paper)
#   ext4           a directory on the disk's own file system (BENCH_EXT4_DIR, no loop device)
#   ext4-loop      ext4 on a loop device over a file on the disk (direct-io on): the slow device alone
#   ext4-dj        ext4 data=journal, external journal on a loop device over a /dev/shm file
#   xfs-ml         XFS with its log on a loop device over a /dev/shm file
#   mergerfs-pmN   mergerfs over a tmpfs branch of N% of the data set and an ext4-loop branch
#                  (create policy ff: fill the fast branch first; moveonenospc: move a file
#                  to the disk branch when the fast one is full; cache.files=partial: the
#                  page cache is used, as mmap (SQLite WAL's -shm file) needs it)
#
# sys_setup SPEC sets SYS_DIR (where the workload runs), SYS_DEVS (ROLE=/dev/loopN words:
# "disk" is the slow device, "journal" the fast journal/log device), SYS_TMNT (the
# Terrace mount point, if any) and pushes every resource on the cleanup stack;
# sys_teardown undoes everything in reverse order. Return codes of sys_setup:
# 0 ready, 2 skipped (missing tool or setting; SYS_SKIP says why), other: failed.

CLEAN=()
push_clean() { CLEAN+=("$*"); }
run_clean() {
    local i
    for ((i = ${#CLEAN[@]} - 1; i >= 0; i--)); do
        eval "${CLEAN[$i]}" || log "warning: cleanup step failed: ${CLEAN[$i]}"
    done
    CLEAN=()
}

# to_bytes 64M -> 67108864 (K, M, G, T binary units; plain numbers are bytes)
to_bytes() {
    local v=$1 n u
    n=${v%[KkMmGgTt]}
    u=${v#"$n"}
    case $u in
    K | k) echo $((n << 10)) ;;
    M | m) echo $((n << 20)) ;;
    G | g) echo $((n << 30)) ;;
    T | t) echo $((n << 40)) ;;
    *) echo "$n" ;;
    esac
}

# loop_new NAME SIZE disk|shm: a loop device over a new file; REPLY=/dev/loopN.
loop_new() {
    local name=$1 size=$2 where=$3 file dio=off
    if [ "$where" = disk ]; then
        file=$BENCH_DISK_DIR/terrace-bench-$$-$name.img
        dio=on
    else
        file=/dev/shm/terrace-bench-$$-$name.img
    fi
    rm -f "$file"
    push_clean "rm -f '$file'"
    truncate -s "$size" "$file"
    # Allocate the disk file now, so that the file system under test does not pay
    # for the host file system's block allocation during the measurement.
    [ "$where" = disk ] && { fallocate -l "$size" "$file" 2>/dev/null || true; }
    REPLY=$(losetup --direct-io="$dio" -f --show "$file")
    push_clean "losetup -d '$REPLY'"
}

umount_path() { # MOUNTPOINT
    is_mounted "$1" || return 0
    umount "$1" 2>/dev/null || { sleep 1; umount "$1" 2>/dev/null; } || umount -l "$1"
}

terrace_down() { # MOUNTPOINT POOL NAME
    if is_mounted "$1"; then
        timeout 120 "$TERRACE" umount "$1" >/dev/null || { log "warning: terrace umount failed; lazy unmount"; umount -l "$1"; }
    fi
    if [ -e "$2" ] && ! "$TERRACE" fsck "$2" >>"$OUT/terrace-fsck.txt" 2>&1; then
        log "warning: fsck of the $3 pool is not clean (see terrace-fsck.txt)"
        echo "$3 fsck not clean after a run" >>"$OUT/failures.txt"
    fi
}

has_cmd() { command -v "$1" >/dev/null 2>&1 || [ -x "/sbin/$1" ] || [ -x "/usr/sbin/$1" ]; }

# The data-set size a pmN / mergerfs-pmN fraction refers to, in bytes.
frac_bytes() { # PERCENT
    local b=$(($(to_bytes "$BENCH_DATASET") * $1 / 100))
    b=$(((b + (1 << 20) - 1) >> 20 << 20))
    [ "$b" -ge $((4 << 20)) ] || b=$((4 << 20))
    echo "$b"
}

mkfs_ext4_disk() { # DEV [extra mkfs args]: ext4 with eager init (no lazy background writes)
    local dev=$1
    shift
    mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$@" "$dev" >/dev/null
}

sys_setup() {
    local spec=$1 base settings mnt
    base=${spec%%@*}
    settings=
    [ "$base" = "$spec" ] || settings=${spec#*@}
    SYS_DIR= SYS_DEVS= SYS_TMNT= SYS_SKIP=
    mnt=$WORK_ROOT/mnt-$base
    case $base in
    terrace | terrace-pm[0-9]*)
        [ -x "$TERRACE" ] || { SYS_SKIP="$TERRACE not built (make build)"; return 2; }
        local pool=/dev/shm/terrace-bench-$$-$base.pm tiers
        if [ "$base" = terrace ]; then
            tiers=(--tier "pm:$pool:$BENCH_POOL_SIZE")
        else
            local pct=${base#terrace-pm} pm
            pm=$(($(frac_bytes "$pct") + BENCH_TERRACE_INODES * 256 + (8 << 20)))
            loop_new "$base-ssd" "$BENCH_DISK_SIZE" disk
            SYS_DEVS="disk=$REPLY"
            tiers=(--tier "pm:$pool:$((pm >> 20))M" --tier "ssd:$REPLY" --inodes "$BENCH_TERRACE_INODES")
        fi
        push_clean "rm -f '$pool'"
        mkdir -p "$mnt"
        {
            echo "## $spec: terrace mkfs ${tiers[*]}"
            "$TERRACE" mkfs --force "${tiers[@]}"
        } >>"$OUT/terrace-mkfs.txt" 2>&1 || return 1
        push_clean "terrace_down '$mnt' '$pool' '$spec'"
        # shellcheck disable=SC2086  # options are words
        "$TERRACE" mount "$pool" "$mnt" --daemon $BENCH_TERRACE_OPTS >/dev/null || return 1
        wait_mounted "$mnt" 10 || return 1
        SYS_TMNT=$mnt
        if [ -n "$settings" ]; then
            local kv key val
            IFS=@ read -ra kvs <<<"$settings"
            for kv in "${kvs[@]}"; do
                key=${kv%%=*} val=${kv#*=}
                if ! "$TERRACE" set "$mnt" "$key" >/dev/null 2>&1; then
                    SYS_SKIP="this Terrace build has no setting $key"
                    return 2
                fi
                "$TERRACE" set "$mnt" "$key" "$val" >/dev/null || return 1
            done
        fi
        ;;
    fuse)
        [ -x "$PASSTHROUGH" ] || { SYS_SKIP="$PASSTHROUGH not built (make build)"; return 2; }
        local src=/dev/shm/terrace-bench-$$-fuse-src
        mkdir -p "$src" "$mnt"
        push_clean "rm -rf '$src'"
        "$PASSTHROUGH" "$src" "$mnt" >"$WORK_ROOT/passthrough.log" 2>&1 &
        local pid=$!
        push_clean "kill $pid 2>/dev/null; wait $pid 2>/dev/null"
        push_clean "is_mounted '$mnt' && { fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; }"
        wait_mounted "$mnt" 10 "$pid" || { SYS_SKIP="the passthrough example did not mount: $(tail -3 "$WORK_ROOT/passthrough.log")"; return 2; }
        ;;
    shm)
        mnt=/dev/shm/terrace-bench-$$-shm
        mkdir -p "$mnt"
        push_clean "rm -rf '$mnt'"
        ;;
    ext4)
        mnt=$BENCH_EXT4_DIR/terrace-bench-$$
        mkdir -p "$mnt"
        push_clean "rm -rf '$mnt'"
        ;;
    ext4-loop)
        loop_new "$base-disk" "$BENCH_DISK_SIZE" disk
        SYS_DEVS="disk=$REPLY"
        mkfs_ext4_disk "$REPLY" || return 1
        mkdir -p "$mnt"
        mount "$REPLY" "$mnt" || return 1
        push_clean "umount_path '$mnt'"
        ;;
    ext4-dj)
        local disk journal
        loop_new "$base-disk" "$BENCH_DISK_SIZE" disk
        disk=$REPLY
        loop_new "$base-journal" "$BENCH_JOURNAL_SIZE" shm
        journal=$REPLY
        SYS_DEVS="disk=$disk journal=$journal"
        mke2fs -q -F -O journal_dev -b 4096 "$journal" >/dev/null || return 1
        mkfs_ext4_disk "$disk" -J "device=$journal" || return 1
        mkdir -p "$mnt"
        mount -o "data=journal,journal_path=$journal" "$disk" "$mnt" || return 1
        push_clean "umount_path '$mnt'"
        ;;
    xfs-ml)
        has_cmd mkfs.xfs || { SYS_SKIP="mkfs.xfs missing (xfsprogs; run bench/setup.sh)"; return 2; }
        local disk journal
        loop_new "$base-disk" "$BENCH_DISK_SIZE" disk
        disk=$REPLY
        loop_new "$base-log" "$BENCH_JOURNAL_SIZE" shm
        journal=$REPLY
        SYS_DEVS="disk=$disk journal=$journal"
        mkfs.xfs -q -f -l "logdev=$journal" "$disk" >/dev/null || return 1
        mkdir -p "$mnt"
        mount -o "logdev=$journal" "$disk" "$mnt" || return 1
        push_clean "umount_path '$mnt'"
        ;;
    mergerfs-pm[0-9]*)
        has_cmd mergerfs || { SYS_SKIP="mergerfs missing (run bench/setup.sh)"; return 2; }
        local pct=${base#mergerfs-pm} fast=$WORK_ROOT/$base-fast slow=$WORK_ROOT/$base-slow
        loop_new "$base-disk" "$BENCH_DISK_SIZE" disk
        SYS_DEVS="disk=$REPLY"
        mkfs_ext4_disk "$REPLY" || return 1
        mkdir -p "$fast" "$slow" "$mnt"
        mount "$REPLY" "$slow" || return 1
        push_clean "umount_path '$slow'"
        mount -t tmpfs -o "size=$(frac_bytes "$pct")" "terrace-bench-$base" "$fast" || return 1
        push_clean "umount_path '$fast'"
        mergerfs -o "cache.files=partial,category.create=ff,minfreespace=1M,moveonenospc=true,dropcacheonclose=false,fsname=$base" \
            "$fast:$slow" "$mnt" || return 1
        push_clean "is_mounted '$mnt' && { fusermount3 -u '$mnt' 2>/dev/null || umount -l '$mnt'; }"
        wait_mounted "$mnt" 10 || return 1
        ;;
    *)
        die "unknown system $base (terrace, terrace-pmN, fuse, shm, ext4, ext4-loop, ext4-dj, xfs-ml, mergerfs-pmN)"
        ;;
    esac
    if [ -n "$settings" ] && [ -z "$SYS_TMNT" ]; then
        SYS_SKIP="settings (@$settings) apply to Terrace only"
        return 2
    fi
    SYS_DIR=$mnt
    return 0
}

sys_teardown() {
    run_clean
    SYS_DIR= SYS_DEVS= SYS_TMNT=
}
