# Terrace: build, demo, tests and benchmarks.
#
#   make demo         build and mount a default pool in ./terrace-demo/mnt, print its status
#   make test         everything CI runs: fmt, clippy, unit/model tests, FUSE end-to-end tests, short xfstests list
#   make crash-long   the long kill -9 crash loop (200 iterations)
#   make faults       the long fault campaign: EIO/ENOSPC/lost syncs under random operations, a tier image filled, truncated, kill -9 during scrub and repair -> docs/reliability.md
#   make xfstests     xfstests on Terrace mounts (XFSTESTS_CONFIG=pm|tiered, XFSTESTS_ARGS="-g quick") -> docs/results/
#   make xfstests-short  the xfstests that guard fixes (tests/xfstests/short-list; part of `make test`)
#   make bench        full benchmark (3 runs per job, medians; about two hours) -> docs/results/, docs/benchmarks.md
#   make bench-quick  short benchmark, a subset of every workload (< 10 minutes)
#   make bench-small-files  small-file capacity: 1,000,000 files on a pool with PM at 1%, vs ext4 (~15 minutes)
#   make bench-setup  install the benchmark's tools (fio, xfsprogs, mergerfs, rocksdb-tools, matplotlib, ...)
#   make clean-mounts lazily unmount every stale Terrace test/demo/bench mount
#   make install      terrace into $(PREFIX)/bin (default /usr/local), the mount(8) helper link /sbin/mount.fuse.terrace, the systemd unit terrace@.service

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

CARGO    ?= cargo
PYTHON   ?= python3
TERRACE  := $(CURDIR)/target/release/terrace

DEMO_POOL ?= /dev/shm/terrace-demo.pm
DEMO_SIZE ?= 512M
DEMO_DIR  := $(CURDIR)/terrace-demo
DEMO_MNT  := $(DEMO_DIR)/mnt
DEMO_SSD  ?= $(DEMO_DIR)/ssd.img
DEMO_SSD_SIZE ?= 2G

CRASH_ITERATIONS ?= 200

.PHONY: all install demo test crash-long xfstests xfstests-short bench bench-quick bench-small-files bench-setup clean-mounts setup build fmt-check clippy unit e2e

all: build

# `mount -t fuse.terrace` and fstab (README "mount(8) and /etc/fstab"): the
# binary, and /sbin/mount.fuse.terrace linked to it unless that name is taken
# by another file (without the link, mount(8) goes through mount.fuse3, which
# finds terrace in PATH).
PREFIX ?= /usr/local
install: build
	install -D -m 0755 "$(TERRACE)" "$(DESTDIR)$(PREFIX)/bin/terrace"
	@helper="$(DESTDIR)/sbin/mount.fuse.terrace"; \
	if [ ! -e "$$helper" ] || [ -L "$$helper" ]; then \
		ln -sfn "$(PREFIX)/bin/terrace" "$$helper" && echo "linked $$helper -> $(PREFIX)/bin/terrace"; \
	else \
		echo "kept $$helper (not a link; mount(8) runs it for fuse.terrace)"; \
	fi
	install -D -m 0644 dist/systemd/terrace@.service "$(DESTDIR)/etc/systemd/system/terrace@.service"
	sed -i 's#/usr/local/bin/terrace#$(PREFIX)/bin/terrace#g' "$(DESTDIR)/etc/systemd/system/terrace@.service"
	install -d "$(DESTDIR)/etc/terrace"

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace --all-targets

# ---------------------------------------------------------------- quick start
demo: build
	@scripts/demo.sh "$(TERRACE)" "$(DEMO_POOL)" "$(DEMO_SIZE)" "$(DEMO_MNT)" "$(DEMO_SSD)" "$(DEMO_SSD_SIZE)"

# ---------------------------------------------------------------------- tests
fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --release

# The end-to-end tests drive target/release/terrace and the passthrough example.
e2e: build
	$(PYTHON) -m pytest -q tests/e2e

test: setup fmt-check clippy unit e2e xfstests-short

crash-long: build
	CRASH_ITERATIONS=$(CRASH_ITERATIONS) $(PYTHON) -m pytest -q tests/e2e/test_crash_kill.py

# The long fault campaign (issue 20; the short form runs in `make unit` and
# `make e2e`): the core campaign with FAULT_ROUNDS rounds per base seed (and
# FAULT_THREAD_ROUNDS with the background threads), then the e2e fault tests;
# the counts (JSON lines) go to FAULT_REPORT and their totals are printed as
# the table of docs/reliability.md. Any lost or wrong byte or panic fails it.
FAULT_SEEDS         ?= 1000000 2000000 3000000 4000000
FAULT_ROUNDS        ?= 500
FAULT_THREAD_ROUNDS ?= 100
FAULT_REPORT        ?= $(CURDIR)/target/faults-report.jsonl
.PHONY: faults
faults: build
	rm -f "$(FAULT_REPORT)"
	for seed in $(FAULT_SEEDS); do \
		TERRACE_FAULT_SEED=$$seed TERRACE_FAULT_ROUNDS=$(FAULT_ROUNDS) \
		TERRACE_FAULT_THREAD_ROUNDS=$(FAULT_THREAD_ROUNDS) TERRACE_FAULT_REPORT="$(FAULT_REPORT)" \
			$(CARGO) test --release -p terrace-core --test fault_campaign -- --nocapture --test-threads 2; \
	done
	$(PYTHON) -m pytest -q -s tests/e2e/test_faults.py
	$(PYTHON) scripts/fault_summary.py "$(FAULT_REPORT)"

# Not part of `make test`; options: tests/xfstests/run.sh --help.
XFSTESTS_CONFIG ?= pm
XFSTESTS_ARGS   ?= -g quick
xfstests: build
	tests/xfstests/run.sh --config $(XFSTESTS_CONFIG) --terrace "$(TERRACE)" $(XFSTESTS_ARGS)

# Part of `make test`: the tests of tests/xfstests/short-list on a PM-only
# pool; the first run on a machine builds xfstests (a few minutes), later
# runs reuse the build in /var/tmp/terrace-xfstests. Fails on any failure
# not in tests/xfstests/expected-failures.
xfstests-short: build
	tests/xfstests/run.sh --config pm --terrace "$(TERRACE)" --no-report \
		$$(sed -e 's/#.*//' tests/xfstests/short-list)

# ----------------------------------------------------------------- benchmarks
# bench/run.sh sets up every system (loop devices, mkfs, mounts) and tears it all
# down at exit; knobs are environment variables (see `bench/run.sh help`).
bench-setup:
	@bench/setup.sh

bench: build bench-setup
	bench/run.sh full

bench-quick: build bench-setup
	bench/run.sh quick

SMALL_FILES ?= 1000000
bench-small-files: build
	$(PYTHON) bench/small_files.py --files $(SMALL_FILES)

# ------------------------------------------------------------------ cleaning
clean-mounts:
	@scripts/clean-mounts.sh "$(DEMO_DIR)"
