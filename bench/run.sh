#!/usr/bin/env bash
# Terrace benchmark: one entry point for every experiment.
#
# Two sets of measurements, in the same run, every one on a freshly set-up system
# (bench/systems.sh: loop devices, mkfs, mount; everything undone afterwards):
#
#  micro  fio and metadata jobs (bench/fio/{randwrite-fsync,randread,seqwrite,seqread}.fio,
#         bench/metadata.py) on BENCH_TARGETS: Terrace (PM only), the FUSE ceiling,
#         /dev/shm, a directory on the disk. Its table goes to docs/benchmarks.md.
#  paper  the Ziggurat paper's experiments (§6), scaled to BENCH_DATASET, on
#         BENCH_SYSTEMS: ext4 on a loop device (disk), EXT4-DJ, XFS-ML, PM only
#         (/dev/shm), mergerfs, Terrace with PM at N% of the data set. Workloads
#         (BENCH_WORKLOADS):
#           zipf        4 KiB random reads and O_SYNC writes, Zipf locality (Table 3),
#                       private file per job, files initialised with 2 MiB writes
#                       (bench/fio/zipf-init.fio, bench/fio/zipf-rand.fio)
#           fileserver, webproxy, varmail   Table 4 (bench/workloads.py)
#           sqlite-delete, sqlite-persist, sqlite-wal   (bench/sqlite_bench.py)
#           rocksdb     db_bench readseq, fillseq, fillrandom with sync WAL (bench/kv.py)
#         and parameter sweeps of Terrace settings (BENCH_SWEEPS, §6.7) on
#         BENCH_SWEEP_SYSTEM with BENCH_SWEEP_WORKLOADS.
#  targets the performance targets of the placement and migration issues (bench/targets.py),
#         as SYSTEM:GROUP pairs (BENCH_PAIRS) with PM at 10% of BENCH_DATASET
#         (bench/tiering.py):
#           syncappend  4 KiB appends + fsync to 1,000 files (varmail-like), Terrace vs ext4
#           seqbig      1 MiB sequential asynchronous writes of 4x PM size, then fsync
#           overwrite   random 4 KiB asynchronous overwrites of a file 4x PM size
#                       (with each migration policy: SSD write traffic)
#           overwrite-hot  the same file, overwrites only in its first 3/4 of PM size
#                       (NVMFS paper Fig. 8, "modified IOZONE": a hot region that fits)
#           zipf        90/10 synchronous random writes, PM at 10% vs 100% of the data
#           migrate     `terrace migrate` of data written in 64 KiB writes: group migration
#                       bandwidth against the raw device's sequential write bandwidth (probe),
#                       for group sizes 64 KiB .. 64 MiB (paper Fig. 10)
#         Run alone with `bench/run.sh targets`; `full` runs them too.
# Every measurement records the block-layer traffic of the system's loop devices
# (bench/devstat.py) and, for Terrace, the per-tier counters of `terrace status`.
# A short fio probe of the raw devices describes the machine (BENCH_PROBE=0: off).
# Then bench/report.py writes docs/results/<date>-<host>[-quick]/ (raw JSON, CSV,
# report.md, PNG plots) and the results sections of docs/benchmarks.md and
# docs/results/README.md.
#
# Usage: bench/run.sh [quick|full|targets]  (default: quick)
#   quick    short runs, 1 repetition, small data set, a subset of every workload type (< 10 minutes)
#   full     3 repetitions (medians and min/max), every workload, locality and system, the
#            sweeps and the targets (about two hours)
#   targets  only the targets, 3 repetitions (about 30 minutes)
# Environment knobs (defaults depend on the mode; see the case below):
#   BENCH_TARGETS="terrace fuse shm ext4"     systems of the micro jobs
#   BENCH_JOBS="randwrite-fsync-1j ..."       micro jobs ("" = none)
#   BENCH_SYSTEMS="ext4-loop ext4-dj ..."     systems of the paper workloads
#   BENCH_WORKLOADS="zipf fileserver ..."     paper workloads ("" = none)
#   BENCH_ZIPF_THETAS="1.04 0.88 0.71 0.44 0" BENCH_ZIPF_JOBS=2 (fio jobs, one file each)
#   BENCH_DATASET=1G                          data set of each paper workload; pmN = N% of it
#   BENCH_DISK_SIZE, BENCH_JOURNAL_SIZE       loop device sizes (disk file in BENCH_DISK_DIR, journal in /dev/shm)
#   BENCH_SWEEPS="sync_threshold_bytes=4K,1M size_counter_threshold=1,4"  ("" = none); a sweep runs
#                                             BENCH_SWEEP_SYSTEM@KEY=VALUE for each value (`terrace set`
#                                             after mount; a key this build lacks is skipped with a message),
#                                             e.g. migration_policy=default,ziggurat,nvmfs for each migration policy
#   BENCH_SWEEP_SYSTEM=terrace-pm5  BENCH_SWEEP_WORKLOADS="zipf varmail"  BENCH_SWEEP_THETA=0.88
#   BENCH_KV_OPS                              fillseq/fillrandom operations (sync)
#   BENCH_SQLITE_DIVISOR=1                    the SQLite databases are BENCH_DATASET / this
#   BENCH_PAIRS="ext4-loop:syncappend ..."    SYSTEM:GROUP measurements of the targets ("" = none)
#   BENCH_PAIR_THETA=1.04                     Zipf theta of a zipf pair
#   BENCH_FB_WORKERS=1                        processes of the file-server/web-proxy/mail-server loop
#   BENCH_EXT4_DIR=/var/tmp  BENCH_DISK_DIR=/var/tmp
#   BENCH_OUT=DIR                             results directory (default docs/results/...)
#   BENCH_DOCS=docs/benchmarks.md             file whose micro results section is rewritten ("" = none)
#   BENCH_RESULTS_README=docs/results/README.md   its "latest run" section is rewritten ("" = none)
#   BENCH_TERRACE_OPTS="-o ..."               extra options for `terrace mount`
#   BENCH_TERRACE_BIN=PATH                   the terrace binary under test (default target/release/terrace;
#                                             bench/compare_builds.sh runs two builds this way)
#   BENCH_PYTHON=/usr/bin/python3             interpreter of the Python workloads and the report
#   BENCH_RUNTIME, BENCH_RAMP, BENCH_REPS, BENCH_SIZE, BENCH_SEQ_SIZE, BENCH_META_FILES
# Needs root (mounts, losetup), `make build`, and the tools of bench/setup.sh
# (run first; installs what is missing). Everything is unmounted, detached and
# removed at exit, even on failure or Ctrl-C.
set -euo pipefail

MODE=${1:-quick}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$REPO/bench
TERRACE=${BENCH_TERRACE_BIN:-$REPO/target/release/terrace}
PASSTHROUGH=$REPO/target/release/examples/passthrough

# The measurements behind the targets (bench/targets.py): SYSTEM:GROUP pairs.
TARGET_PAIRS="ext4-loop:syncappend terrace-pm10:syncappend ext4-loop:seqbig terrace-pm10:seqbig ext4-loop:overwrite terrace-pm10:overwrite terrace-pm10@migration_policy=ziggurat:overwrite terrace-pm10@migration_policy=nvmfs:overwrite terrace-pm10@migration_policy=nvmfs@nvmfs_flush_order=lru:overwrite terrace-pm10@migration_policy=ziggurat:overwrite-hot terrace-pm10@migration_policy=nvmfs:overwrite-hot terrace-pm10:overwrite-hot terrace-pm10:zipf terrace-pm100:zipf terrace-pm10@migration_policy=ziggurat:zipf terrace-pm10@migration_policy=nvmfs:zipf terrace-pm10@migration_policy=nvmfs@nvmfs_flush_order=lru:zipf terrace-pm100@group_migration_bytes=64K:migrate terrace-pm100@group_migration_bytes=256K:migrate terrace-pm100@group_migration_bytes=1M:migrate terrace-pm100@group_migration_bytes=4M:migrate terrace-pm100@group_migration_bytes=16M:migrate terrace-pm100@group_migration_bytes=64M:migrate"

case $MODE in
quick)
    : "${BENCH_RUNTIME:=3}" "${BENCH_RAMP:=1}" "${BENCH_REPS:=1}" "${BENCH_SIZE:=64M}"
    : "${BENCH_SEQ_SIZE:=256M}" "${BENCH_META_FILES:=10000}" "${BENCH_POOL_SIZE:=1G}"
    : "${BENCH_JOBS=randwrite-fsync-1j randread metadata}"
    : "${BENCH_SYSTEMS=ext4-loop ext4-dj xfs-ml shm mergerfs-pm25 terrace-pm5 terrace-pm100}"
    : "${BENCH_WORKLOADS=zipf fileserver varmail sqlite-wal rocksdb}"
    : "${BENCH_ZIPF_THETAS:=0.88}"
    : "${BENCH_DATASET:=256M}" "${BENCH_KV_OPS:=1000}"
    : "${BENCH_SWEEPS=sync_threshold_bytes=64K,4M group_migration_bytes=2M}"
    : "${BENCH_SWEEP_WORKLOADS=zipf}"
    : "${BENCH_PROBE_RUNTIME:=2}"
    : "${BENCH_PAIRS=ext4-loop:syncappend terrace-pm10:syncappend terrace-pm100@group_migration_bytes=16M:migrate}"
    ;;
full)
    # Sized to finish in about two hours on 2 cores: 5 s per measurement, 3 repetitions,
    # a 512 MiB data set (the SQLite databases a quarter of it), every system, workload
    # and Zipf locality; the sweeps on two workloads with three values per setting.
    : "${BENCH_RUNTIME:=5}" "${BENCH_RAMP:=1}" "${BENCH_REPS:=3}" "${BENCH_SIZE:=256M}"
    : "${BENCH_SEQ_SIZE:=1G}" "${BENCH_META_FILES:=100000}" "${BENCH_POOL_SIZE:=4G}"
    : "${BENCH_JOBS=randwrite-fsync-1j randwrite-fsync-2j randread seqwrite seqread metadata}"
    : "${BENCH_SYSTEMS=ext4-loop ext4-dj xfs-ml shm mergerfs-pm25 terrace-pm5 terrace-pm25 terrace-pm100}"
    : "${BENCH_WORKLOADS=zipf fileserver webproxy varmail sqlite-delete sqlite-persist sqlite-wal rocksdb}"
    : "${BENCH_ZIPF_THETAS:=1.04 0.88 0.71 0.44 0}"
    : "${BENCH_DATASET:=512M}" "${BENCH_KV_OPS:=10000}" "${BENCH_SQLITE_DIVISOR:=4}"
    : "${BENCH_SWEEPS=sync_threshold_bytes=4K,1M,16M size_counter_threshold=1,4,16 group_migration_bytes=128K,2M,16M migration_policy=default,ziggurat,nvmfs placement_policy=block-first,pm-only,hetfs}"
    : "${BENCH_SWEEP_WORKLOADS=zipf varmail}"
    : "${BENCH_PROBE_RUNTIME:=5}"
    : "${BENCH_PAIRS=$TARGET_PAIRS}"
    ;;
targets)
    : "${BENCH_RUNTIME:=10}" "${BENCH_REPS:=3}" "${BENCH_DATASET:=1G}" "${BENCH_PROBE_RUNTIME:=5}"
    : "${BENCH_JOBS=}" "${BENCH_SYSTEMS=}" "${BENCH_WORKLOADS=}" "${BENCH_SWEEPS=}"
    : "${BENCH_PAIRS=$TARGET_PAIRS}"
    ;;
*)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
: "${BENCH_DIRECT:=1}"
: "${BENCH_TARGETS=terrace fuse shm ext4}"
: "${BENCH_EXT4_DIR:=/var/tmp}"
: "${BENCH_DISK_DIR:=/var/tmp}"
: "${BENCH_DOCS=$REPO/docs/benchmarks.md}"
: "${BENCH_RESULTS_README=$REPO/docs/results/README.md}"
: "${BENCH_TERRACE_OPTS:=}"
: "${BENCH_ZIPF_JOBS:=2}"
: "${BENCH_FB_WORKERS:=1}"
: "${BENCH_SWEEP_SYSTEM:=terrace-pm5}"
: "${BENCH_SWEEP_THETA:=0.88}"
: "${BENCH_TERRACE_INODES:=65536}"
: "${BENCH_PROBE:=1}"
: "${BENCH_PAIRS=}"
: "${BENCH_PAIR_THETA:=1.04}"
: "${BENCH_RAMP:=2}" "${BENCH_SIZE:=256M}" "${BENCH_SEQ_SIZE:=1G}" "${BENCH_META_FILES:=100000}"
: "${BENCH_POOL_SIZE:=4G}" "${BENCH_KV_OPS:=20000}" "${BENCH_ZIPF_THETAS:=0.88}" "${BENCH_SQLITE_DIVISOR:=1}"
: "${BENCH_SWEEP_WORKLOADS=zipf}"
export BENCH_RUNTIME BENCH_RAMP BENCH_SIZE BENCH_SEQ_SIZE BENCH_DIRECT

STAMP=$(date -u +%Y-%m-%d)
HOST=$(hostname -s 2>/dev/null || hostname)
case $MODE in full) SUFFIX= ;; *) SUFFIX=-$MODE ;; esac
OUT=${BENCH_OUT:-$REPO/docs/results/$STAMP-$HOST$SUFFIX}
RAW=$OUT/raw

# Messages go to the original stderr (fd 9), also from a trap that fires while a
# job's stderr is redirected to its .err file.
exec 9>&2
log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&9; }
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

# The system's python3 (Debian's python3-matplotlib is installed for it), unless BENCH_PYTHON says otherwise.
if [ -z "${BENCH_PYTHON:-}" ]; then
    BENCH_PYTHON=python3
    [ -x /usr/bin/python3 ] && BENCH_PYTHON=/usr/bin/python3
fi
export BENCH_PYTHON

[ "$(id -u)" -eq 0 ] || die "run as root (the benchmark mounts file systems and attaches loop devices)"
"$BENCH/setup.sh" || log "warning: bench/setup.sh failed; jobs whose tools are missing are skipped"
command -v fio >/dev/null || die "fio is missing: run bench/setup.sh"

# shellcheck source=bench/systems.sh
. "$BENCH/systems.sh"

# Sizes derived from the data set.
DATASET_BYTES=$(to_bytes "$BENCH_DATASET")
: "${BENCH_DISK_SIZE:=$(((DATASET_BYTES * 3 + (1 << 30)) >> 20))M}"
: "${BENCH_JOURNAL_SIZE:=128M}"
ZIPF_FILE_MB=$((DATASET_BYTES / BENCH_ZIPF_JOBS >> 20))
FB_FILES=$((DATASET_BYTES / (2 << 20)))
# Targets: PM is 10% of the data set; "4x PM size" is 40% of it.
PM10_BYTES=$(frac_bytes 10)
BIG_BYTES=$((PM10_BYTES * 4))
[ "$FB_FILES" -ge 16 ] || FB_FILES=16

# ------------------------------------------------------------------ teardown
WORK_ROOT=$(mktemp -d /tmp/terrace-bench-XXXXXX)
CHILD=

# Run a measurement in the background and wait for it, so that INT/TERM reach
# the trap at once instead of after the running job.
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
    [ ${#CLEAN[@]} -eq 0 ] || log "tearing down"
    run_clean
    rm -rf "$WORK_ROOT"
    [ $status -eq 0 ] || log "failed (exit $status); everything was unmounted, detached and removed"
    exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --------------------------------------------------------------------- setup
rm -rf "$RAW" "$OUT/failures.txt" "$OUT/skipped.txt" "$OUT/terrace-fsck.txt" "$OUT/terrace-mkfs.txt" \
    "$OUT/probe" "$OUT"/*.png
mkdir -p "$RAW"

# Paper groups: a group shares one set-up system and one initialisation.
groups=()
for w in $BENCH_WORKLOADS; do
    case $w in
    zipf | fileserver | webproxy | varmail | sqlite-delete | sqlite-persist | sqlite-wal | rocksdb) groups+=("$w") ;;
    *) die "unknown workload $w" ;;
    esac
done
for pair in $BENCH_PAIRS; do
    case ${pair##*:} in
    syncappend | seqbig | overwrite | overwrite-hot | zipf | migrate) ;;
    *) die "unknown group in BENCH_PAIRS: $pair (syncappend, seqbig, overwrite, overwrite-hot, zipf, migrate)" ;;
    esac
done

"$BENCH_PYTHON" "$BENCH/report.py" machine "$OUT" \
    --mode "$MODE" --targets "$BENCH_TARGETS" --jobs "$BENCH_JOBS" \
    --systems "$BENCH_SYSTEMS" --workloads "$BENCH_WORKLOADS" \
    --setting runtime_s="$BENCH_RUNTIME" ramp_s="$BENCH_RAMP" reps="$BENCH_REPS" \
    rand_file_size="$BENCH_SIZE" seq_file_size="$BENCH_SEQ_SIZE" direct="$BENCH_DIRECT" \
    metadata_files="$BENCH_META_FILES" terrace_pool="pm:/dev/shm:$BENCH_POOL_SIZE" \
    terrace_mount_opts="$BENCH_TERRACE_OPTS" \
    ext4_dir="$BENCH_EXT4_DIR ($(findmnt -no FSTYPE -T "$BENCH_EXT4_DIR" 2>/dev/null || echo ?))" \
    dataset="$BENCH_DATASET" sqlite_db_bytes="$((DATASET_BYTES / BENCH_SQLITE_DIVISOR))" disk_size="$BENCH_DISK_SIZE" journal_size="$BENCH_JOURNAL_SIZE" \
    disk_dir="$BENCH_DISK_DIR ($(findmnt -no FSTYPE -T "$BENCH_DISK_DIR" 2>/dev/null || echo ?))" \
    zipf_thetas="$BENCH_ZIPF_THETAS" zipf_jobs="$BENCH_ZIPF_JOBS" zipf_file_mb="$ZIPF_FILE_MB" \
    fb_files="$FB_FILES" fb_workers="$BENCH_FB_WORKERS" kv_ops="$BENCH_KV_OPS" \
    terrace_inodes="$BENCH_TERRACE_INODES" sweeps="$BENCH_SWEEPS" sweep_system="$BENCH_SWEEP_SYSTEM" \
    sweep_workloads="$BENCH_SWEEP_WORKLOADS" sweep_theta="$BENCH_SWEEP_THETA" \
    pairs="$BENCH_PAIRS" pair_theta="$BENCH_PAIR_THETA" pm10_bytes="$PM10_BYTES" big_bytes="$BIG_BYTES"

# ------------------------------------------------------------- device probe
# Raw speeds of the devices the systems are built on: a loop device over a disk
# file (direct-io on) and one over a /dev/shm file.
probe_devices() {
    local where dev job spec
    mkdir -p "$OUT/probe"
    for where in disk shm; do
        loop_new "probe-$where" 1G "$where"
        dev=$REPLY
        for spec in "randwrite-sync:--rw=randwrite --bs=4k --direct=1 --sync=1" \
            "randread:--rw=randread --bs=4k --direct=1" \
            "seqwrite:--rw=write --bs=1M --direct=1"; do
            job=${spec%%:*}
            # shellcheck disable=SC2086
            fg_wait fio --name="$job" --filename="$dev" --ioengine=psync ${spec#*:} --size=1G \
                --runtime="$BENCH_PROBE_RUNTIME" --time_based=1 --output-format=json \
                --output="$OUT/probe/${where}__${job}.json" >/dev/null 2>&1 ||
                log "warning: probe $where $job failed"
        done
        run_clean
    done
    # Sequential bandwidth of a fresh, preallocated region written once and
    # synced — the state of a Terrace SSD tier (a fresh fallocated file) when
    # migration writes to it. The time-based seqwrite above mostly rewrites
    # blocks it already wrote, which the host file system serves much faster.
    loop_new probe-disk-fresh 1G disk
    dev=$REPLY
    fg_wait fio --name=seqwrite-fresh --filename="$dev" --ioengine=psync --rw=write --bs=1M \
        --direct=1 --size=1G --end_fsync=1 --output-format=json \
        --output="$OUT/probe/disk__seqwrite-fresh.json" >/dev/null 2>&1 ||
        log "warning: probe disk seqwrite-fresh failed"
    run_clean
}
if [ "$BENCH_PROBE" = 1 ]; then
    log "probing raw device speeds (fio, ${BENCH_PROBE_RUNTIME} s per job)"
    probe_devices
fi

# ---------------------------------------------------------------------- jobs
job_timeout=$((BENCH_RUNTIME * 3 + 900))

# record_failure SYSTEM JOB REP ERRFILE
record_failure() {
    echo "$1 $2 $3 $(tail -c 300 "$4" 2>/dev/null | tr '\n' ' ')" >>"$OUT/failures.txt"
    log "$1 $2 run $3: FAILED ($(tail -c 200 "$4" 2>/dev/null | tr '\n' ' '))"
}

# dev_args: devstat.py arguments of the current system
dev_args() {
    local d
    DEV_ARGS=()
    for d in $SYS_DEVS; do DEV_ARGS+=(--dev "$d"); done
    [ -z "$SYS_TMNT" ] || DEV_ARGS+=(--terrace "$SYS_TMNT")
}

# measure SYSTEM JOB REP WORKDIR: one measurement on the set-up system, with the
# device counters around it; a failure is recorded, not fatal.
measure() {
    local sys=$1 job=$2 rep=$3 work=$4
    local base=$RAW/${sys}__${job}__r${rep}
    local out=$base.json err=$base.err ok=1
    if ! stat "$SYS_DIR" >/dev/null 2>&1; then
        echo "$sys $job $rep mount is dead (ENOTCONN)" >>"$OUT/failures.txt"
        log "$sys: mount is dead, skipping $job"
        return 1
    fi
    dev_args
    sync -f "$work" 2>/dev/null || sync
    "$BENCH_PYTHON" "$BENCH/devstat.py" snap "$base.before.json" "${DEV_ARGS[@]}"
    case $job in
    metadata)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/metadata.py" "$work" "$BENCH_META_FILES" \
            --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    randwrite-fsync-*j)
        local n=${job#randwrite-fsync-}
        fg_wait env BENCH_DIR="$work" BENCH_NUMJOBS="${n%j}" timeout "$job_timeout" \
            fio --output-format=json --output="$out" "$BENCH/fio/randwrite-fsync.fio" 2>"$err" || ok=0
        ;;
    randread | seqwrite | seqread)
        fg_wait env BENCH_DIR="$work" BENCH_NUMJOBS=1 timeout "$job_timeout" \
            fio --output-format=json --output="$out" "$BENCH/fio/$job.fio" 2>"$err" || ok=0
        ;;
    zipf-read-* | zipf-write-*)
        local theta=${job##*-} rw=randread sync=0 direct=$BENCH_DIRECT dist
        dist=$(awk -v t="$theta" 'BEGIN { if (t + 0 == 0) print "random"; else print "zipf:" t }')
        [[ $job == zipf-write-* ]] && { rw=randwrite sync=1 direct=0; }
        fg_wait env BENCH_DIR="$work" BENCH_NUMJOBS="$BENCH_ZIPF_JOBS" BENCH_FILE_SIZE="${ZIPF_FILE_MB}M" \
            BENCH_RAMP=0 BENCH_RW=$rw BENCH_DIST="$dist" BENCH_SYNC=$sync BENCH_DIRECT=$direct timeout "$job_timeout" \
            fio --output-format=json --output="$out" "$BENCH/fio/zipf-rand.fio" 2>"$err" || ok=0
        ;;
    fileserver | webproxy | varmail)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/workloads.py" run "$work" --workload "$job" \
            --seconds "$BENCH_RUNTIME" --workers "$BENCH_FB_WORKERS" --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    sqlite-*)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/sqlite_bench.py" run "$work" --mode "${job#sqlite-}" \
            --seconds "$BENCH_RUNTIME" --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    rocksdb-*)
        local rc=0
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/kv.py" run "$work" --bench "${job#rocksdb-}" \
            --ops "$BENCH_KV_OPS" --timeout "$((job_timeout - 30))" --output "$out" >/dev/null 2>"$err" || rc=$?
        if [ $rc -eq 3 ]; then
            echo "$sys $job $rep $(tail -1 "$err")" >>"$OUT/skipped.txt"
            rm -f "$out" "$err" "$base.before.json"
            return 0
        fi
        [ $rc -eq 0 ] || ok=0
        ;;
    syncappend | overwrite)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" "$job" "$work" \
            --seconds "$BENCH_RUNTIME" --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    overwrite-hot)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" overwrite "$work" \
            --seconds "$BENCH_RUNTIME" --region-bytes "$((PM10_BYTES * 3 / 4))" \
            --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    seqbig)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" seqwrite "$work" \
            --bytes "$BIG_BYTES" --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    migrate)
        [ -n "$SYS_TMNT" ] || die "migrate runs on Terrace only ($sys)"
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" migrate "$work" \
            --mount "$SYS_TMNT" --output "$out" >/dev/null 2>"$err" || ok=0
        ;;
    *) die "unknown job $job" ;;
    esac
    # Count what the file system still has to write back (buffered writes) too.
    sync -f "$work" 2>/dev/null || sync
    "$BENCH_PYTHON" "$BENCH/devstat.py" diff "$base.before.json" "$base.dev.json" "${DEV_ARGS[@]}" || true
    rm -f "$base.before.json"
    if [ $ok -eq 1 ]; then
        [ -s "$err" ] || rm -f "$err"
        log "$sys $job run $rep: done"
    else
        rm -f "$out"
        record_failure "$sys" "$job" "$rep" "$err"
    fi
}

# init_group GROUP REP WORKDIR SYSTEM: prepare the data set of a paper group (not measured;
# its device traffic is kept in raw/SYSTEM__GROUP-init__rREP.dev.json).
init_group() {
    local group=$1 rep=$2 work=$3 sys=$4 rc=0
    local base=$RAW/${sys}__${group}-init__r${rep}
    dev_args
    "$BENCH_PYTHON" "$BENCH/devstat.py" snap "$base.before.json" "${DEV_ARGS[@]}"
    case $group in
    zipf)
        fg_wait env BENCH_DIR="$work" BENCH_NUMJOBS="$BENCH_ZIPF_JOBS" BENCH_FILE_SIZE="${ZIPF_FILE_MB}M" \
            timeout "$job_timeout" fio --output-format=json --output="$base.init.json" \
            "$BENCH/fio/zipf-init.fio" 2>"$base.err" || rc=$?
        ;;
    fileserver | webproxy | varmail)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/workloads.py" init "$work" --workload "$group" \
            --files "$FB_FILES" >"$base.init.json" 2>"$base.err" || rc=$?
        ;;
    sqlite-*)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/sqlite_bench.py" init "$work" --mode "${group#sqlite-}" \
            --bytes "$((DATASET_BYTES / BENCH_SQLITE_DIVISOR))" >"$base.init.json" 2>"$base.err" || rc=$?
        ;;
    rocksdb)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/kv.py" preload "$work" \
            --bytes "$DATASET_BYTES" >"$base.init.json" 2>"$base.err" || rc=$?
        ;;
    syncappend)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" init-syncappend "$work" \
            --files 1000 >"$base.init.json" 2>"$base.err" || rc=$?
        ;;
    overwrite | overwrite-hot)
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" init-overwrite "$work" \
            --bytes "$BIG_BYTES" >"$base.init.json" 2>"$base.err" || rc=$?
        ;;
    migrate)
        # 40% of the data set in 64 KiB writes: stays on PM (below the 50%
        # threshold of a pool with PM for all of it) until `terrace migrate`.
        fg_wait timeout "$job_timeout" "$BENCH_PYTHON" "$BENCH/tiering.py" init-migrate "$work" \
            --bytes "$BIG_BYTES" --write-size 65536 >"$base.init.json" 2>"$base.err" || rc=$?
        ;;
    esac
    sync -f "$work" 2>/dev/null || sync
    "$BENCH_PYTHON" "$BENCH/devstat.py" diff "$base.before.json" "$base.dev.json" "${DEV_ARGS[@]}" || true
    rm -f "$base.before.json"
    [ -s "$base.err" ] || rm -f "$base.err"
    return $rc
}

# group_jobs GROUP [THETAS]: the measurements of a group, in order
group_jobs() {
    local t
    case $1 in
    zipf)
        for t in $2; do echo "zipf-read-$t"; done
        for t in $2; do echo "zipf-write-$t"; done
        ;;
    rocksdb) echo rocksdb-readseq rocksdb-fillseq rocksdb-fillrandom ;;
    *) echo "$1" ;;
    esac
}

declare -A SKIP=()
# on_system SPEC: set the system up (skips are remembered); 0 = ready
on_system() {
    local rc=0
    if [ -n "${SKIP[$1]:-}" ]; then return 2; fi
    sys_setup "$1" || rc=$?
    if [ $rc -eq 2 ]; then
        log "skipping $1: $SYS_SKIP"
        echo "$1 all - $SYS_SKIP" >>"$OUT/skipped.txt"
        SKIP[$1]=1
        sys_teardown
    elif [ $rc -ne 0 ]; then
        log "$1: set-up failed (status $rc)"
        echo "$1 setup - set-up failed (status $rc)" >>"$OUT/failures.txt"
        sys_teardown
    fi
    return $rc
}

# run_group SPEC GROUP REP THETAS: set up, initialise, measure, tear down
run_group() {
    local spec=$1 group=$2 rep=$3 thetas=$4 job work
    on_system "$spec" || return 0
    work=$SYS_DIR/bench-work
    mkdir -p "$work"
    if ! init_group "$group" "$rep" "$work" "$spec"; then
        record_failure "$spec" "$group-init" "$rep" "$RAW/${spec}__${group}-init__r${rep}.err"
    else
        log "$spec $group: initialised"
        for job in $(group_jobs "$group" "$thetas"); do
            measure "$spec" "$job" "$rep" "$work" || break
        done
    fi
    sys_teardown
}

log "mode $MODE: $BENCH_REPS repetition(s); results in $OUT"
start=$SECONDS
for ((rep = 1; rep <= BENCH_REPS; rep++)); do
    # micro jobs: one fresh system per job
    for job in $BENCH_JOBS; do
        for t in $BENCH_TARGETS; do
            on_system "$t" || continue
            mkdir -p "$SYS_DIR/bench-work"
            measure "$t" "$job" "$rep" "$SYS_DIR/bench-work" || true
            sys_teardown
        done
    done
    # paper workloads
    for group in "${groups[@]}"; do
        for s in $BENCH_SYSTEMS; do
            run_group "$s" "$group" "$rep" "$BENCH_ZIPF_THETAS"
        done
    done
    # parameter sweeps (§6.7)
    for sweep in $BENCH_SWEEPS; do
        key=${sweep%%=*}
        IFS=, read -ra vals <<<"${sweep#*=}"
        for val in "${vals[@]}"; do
            for group in $BENCH_SWEEP_WORKLOADS; do
                run_group "$BENCH_SWEEP_SYSTEM@$key=$val" "$group" "$rep" "$BENCH_SWEEP_THETA"
            done
            [ -z "${SKIP[$BENCH_SWEEP_SYSTEM@$key=$val]:-}" ] || break
        done
    done
    # the targets' measurements (bench/targets.py)
    for pair in $BENCH_PAIRS; do
        run_group "${pair%:*}" "${pair##*:}" "$rep" "$BENCH_PAIR_THETA"
    done
done
log "measurements took $((SECONDS - start)) s"

"$BENCH_PYTHON" "$BENCH/report.py" report "$OUT" ${BENCH_DOCS:+--docs "$BENCH_DOCS"} \
    ${BENCH_RESULTS_README:+--readme "$BENCH_RESULTS_README"}
log "done: $OUT"
