#!/usr/bin/env bash
# tests/xfstests/run.sh: run the pinned xfstests (fstests) suite against Terrace
# mounts and write the results to docs/results/. `run.sh --help` for usage.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

usage() {
    cat <<EOF
Usage: tests/xfstests/run.sh [OPTIONS] [--] [CHECK ARGS...]

Runs xfstests (FSTYP=fuse, FUSE_SUBTYP=.terrace) against two Terrace pools, a
TEST pool and a SCRATCH pool, and writes a results file with the passed /
failed / not-run counts, the failures and the machine.

CHECK ARGS go to xfstests' ./check unchanged (default: -g quick; the fuse
FSTYP has no test folder of its own, so a group means its generic tests).
Everything from the first argument that is not an option below is a CHECK ARG.

Options (each also an environment variable):
  --config pm|tiered   XFSTESTS_CONFIG  (default pm)
                         pm:     TEST pool ${XFSTESTS_TEST_SIZE:-1G} of PM, SCRATCH pool ${XFSTESTS_SCRATCH_SIZE:-2G} of PM, both on /dev/shm
                         tiered: each pool ${XFSTESTS_TIERED_PM:-256M} of PM on /dev/shm + a ${XFSTESTS_TIERED_SSD:-4G} SSD
                                 image in WORK/pools, mounted with
                                 ${XFSTESTS_TIERED_OPTS:-migration_threshold=10,migration_age_ns=2s,size_fresh_large_bytes=256K}
                                 so that migration and write-back run
  --work DIR           XFSTESTS_WORK    scratch folder (default /var/tmp/terrace-xfstests):
                                          xfstests build, terrace copy, SSD images,
                                          mount points, runs/<config>-<time>/ (check
                                          log, xfstests results/, helper log)
  --terrace PATH       TERRACE          terrace binary to copy (default target/release/terrace;
                                          built with cargo if missing). The run uses a copy.
  --report FILE        XFSTESTS_REPORT  results file (default docs/results/xfstests-<config>-<date>.md)
  --no-report                           write the report only into the run folder
  --expected FILE      XFSTESTS_EXPECTED  expected failures (default tests/xfstests/expected-failures;
                                          with writeback_cache in --mount-opts, plus
                                          tests/xfstests/expected-failures-writeback-cache)
  --mount-opts OPTS    XFSTESTS_MOUNT_OPTS  extra -o options for every mount of the two pools
  --no-fsck            XFSTESTS_FSCK=0   do not unmount and \`terrace fsck\` the scratch pool after
                                          each test that used it (default: do)
  --no-sized-mkfs      XFSTESTS_SIZED_MKFS=0  leave tests needing a sized scratch pool
                                          not run, as stock xfstests does for fuse (default:
                                          format a pool of the size asked for)
  --keep-pools                          leave the pools' files behind at exit
  --setup-only                          install, build, configure and format the pools, then
                                          exit (leaves the pools for a manual ./check)
  --uninstall                           remove the helpers from /sbin and exit
  -h, --help

Setup (each step only when needed): apt-get installs missing Debian packages;
the users fsgqa, fsgqa2, 123456-fsgqa and group fsgqa are created; xfstests is
unpacked from ../shared/third_party and built in WORK/xfstests (reused while
the tarball's sha256 matches); the FSTYP=fuse quirks are applied to that copy
(_fs_type maps fuse.terrace to fuse; common/rc sources tests/xfstests/terrace.rc,
which formats the scratch pool for _scratch_mkfs and checks it with terrace fsck);
/sbin/mount.fuse.terrace is installed, and for the run /sbin/umount.fuse.terrace
and /sbin/umount.fuse (see the comment in the script).

Exit status: 0 when every failure is listed in the expected-failures file,
1 when there are unexpected failures, 2 when the harness itself failed.

Examples:
  tests/xfstests/run.sh                                  # generic quick group, pm config
  tests/xfstests/run.sh --config tiered -g quick
  tests/xfstests/run.sh --no-report generic/001 generic/013
  make xfstests XFSTESTS_CONFIG=tiered XFSTESTS_ARGS="-g quick"
EOF
}

CONFIG=${XFSTESTS_CONFIG:-pm}
WORK=${XFSTESTS_WORK:-/var/tmp/terrace-xfstests}
TERRACE_SRC=${TERRACE:-$REPO/target/release/terrace}
TARBALL_NAME=xfstests-63a29724.tar.gz
# The pinned source: XFSTESTS_TARBALL, else shared/third_party/ beside the
# checkout or beside any folder above it (a clean clone elsewhere finds it
# too); empty when none is found (a build of it in WORK is then reused).
find_tarball() {
    local d=$REPO
    while [ -n "$d" ] && [ "$d" != / ]; do
        [ -r "$d/../shared/third_party/$TARBALL_NAME" ] &&
            { readlink -f "$d/../shared/third_party/$TARBALL_NAME"; return; }
        d=$(dirname "$d")
    done
}
TARBALL=${XFSTESTS_TARBALL:-$(find_tarball)}
REPORT=${XFSTESTS_REPORT:-}
WRITE_REPORT=1
EXPECTED=${XFSTESTS_EXPECTED:-$HERE/expected-failures}
EXTRA_OPTS=${XFSTESTS_MOUNT_OPTS:-}
FSCK_SCRATCH=${XFSTESTS_FSCK:-1}
SIZED_MKFS=${XFSTESTS_SIZED_MKFS:-1}
KEEP_POOLS=0
SETUP_ONLY=0
UNINSTALL=0

while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --config) CONFIG=${2:?--config needs pm or tiered}; shift 2 ;;
        --config=*) CONFIG=${1#*=}; shift ;;
        --work) WORK=${2:?}; shift 2 ;;
        --terrace) TERRACE_SRC=${2:?}; shift 2 ;;
        --report) REPORT=${2:?}; shift 2 ;;
        --no-report) WRITE_REPORT=0; shift ;;
        --expected) EXPECTED=${2:?}; shift 2 ;;
        --mount-opts) EXTRA_OPTS=${2:?}; shift 2 ;;
        --no-fsck) FSCK_SCRATCH=0; shift ;;
        --no-sized-mkfs) SIZED_MKFS=0; shift ;;
        --keep-pools) KEEP_POOLS=1; shift ;;
        --setup-only) SETUP_ONLY=1; KEEP_POOLS=1; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
CHECK_ARGS=("$@")
[ ${#CHECK_ARGS[@]} -gt 0 ] || CHECK_ARGS=(-g quick)

say() { printf 'xfstests: %s\n' "$*" >&2; }
die() { printf 'xfstests: error: %s\n' "$*" >&2; exit 2; }

HELPER_DIR=/sbin
if [ "$UNINSTALL" = 1 ]; then
    rm -f "$HELPER_DIR/mount.fuse.terrace"
    for f in "$HELPER_DIR/umount.fuse.terrace" "$HELPER_DIR/umount.fuse"; do
        if [ -e "$f" ] && grep -q 'terrace-xfstests umount helper' "$f"; then rm -f "$f"; fi
    done
    say "removed the mount helpers from $HELPER_DIR"
    exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages, creates users, mounts)"
if [ -z "$TARBALL" ] || [ ! -r "$TARBALL" ]; then
    # Without the tarball, an earlier build of the same pinned source will do.
    [ -f "$WORK/xfstests/.terrace-build" ] && [ -x "$WORK/xfstests/ltp/fsstress" ] ||
        die "xfstests tarball not found (${TARBALL:-$TARBALL_NAME}: set XFSTESTS_TARBALL, or put the checkout beside shared/third_party/) and no earlier build in $WORK/xfstests"
    say "xfstests tarball not found; reusing the build in $WORK/xfstests"
    TARBALL=
fi

case $CONFIG in
    pm)
        TEST_TIERS=(--tier "pm:/dev/shm/terrace-xfstests-test.pm:${XFSTESTS_TEST_SIZE:-1G}")
        SCRATCH_TIERS=(--tier "pm:/dev/shm/terrace-xfstests-scratch.pm:${XFSTESTS_SCRATCH_SIZE:-2G}")
        CONFIG_OPTS=""
        ;;
    tiered)
        TEST_TIERS=(--tier "pm:/dev/shm/terrace-xfstests-test.pm:${XFSTESTS_TIERED_PM:-256M}"
                    --tier "ssd:$WORK/pools/test.ssd:${XFSTESTS_TIERED_SSD:-4G}")
        SCRATCH_TIERS=(--tier "pm:/dev/shm/terrace-xfstests-scratch.pm:${XFSTESTS_TIERED_PM:-256M}"
                       --tier "ssd:$WORK/pools/scratch.ssd:${XFSTESTS_TIERED_SSD:-4G}")
        CONFIG_OPTS=${XFSTESTS_TIERED_OPTS:-migration_threshold=10,migration_age_ns=2s,size_fresh_large_bytes=256K}
        ;;
    *) die "unknown config '$CONFIG' (pm or tiered)" ;;
esac
TEST_POOL=/dev/shm/terrace-xfstests-test.pm
SCRATCH_POOL=/dev/shm/terrace-xfstests-scratch.pm
SCRATCH_SSD=$WORK/pools/scratch.ssd
TEST_MNT=$WORK/mnt/test
SCRATCH_MNT=$WORK/mnt/scratch
POOL_OPTS=$CONFIG_OPTS
[ -z "$EXTRA_OPTS" ] || POOL_OPTS=${POOL_OPTS:+$POOL_OPTS,}$EXTRA_OPTS

mkdir -p "$WORK"/{bin,pools,mnt/test,mnt/scratch,runs}
exec 9>"$WORK/lock"
flock -n 9 || die "another run.sh holds $WORK/lock"

# ------------------------------------------------------------ Debian packages
DEPS=(autoconf automake libtool libtool-bin make gcc pkg-config libaio-dev uuid-dev
      xfslibs-dev liburing-dev libattr1-dev libacl1-dev libgdbm-dev libgdbm-compat-dev
      libcap-dev gawk attr acl xfsprogs e2fsprogs bc psmisc fio dbench quota sqlite3
      uuid-runtime libcap2-bin python3 util-linux fuse3)
missing=()
for p in "${DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${missing[@]}" >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; } ||
        die "apt-get install ${missing[*]} failed"
fi

# ---------------------------------------------------------- users and groups
getent group fsgqa >/dev/null || groupadd fsgqa
id fsgqa >/dev/null 2>&1 || useradd -m -g fsgqa fsgqa
id fsgqa2 >/dev/null 2>&1 || useradd -m fsgqa2
id 123456-fsgqa >/dev/null 2>&1 || useradd -m 123456-fsgqa ||
    say "warning: cannot create user 123456-fsgqa (a few tests will not run)"

# --------------------------------------------------------------- xfstests build
SRC=$WORK/xfstests
SHA=$([ -n "$TARBALL" ] && sha256sum "$TARBALL" | cut -d' ' -f1 || cat "$SRC/.terrace-build")
if [ -f "$SRC/.terrace-build" ] && [ "$(cat "$SRC/.terrace-build")" = "$SHA" ] && [ -x "$SRC/ltp/fsstress" ]; then
    say "reusing the xfstests build in $SRC"
else
    say "building xfstests from $(basename "$TARBALL") in $SRC (log: $WORK/build.log)"
    rm -rf "$SRC"
    tar -xzf "$TARBALL" -C "$WORK"
    [ -f "$SRC/check" ] || die "$TARBALL did not unpack to $SRC"
    (cd "$SRC" && make -j"$(nproc)") >"$WORK/build.log" 2>&1 ||
        { tail -n 30 "$WORK/build.log" >&2; die "xfstests build failed (see $WORK/build.log)"; }
    echo "$SHA" >"$SRC/.terrace-build"
fi

# FSTYP=fuse quirks, applied to the unpacked copy (idempotent):
# 1. _fs_type maps only fuse.glusterfs and fuse.ceph-fuse back to their FSTYP;
#    without fuse.terrace -> fuse the TEST/SCRATCH mounts look like another file system.
if ! grep -q "s/fuse.terrace/fuse/" "$SRC/common/rc"; then
    sed -i "s|-e 's/fuse.ceph-fuse/ceph-fuse/'|& -e 's/fuse.terrace/fuse/'|" "$SRC/common/rc"
    grep -q "s/fuse.terrace/fuse/" "$SRC/common/rc" || die "could not patch _fs_type in $SRC/common/rc"
fi
# 2. The Terrace hooks (scratch mkfs, sized mkfs, fsck): common/rc sources terrace.rc last.
install -m 644 "$HERE/terrace.rc" "$SRC/common/terrace.rc"
sed -i '/# terrace-xfstests hooks$/d' "$SRC/common/rc"
echo ". $SRC/common/terrace.rc # terrace-xfstests hooks" >>"$SRC/common/rc"

# ------------------------------------------------------------- terrace binary
if [ ! -x "$TERRACE_SRC" ]; then
    say "building terrace (cargo build --release -p terrace)"
    (cd "$REPO" && cargo build --release -p terrace) || die "cargo build failed"
fi
# A copy: target/release/terrace may be rebuilt while the suite runs.
cp "$TERRACE_SRC" "$WORK/bin/terrace.new"
mv -f "$WORK/bin/terrace.new" "$WORK/bin/terrace"
TERRACE_BIN=$WORK/bin/terrace
TERRACE_VERSION=$("$TERRACE_BIN" --version 2>/dev/null || echo unknown)
# What the binary was built from is not recorded in it: say when it was built
# and what the repository held when the run started.
GIT_REV="repository at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$REPO" status --porcelain -- crates 2>/dev/null)" ]; then
    GIT_REV="$GIT_REV + uncommitted changes in crates/"
fi
GIT_REV="$GIT_REV; binary $TERRACE_SRC built $(date -u -r "$TERRACE_SRC" '+%F %T UTC')"

# ---------------------------------------------------------------- run folder
STAMP=$(date +%Y%m%d-%H%M%S)
RUN=$WORK/runs/$CONFIG-$STAMP
mkdir -p "$RUN"

# Mounts with the kernel's writeback cache add the failures that only it
# explains (expected-failures-writeback-cache) to the expected ones.
case ",$EXTRA_OPTS," in
    *,writeback_cache,*)
        if [ -f "$HERE/expected-failures-writeback-cache" ]; then
            cat "$EXPECTED" "$HERE/expected-failures-writeback-cache" >"$RUN/expected-failures"
            EXPECTED=$RUN/expected-failures
        fi ;;
esac

# ------------------------------------------------------------- exit cleanup
# Unmounts whatever is mounted from the two pools (also leftovers of a killed run).
unmount_pools() {
    local pool mnt
    for pool in "$TEST_POOL" "$SCRATCH_POOL"; do
        for mnt in $(findmnt -rn -S "$pool" -o TARGET 2>/dev/null); do
            "$TERRACE_BIN" umount "$mnt" >/dev/null 2>&1 ||
                "$TERRACE_BIN" umount --lazy "$mnt" >/dev/null 2>&1 ||
                umount -l "$mnt" 2>/dev/null || say "warning: could not unmount $mnt"
        done
    done
}
UMOUNT_HELPERS=("$HELPER_DIR/umount.fuse.terrace" "$HELPER_DIR/umount.fuse")
UMOUNT_HELPERS_INSTALLED=0
cleanup() {
    local rc=$?
    unmount_pools
    if [ "$UMOUNT_HELPERS_INSTALLED" = 1 ] && [ "$SETUP_ONLY" = 0 ]; then
        rm -f "${UMOUNT_HELPERS[@]}"
    fi
    if [ "$KEEP_POOLS" = 0 ]; then
        rm -f "$TEST_POOL" "$SCRATCH_POOL" "$WORK/pools/test.ssd" "$WORK/pools/scratch.ssd"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------- mount helpers and config
cat >"$WORK/helper.conf" <<EOF
# Written by tests/xfstests/run.sh; read by /sbin/mount.fuse.terrace and /sbin/umount.fuse.terrace.
TERRACE_BIN=$TERRACE_BIN
TERRACE_XFSTESTS_POOLS="$TEST_POOL $SCRATCH_POOL"
TERRACE_XFSTESTS_OPTS="$POOL_OPTS"
TERRACE_HELPER_LOG=$RUN/helper.log
TERRACE_STATUS_LOG=$RUN/status.json
TERRACE_STATUS_POOLS="$TEST_POOL"
EOF
# umount(8) looks up /sbin/umount.fuse.terrace when it reads the type from
# mountinfo (relative paths, devices) but /sbin/umount.fuse when it takes the
# type from statfs (absolute mount points): install the helper under both names.
# It passes every mount that is not one of the two pools to `umount -i`
# unchanged. The umount helpers are removed at exit (not with --setup-only).
for f in "${UMOUNT_HELPERS[@]}"; do
    if [ -e "$f" ] && ! grep -q 'terrace-xfstests umount helper' "$f"; then
        die "$f exists and is not this harness's helper: not replacing it"
    fi
done
sed "s|@HELPER_CONF@|$WORK/helper.conf|" "$HERE/mount.fuse.terrace" >"$WORK/bin/mount.fuse.terrace"
install -m 755 "$WORK/bin/mount.fuse.terrace" "$HELPER_DIR/mount.fuse.terrace"
sed "s|@HELPER_CONF@|$WORK/helper.conf|" "$HERE/umount.fuse.terrace" >"$WORK/bin/umount.fuse.terrace"
UMOUNT_HELPERS_INSTALLED=1
for f in "${UMOUNT_HELPERS[@]}"; do
    install -m 755 "$WORK/bin/umount.fuse.terrace" "$f"
done

sed -e "s|@CONFIG@|$CONFIG|g" \
    -e "s|@TEST_POOL@|$TEST_POOL|g" -e "s|@TEST_MNT@|$TEST_MNT|g" \
    -e "s|@SCRATCH_POOL@|$SCRATCH_POOL|g" -e "s|@SCRATCH_MNT@|$SCRATCH_MNT|g" \
    -e "s|@RESULT_BASE@|$RUN/results|g" -e "s|@TERRACE_BIN@|$TERRACE_BIN|g" \
    -e "s|@SCRATCH_TIERS@|${SCRATCH_TIERS[*]}|g" -e "s|@SCRATCH_SSD@|$SCRATCH_SSD|g" \
    -e "s|@SIZED_MKFS@|$SIZED_MKFS|g" -e "s|@FSCK_SCRATCH@|$FSCK_SCRATCH|g" \
    "$HERE/local.config.in" >"$SRC/local.config"

# ---------------------------------------------------------------------- pools
unmount_pools
for mnt in "$TEST_MNT" "$SCRATCH_MNT"; do
    mountpoint -q "$mnt" && die "$mnt is still a mount point"
done
"$TERRACE_BIN" mkfs --force "${TEST_TIERS[@]}" >"$RUN/mkfs-test.log" 2>&1 ||
    { cat "$RUN/mkfs-test.log" >&2; die "mkfs of the TEST pool failed"; }
"$TERRACE_BIN" mkfs --force "${SCRATCH_TIERS[@]}" >"$RUN/mkfs-scratch.log" 2>&1 ||
    { cat "$RUN/mkfs-scratch.log" >&2; die "mkfs of the SCRATCH pool failed"; }

# A mount through the helper, as xfstests does it: fails early on a broken setup.
mount -t fuse.terrace "$TEST_POOL" "$TEST_MNT" || die "mount -t fuse.terrace $TEST_POOL $TEST_MNT failed (see $RUN/helper.log)"
umount "$TEST_MNT" || die "umount $TEST_MNT failed"

if [ "$SETUP_ONLY" = 1 ]; then
    say "set up: $SRC (local.config), helpers in $HELPER_DIR, pools formatted; run folder $RUN"
    exit 0
fi

# ---------------------------------------------------------------------- check
ulimit -f unlimited 2>/dev/null || say "warning: cannot raise the file-size limit (ulimit -f)"
ulimit -n 1048576 2>/dev/null || true
say "config $CONFIG: ./check ${CHECK_ARGS[*]} (log: $RUN/check.log)"
START=$(date +%s)
set +e
(cd "$SRC" && ./check "${CHECK_ARGS[@]}") 2>&1 | tee "$RUN/check.log"
CHECK_RC=${PIPESTATUS[0]}
set -e
END=$(date +%s)
unmount_pools

# fsck of both pools at the end (the TEST pool is never checked by xfstests for fuse).
FSCK_SUMMARY=$RUN/fsck.txt
: >"$FSCK_SUMMARY"
for pool in "$TEST_POOL" "$SCRATCH_POOL"; do
    set +e
    out=$("$TERRACE_BIN" fsck "$pool" 2>&1)
    rc=$?
    set -e
    { echo "## terrace fsck $pool (exit $rc)"; echo "$out"; echo; } >>"$FSCK_SUMMARY"
done

# ---------------------------------------------------------------------- report
DATE=$(date +%Y-%m-%d)
[ -n "$REPORT" ] || REPORT=$REPO/docs/results/xfstests-$CONFIG-$DATE.md
REPORT_ARGS=(--config "$CONFIG" --check-log "$RUN/check.log" --results "$RUN/results"
             --tests "$SRC/tests" --expected "$EXPECTED" --status-log "$RUN/status.json"
             --fsck "$FSCK_SUMMARY" --out "$RUN/report.md"
             --command "tests/xfstests/run.sh --config $CONFIG$([ "$TERRACE_SRC" = "$REPO/target/release/terrace" ] || printf ' --terrace %s' "$TERRACE_SRC") ${CHECK_ARGS[*]}"
             --check-rc "$CHECK_RC" --seconds $((END - START))
             --terrace-version "$TERRACE_VERSION" --git-rev "$GIT_REV"
             --xfstests "$TARBALL_NAME"
             --pools "TEST: mkfs ${TEST_TIERS[*]}; SCRATCH: mkfs ${SCRATCH_TIERS[*]}"
             --mount-opts "allow_other${POOL_OPTS:+,$POOL_OPTS}"
             --options "scratch fsck after each test: $([ "$FSCK_SCRATCH" = 1 ] && echo yes || echo no); sized scratch mkfs: $([ "$SIZED_MKFS" = 1 ] && echo yes || echo no)")
# The report can be written again from the run folder: bash RUN/report.sh
{ printf '#!/bin/sh\n# Writes RUN/report.md again (e.g. after editing expected-failures).\nexec python3'
  printf ' %q' "$HERE/report.py" "${REPORT_ARGS[@]}"; printf '\n'; } >"$RUN/report.sh"
set +e
python3 "$HERE/report.py" "${REPORT_ARGS[@]}"
REPORT_RC=$?
set -e
if [ "$WRITE_REPORT" = 1 ] && [ -f "$RUN/report.md" ]; then
    mkdir -p "$(dirname "$REPORT")"
    cp "$RUN/report.md" "$REPORT"
    say "results: $REPORT"
fi
say "run folder: $RUN"
case $REPORT_RC in
    0) exit 0 ;;
    1) exit 1 ;;
    *) exit 2 ;;
esac
