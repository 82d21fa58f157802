#!/usr/bin/env bash
# Terrace benchmark: the same fio jobs and metadata job, in the same run, on
#   terrace  a Terrace mount (PM tier in /dev/shm)
#   fuse     the minimal FUSE passthrough example over /dev/shm (the FUSE ceiling)
#   shm      a directory on /dev/shm (tmpfs)
#   ext4     a directory on the disk (/var/tmp, ext4)
# then bench/report.py writes docs/results/<date>-<hostname>[-quick]/ (raw JSON,
# CSV, machine description) and the results section of docs/benchmarks.md.
#
# Usage: bench/run.sh [quick|full]          (default: quick)
#   quick  short runs, 1 repetition, 20,000 files in the metadata job (< 10 minutes)
#   full   longer runs, 3 repetitions (medians reported), 100,000 files
# Environment knobs:
#   BENCH_TARGETS="terrace fuse shm ext4"   systems to measure
#   BENCH_JOBS="randwrite-fsync-1j randwrite-fsync-2j randread seqwrite seqread metadata"
#   BENCH_EXT4_DIR=/var/tmp                 where the on-disk directory goes
#   BENCH_OUT=DIR                           results directory (default docs/results/...)
#   BENCH_DOCS=docs/benchmarks.md           file whose results section is rewritten ("" = none)
#   BENCH_TERRACE_OPTS="-o ..."             extra options for `terrace mount`
#   BENCH_RUNTIME, BENCH_REPS, BENCH_SIZE, BENCH_SEQ_SIZE, BENCH_META_FILES override the mode
# Needs root (mounts), fio, and `make build` (target/release/terrace and the
# passthrough example). Everything is unmounted and removed at exit, even on failure.
set -euo pipefail

MODE=${1:-quick}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$REPO/bench
TERRACE=$REPO/target/release/terrace
PASSTHROUGH=$REPO/target/release/examples/passthrough

case $MODE in
quick)
    : "${BENCH_RUNTIME:=5}" "${BENCH_RAMP:=1}" "${BENCH_REPS:=1}" "${BENCH_SIZE:=64M}"
    : "${BENCH_SEQ_SIZE:=512M}" "${BENCH_META_FILES:=20000}" "${BENCH_POOL_SIZE:=2G}"
    ;;
full)
    : "${BENCH_RUNTIME:=20}" "${BENCH_RAMP:=2}" "${BENCH_REPS:=3}" "${BENCH_SIZE:=256M}"
    : "${BENCH_SEQ_SIZE:=1G}" "${BENCH_META_FILES:=100000}" "${BENCH_POOL_SIZE:=4G}"
    ;;
*)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
: "${BENCH_DIRECT:=1}"
: "${BENCH_TARGETS:=terrace fuse shm ext4}"
: "${BENCH_JOBS:=randwrite-fsync-1j randwrite-fsync-2j randread seqwrite seqread metadata}"
: "${BENCH_EXT4_DIR:=/var/tmp}"
: "${BENCH_DOCS=$REPO/docs/benchmarks.md}"
: "${BENCH_TERRACE_OPTS:=}"
export BENCH_RUNTIME BENCH_RAMP BENCH_SIZE BENCH_SEQ_SIZE BENCH_DIRECT

STAMP=$(date -u +%Y-%m-%d)
HOST=$(hostname -s 2>/dev/null || hostname)
SUFFIX=$([ "$MODE" = quick ] && echo -quick || true)
OUT=${BENCH_OUT:-$REPO/docs/results/$STAMP-$HOST$SUFFIX}
RAW=$OUT/raw

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/self/mounts; }
wait_mounted() { # MOUNTPOINT SECONDS [PID]
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        is_mounted "$1" && return 0
        if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then return 1; fi
        sleep 0.1
    done
    return 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (the benchmark mounts file systems)"
command -v fio >/dev/null || die "fio is missing: run scripts/setup.sh"

# ------------------------------------------------------------------ teardown
WORK_ROOT=$(mktemp -d /tmp/terrace-bench-XXXXXX)
POOL=/dev/shm/terrace-bench-$$.pm
SHM_DIR=/dev/shm/terrace-bench-$$-shm
FUSE_SRC=/dev/shm/terrace-bench-$$-fuse-src
EXT4_DIR=$BENCH_EXT4_DIR/terrace-bench-$$
TERRACE_MNT=$WORK_ROOT/terrace
FUSE_MNT=$WORK_ROOT/fuse
PASS_PID=
CHILD=

# Run a measurement in the background and wait for it, so that INT/TERM reach
# the trap at once instead of after the running fio job.
fg_wait() {
    "$@" &
    CHILD=$!
    local rc=0
    wait "$CHILD" || rc=$?
    CHILD=
    return $rc
}

cleanup() {
    local status=$?
    set +e
    if [ -n "$CHILD" ]; then
        kill -TERM "$CHILD" 2>/dev/null
        wait "$CHILD" 2>/dev/null
    fi
    if is_mounted "$TERRACE_MNT"; then
        log "unmounting Terrace"
        timeout 120 "$TERRACE" umount "$TERRACE_MNT" || umount -l "$TERRACE_MNT"
    fi
    if is_mounted "$FUSE_MNT"; then
        fusermount3 -u "$FUSE_MNT" 2>/dev/null || umount -l "$FUSE_MNT"
    fi
    if [ -n "$PASS_PID" ]; then
        kill "$PASS_PID" 2>/dev/null
        wait "$PASS_PID" 2>/dev/null
    fi
    rm -rf "$SHM_DIR" "$FUSE_SRC" "$EXT4_DIR"
    rm -f "$POOL"
    rmdir "$TERRACE_MNT" "$FUSE_MNT" 2>/dev/null
    rm -rf "$WORK_ROOT"
    [ $status -eq 0 ] || log "failed (exit $status); everything was unmounted and removed"
    exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --------------------------------------------------------------------- setup
mkdir -p "$RAW"
rm -f "$RAW"/*.json "$RAW"/*.err "$OUT/failures.txt"
declare -A DIR=()
targets=()
for t in $BENCH_TARGETS; do
    case $t in
    terrace)
        [ -x "$TERRACE" ] || { log "skipping terrace: $TERRACE not built (make build)"; continue; }
        mkdir -p "$TERRACE_MNT"
        log "terrace: mkfs pm:$POOL:$BENCH_POOL_SIZE and mount on $TERRACE_MNT"
        "$TERRACE" mkfs --tier "pm:$POOL:$BENCH_POOL_SIZE" >/dev/null
        # shellcheck disable=SC2086  # options are words
        "$TERRACE" mount "$POOL" "$TERRACE_MNT" --daemon $BENCH_TERRACE_OPTS
        wait_mounted "$TERRACE_MNT" 10 || die "Terrace did not mount"
        DIR[terrace]=$TERRACE_MNT
        ;;
    fuse)
        [ -x "$PASSTHROUGH" ] || { log "skipping fuse: $PASSTHROUGH not built (make build)"; continue; }
        mkdir -p "$FUSE_SRC" "$FUSE_MNT"
        "$PASSTHROUGH" "$FUSE_SRC" "$FUSE_MNT" >"$WORK_ROOT/passthrough.log" 2>&1 &
        PASS_PID=$!
        if ! wait_mounted "$FUSE_MNT" 10 "$PASS_PID"; then
            log "skipping fuse: the passthrough example did not mount: $(tail -3 "$WORK_ROOT/passthrough.log")"
            continue
        fi
        DIR[fuse]=$FUSE_MNT
        ;;
    shm)
        mkdir -p "$SHM_DIR"
        DIR[shm]=$SHM_DIR
        ;;
    ext4)
        mkdir -p "$EXT4_DIR"
        fstype=$(findmnt -no FSTYPE -T "$EXT4_DIR" || echo unknown)
        [ "$fstype" = ext4 ] || log "warning: $EXT4_DIR is on $fstype, not ext4"
        DIR[ext4]=$EXT4_DIR
        ;;
    *) die "unknown target $t (terrace, fuse, shm, ext4)" ;;
    esac
    targets+=("$t")
done
[ ${#targets[@]} -gt 0 ] || die "no target to measure"

python3 "$BENCH/report.py" machine "$OUT" \
    --mode "$MODE" --targets "${targets[*]}" --jobs "$BENCH_JOBS" \
    --setting runtime_s="$BENCH_RUNTIME" ramp_s="$BENCH_RAMP" reps="$BENCH_REPS" \
    rand_file_size="$BENCH_SIZE" seq_file_size="$BENCH_SEQ_SIZE" direct="$BENCH_DIRECT" \
    metadata_files="$BENCH_META_FILES" terrace_pool="pm:/dev/shm:$BENCH_POOL_SIZE" \
    terrace_mount_opts="$BENCH_TERRACE_OPTS" \
    ext4_dir="$BENCH_EXT4_DIR ($(findmnt -no FSTYPE -T "$BENCH_EXT4_DIR" 2>/dev/null || echo ?))"

# ---------------------------------------------------------------------- jobs
fio_timeout=$((BENCH_RUNTIME * 3 + 900))

# run_job TARGET JOB REP: one measurement; a failure is recorded, not fatal.
run_job() {
    local target=$1 job=$2 rep=$3
    local work=${DIR[$target]}/bench-work
    local out=$RAW/${target}__${job}__r${rep}.json
    local err=$RAW/${target}__${job}__r${rep}.err
    local ok=1
    mkdir -p "$work"
    case $job in
    metadata)
        fg_wait timeout "$fio_timeout" python3 "$BENCH/metadata.py" "$work" "$BENCH_META_FILES" \
            --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    randwrite-fsync-*j)
        local n=${job#randwrite-fsync-}
        fg_wait env BENCH_DIR="$work" BENCH_NUMJOBS="${n%j}" timeout "$fio_timeout" \
            fio --output-format=json --output="$out" "$BENCH/fio/randwrite-fsync.fio" 2>"$err" || ok=0
        ;;
    randread | seqwrite | seqread)
        fg_wait env BENCH_DIR="$work" BENCH_NUMJOBS=1 timeout "$fio_timeout" \
            fio --output-format=json --output="$out" "$BENCH/fio/$job.fio" 2>"$err" || ok=0
        ;;
    *) die "unknown job $job" ;;
    esac
    rm -rf "$work"
    sync
    if [ $ok -eq 1 ]; then
        [ -s "$err" ] || rm -f "$err"
        log "$target $job run $rep: done"
    else
        rm -f "$out"
        echo "$target $job $rep $(tail -c 300 "$err" | tr '\n' ' ')" >>"$OUT/failures.txt"
        log "$target $job run $rep: FAILED ($(tail -c 200 "$err" | tr '\n' ' '))"
    fi
}

log "mode $MODE: targets ${targets[*]}; $BENCH_REPS repetition(s); results in $OUT"
start=$SECONDS
for ((rep = 1; rep <= BENCH_REPS; rep++)); do
    for job in $BENCH_JOBS; do
        for t in "${targets[@]}"; do
            # A dead mount (daemon crashed during a job) fails every later job: stop early.
            if ! stat "${DIR[$t]}" >/dev/null 2>&1; then
                echo "$t $job $rep mount is dead (ENOTCONN)" >>"$OUT/failures.txt"
                log "$t: mount is dead, skipping $job"
                continue
            fi
            run_job "$t" "$job" "$rep"
        done
    done
done
log "measurements took $((SECONDS - start)) s"

if [ -n "${DIR[terrace]:-}" ]; then
    "$TERRACE" status "$TERRACE_MNT" --json >"$OUT/terrace-status.json" 2>/dev/null || true
    log "unmounting Terrace (clean shutdown)"
    timeout 120 "$TERRACE" umount "$TERRACE_MNT" || log "warning: terrace umount failed"
    "$TERRACE" fsck "$POOL" >"$OUT/terrace-fsck.txt" 2>&1 || log "warning: fsck of the benchmark pool is not clean"
fi

python3 "$BENCH/report.py" report "$OUT" ${BENCH_DOCS:+--docs "$BENCH_DOCS"}
log "done: $OUT"
