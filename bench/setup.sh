#!/usr/bin/env bash
# Install what the benchmark needs (idempotent; does nothing when all is present).
#
#   fio                 every fio job (micro jobs, Zipf jobs, device probe)
#   xfsprogs            XFS-ML (mkfs.xfs with an external log)
#   e2fsprogs           ext4, EXT4-DJ (mke2fs -O journal_dev)
#   util-linux          losetup, findmnt
#   mergerfs            the user-space tiering peer
#   fuse3               fusermount3 (FUSE targets)
#   sqlite3             the sqlite3 shell (the SQLite workload itself uses python3's sqlite3 module)
#   rocksdb-tools       db_bench (the key-value workload)
#   python3-matplotlib  PNG plots
#
# Run as root (bench/run.sh calls it first; `make bench-setup` runs it alone).
# BENCH_NO_INSTALL=1 only reports what is missing.
set -euo pipefail

log() { printf 'bench-setup: %s\n' "$*" >&2; }

have_cmd() { command -v "$1" >/dev/null 2>&1 || [ -x "/sbin/$1" ] || [ -x "/usr/sbin/$1" ]; }
PY=${BENCH_PYTHON:-python3}
[ -n "${BENCH_PYTHON:-}" ] || [ ! -x /usr/bin/python3 ] || PY=/usr/bin/python3
have_py() { "$PY" -c "import $1" >/dev/null 2>&1; }

missing=()
want() { case " ${missing[*]-} " in *" $1 "*) ;; *) missing+=("$1") ;; esac; }

have_cmd fio || want fio
have_cmd mkfs.xfs || want xfsprogs
have_cmd mke2fs || want e2fsprogs
have_cmd losetup || want util-linux
have_cmd findmnt || want util-linux
have_cmd mergerfs || want mergerfs
have_cmd fusermount3 || want fuse3
have_cmd sqlite3 || want sqlite3
have_cmd db_bench || want rocksdb-tools
have_py sqlite3 || want libpython3-stdlib
have_py matplotlib || want python3-matplotlib

if [ "${#missing[@]}" -eq 0 ]; then
    log "all benchmark tools present"
    exit 0
fi
if [ "${BENCH_NO_INSTALL:-0}" = 1 ]; then
    log "missing: ${missing[*]} (BENCH_NO_INSTALL=1: not installing; the jobs that need them are skipped)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
    log "missing: ${missing[*]}; install them by hand (needs apt-get and root); the jobs that need them are skipped"
    exit 0
fi
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || log "warning: apt-get update failed"
# One by one, so that one unavailable package does not stop the others.
for pkg in "${missing[@]}"; do
    apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null ||
        log "warning: could not install $pkg; the jobs that need it are skipped"
done
