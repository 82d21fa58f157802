#!/usr/bin/env bash
# Prepare this machine for building, testing and benchmarking Terrace.
#
# Idempotent: every step checks first and does nothing when the machine is
# already set up, so `make demo` and `make test` can call it every time.
#   * installs the Debian packages whose commands are missing (apt-get, quiet);
#   * makes sure the Rust toolchain has rustfmt and clippy;
#   * loads the fuse kernel module when /dev/fuse is missing.
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }

# Run a command as root: directly when we are root, through sudo otherwise.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root for: $* (no sudo available)"
        return 1
    fi
}

# command -> Debian package that provides it
declare -A PKG_FOR_CMD=(
    [fusermount3]=fuse3
    [fio]=fio
    [mkfs.xfs]=xfsprogs
    [sqlite3]=sqlite3
    [mkfs.ext4]=e2fsprogs
    [losetup]=util-linux
    [findmnt]=util-linux
    [gcc]=gcc
    [zsh]=zsh
    [fish]=fish
    # The systemd unit's check (systemd-analyze verify) and the daemon's log
    # in a real journald (systemd-journald started standalone, journalctl).
    [systemd-analyze]=systemd
    [journalctl]=systemd
    # PostgreSQL killed with the daemon under it (tests/e2e/test_postgres.py)
    # and bench/postgres.py; its programs are in /usr/lib/postgresql/*/bin.
    [pg_ctlcluster]=postgresql
    # POSIX ACLs through a mount (tests/e2e/test_posix_parity.py and
    # test_mount_options.py). xfstests' setup installs it too, but the e2e
    # tests run first on a fresh machine.
    [setfacl]=acl
    [getfacl]=acl
)

# Commands in /sbin and /usr/sbin are not always on a non-root PATH.
have_cmd() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/sbin/$1" ] || [ -x "/usr/sbin/$1" ]
}

missing=()
for cmd in "${!PKG_FOR_CMD[@]}"; do
    if ! have_cmd "$cmd"; then
        pkg=${PKG_FOR_CMD[$cmd]}
        case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq >/dev/null
        as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        log "missing packages ${missing[*]} and no apt-get: install them by hand"
        exit 1
    fi
else
    log "packages present"
fi

# Rust components used by `make test` (fmt and clippy). Offline machines may
# already have them or may not be able to fetch them: do not fail here.
if command -v rustup >/dev/null 2>&1; then
    installed=$(rustup component list --installed 2>/dev/null || true)
    for comp in rustfmt clippy; do
        if ! grep -q "^${comp}" <<<"$installed"; then
            log "adding rustup component $comp"
            rustup component add "$comp" >/dev/null 2>&1 || log "could not add $comp (offline?)"
        fi
    done
elif ! command -v cargo >/dev/null 2>&1; then
    log "cargo not found: install Rust from https://rustup.rs"
    exit 1
fi

# FUSE kernel support.
if [ ! -e /dev/fuse ]; then
    log "loading the fuse module"
    as_root modprobe fuse || { log "modprobe fuse failed; /dev/fuse is required"; exit 1; }
fi

log "ready"
