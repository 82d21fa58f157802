#!/usr/bin/env bash
# Same-run comparison of two Terrace builds on `make bench-quick`'s workloads:
# is the performance of this checkout unchanged (within noise) against BASE?
#
# Builds BASE (a git revision, default HEAD~1) in a worktree under
# target/bench-base/ (its own target dir, kept for the next run), and this
# checkout's release binary; then runs bench/run.sh quick on the Terrace
# systems only (the baselines do not change with the build), alternating the
# two builds ROUNDS times (base, head, base, head, ...) so that a drift of the
# machine falls on both. bench/compare_builds.py takes the median per build of
# every measurement and writes the ratio head/base: OUT/compare.md, and the
# section between the "bench:compare" markers of docs/benchmarks.md.
#
# Usage: bench/compare_builds.sh [BASE [ROUNDS]]    (default HEAD~1, 2 rounds)
#   BENCH_COMPARE_OUT=DIR     results (default docs/results/DATE-HOST-compare)
#   BENCH_COMPARE_DOCS=FILE   file whose bench:compare section is rewritten ("" = none)
#   and the knobs of bench/run.sh (BENCH_JOBS, BENCH_SYSTEMS, BENCH_PAIRS, ...),
#   which default here to its quick mode without the non-Terrace systems.
# Needs root and bench/setup.sh's tools, like bench/run.sh.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:-HEAD~1}
ROUNDS=${2:-2}
log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

case $ROUNDS in '' | *[!0-9]* | 0) die "ROUNDS must be a whole number ≥ 1, not '$ROUNDS'" ;; esac
[ "$(id -u)" -eq 0 ] || die "run as root (the benchmark mounts file systems and attaches loop devices)"
base_rev=$(git -C "$REPO" rev-parse --verify --quiet "$BASE^{commit}") ||
    die "'$BASE' is not a commit of $REPO (try HEAD~1 or a hash from git log)"
head_rev=$(git -C "$REPO" rev-parse HEAD)
dirty=
git -C "$REPO" diff --quiet HEAD -- crates Cargo.toml Cargo.lock || dirty=" (+ uncommitted changes)"

# The base build: a detached worktree with a target dir of its own.
BASE_DIR=$REPO/target/bench-base
SRC=$BASE_DIR/src
mkdir -p "$BASE_DIR"
if [ -d "$SRC" ]; then
    git -C "$SRC" checkout -q --detach "$base_rev" 2>/dev/null ||
        { git -C "$REPO" worktree remove --force "$SRC" 2>/dev/null || rm -rf "$SRC"; }
fi
if [ ! -d "$SRC" ]; then
    git -C "$REPO" worktree prune
    git -C "$REPO" worktree add -q --detach "$SRC" "$base_rev"
fi
# Seed its target dir from this checkout's on the first run: the dependencies
# then need no rebuild, only the workspace's own crates.
if [ ! -d "$BASE_DIR/target/release" ] && [ -d "$REPO/target/release" ]; then
    mkdir -p "$BASE_DIR/target"
    cp -a "$REPO/target/release" "$BASE_DIR/target/release"
fi
log "building base ${base_rev:0:10} (release, terrace binary)"
CARGO_TARGET_DIR=$BASE_DIR/target cargo build --quiet --release --manifest-path "$SRC/Cargo.toml" -p terrace --bin terrace
BASE_BIN=$BASE_DIR/terrace-${base_rev:0:10}
cp "$BASE_DIR/target/release/terrace" "$BASE_BIN"
log "building head ${head_rev:0:10}$dirty"
cargo build --quiet --release --manifest-path "$REPO/Cargo.toml" -p terrace --bin terrace
HEAD_BIN=$BASE_DIR/terrace-head
cp "$REPO/target/release/terrace" "$HEAD_BIN"

STAMP=$(date -u +%Y-%m-%d)
HOST=$(hostname -s 2>/dev/null || hostname)
OUT=${BENCH_COMPARE_OUT:-$REPO/docs/results/$STAMP-$HOST-compare}
DOCS=${BENCH_COMPARE_DOCS-$REPO/docs/benchmarks.md}
rm -rf "$OUT"
mkdir -p "$OUT"

# bench/run.sh quick, Terrace systems only, no docs rewritten, no device probe.
export BENCH_DOCS= BENCH_RESULTS_README= BENCH_PROBE=0
: "${BENCH_TARGETS=terrace}"
: "${BENCH_SYSTEMS=terrace-pm5 terrace-pm100}"
: "${BENCH_SWEEPS=}"
: "${BENCH_PAIRS=terrace-pm10:syncappend terrace-pm100@group_migration_bytes=16M:migrate}"
export BENCH_TARGETS BENCH_SYSTEMS BENCH_SWEEPS BENCH_PAIRS
start=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
    for build in base head; do
        bin=$BASE_BIN
        [ "$build" = head ] && bin=$HEAD_BIN
        log "round $r/$ROUNDS: $build"
        BENCH_TERRACE_BIN=$bin BENCH_OUT=$OUT/$build-r$r "$REPO/bench/run.sh" quick
    done
done
log "measurements took $((SECONDS - start)) s"

python3 "$REPO/bench/compare_builds.py" "$OUT" --rounds "$ROUNDS" \
    --base "${base_rev:0:10} ($(git -C "$REPO" log -1 --format=%s "$base_rev" | cut -c1-60))" \
    --head "${head_rev:0:10}$dirty" ${DOCS:+--docs "$DOCS"}
log "done: $OUT/compare.md"
