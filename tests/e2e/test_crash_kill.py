"""Crash test (a): kill -9 the Terrace daemon at random moments of a
write/fsync/rename workload and check that nothing promised was lost.

One iteration:
  1. a child process (crash_workload.py) works in a fresh directory iter-NNNN on
     the mount and logs every durability promise (fsync'd records, O_DSYNC writes,
     renames/creates/unlinks followed by a directory fsync) to a side log on /tmp;
  2. after a random delay the daemon gets SIGKILL (a crash of the file system
     process; the kernel and the PM file in /dev/shm survive, like a process crash);
  3. the dead mount is detached with `umount -l`, and `terrace fsck POOL` must
     exit 0 on the crashed pool (mount after a crash must not need fsck);
  4. the pool is remounted (recovery) and the directories of this and the previous
     iteration are checked against their logs: every promised byte is there and
     intact, appended files are exact sequences of whole records (write() is
     atomic), interrupted renames left exactly one name.
After the last iteration the pool is unmounted cleanly, fsck'd again, remounted
and checked once more.

Two tests run this loop: one checks POSIX durability only (fsync'd data), the
other also Terrace's own guarantee that every write() is atomic (appended files
hold whole records only). Environment: CRASH_ITERATIONS (default 8 per test;
`make crash-long` runs 200), CRASH_SEED (default random, printed). On failure the crashed pool image and the logs are kept under
/var/tmp/terrace-crash-<seed>/ for debugging.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import crash_workload
import helpers

ITERATIONS = int(os.environ.get("CRASH_ITERATIONS", "8"))
WORKLOAD = Path(__file__).with_name("crash_workload.py")
POOL_SIZE = "256M"
KEEP_ITERATIONS = 2  # data of older iterations is deleted to keep the pool from filling


class CrashLoop:
    """State of one crash-test run: pool, mount point, side logs, seeds."""

    def __init__(self, pool: Path, mnt: Path, logdir: Path, seed: int, strict_prefix: bool,
                 options: str | None = None):
        self.pool, self.mnt, self.logdir, self.seed = pool, mnt, logdir, seed
        self.options = options
        self.migrated = 0  # bytes the daemon moved or copied between tiers before the kills
        self.strict_prefix = strict_prefix
        self.mount: helpers.Mount | None = None
        self.live: list[int] = []  # iterations whose directories are still checked
        self.history: list[str] = []
        self.promises = 0

    # -- helpers ----------------------------------------------------------
    def workdir(self, it: int) -> str:
        return str(self.mnt / f"iter-{it:04d}")

    def logfile(self, it: int) -> str:
        return str(self.logdir / f"iter-{it:04d}.log")

    def fail(self, it: int, what: str) -> None:
        """Keep the evidence and fail with everything needed to reproduce."""
        keep = Path(f"/var/tmp/terrace-crash-{self.seed}")
        with_evidence = ""
        try:
            keep.mkdir(parents=True, exist_ok=True)
            if self.pool.exists():
                subprocess.run(["cp", "--sparse=always", str(self.pool), str(keep / "pool.pm")], check=False)
            for f in self.logdir.iterdir():
                shutil.copy(f, keep / f.name)
            with_evidence = f"\npool image and logs kept in {keep}"
        except OSError:
            pass
        pytest.fail(f"crash iteration {it} (CRASH_SEED={self.seed}): {what}{with_evidence}\n"
                    f"history: {'; '.join(self.history[-6:])}", pytrace=False)

    def remount(self, it: int) -> None:
        try:
            self.mount = helpers.mount(self.pool, self.mnt, self.options)
        except AssertionError as e:
            self.fail(it, f"remount after the crash failed:\n{e}")

    def fsck_clean(self, it: int, when: str) -> None:
        """fsck must exit 0, and (without --repair) must not write to the pool."""
        before = helpers.sha256_file(self.pool)
        cp = helpers.fsck(self.pool)
        if cp.returncode != 0:
            self.fail(it, helpers.describe(cp, f"fsck is not clean {when}"))
        if helpers.sha256_file(self.pool) != before:
            self.fail(it, f"fsck without --repair modified the pool {when}")

    def check(self, it: int, after: str) -> None:
        """Verify every live iteration's directory against its log."""
        for old in self.live:
            events = crash_workload.read_log(self.logfile(old))
            problems = crash_workload.verify(self.workdir(old), events, strict_prefix=self.strict_prefix)
            if problems:
                shown = "\n  ".join(problems[:15])
                self.fail(it, f"after {after}, iter-{old:04d} lost promised data "
                              f"({len(problems)} problems):\n  {shown}")

    def retire_old_iterations(self) -> None:
        while len(self.live) > KEEP_ITERATIONS:
            old = self.live.pop(0)
            shutil.rmtree(self.workdir(old))

    # -- one iteration ------------------------------------------------------
    def iteration(self, it: int) -> None:
        rng = random.Random(self.seed * 100_003 + it)
        wseed = rng.randrange(1 << 30)
        delay = rng.choice([rng.uniform(0.0, 0.05), rng.uniform(0.05, 0.4), rng.uniform(0.4, 1.5)])
        self.history.append(f"iter {it}: workload seed {wseed}, kill after {delay:.3f}s")
        out = open(self.logdir / f"iter-{it:04d}.out", "wb")
        child = subprocess.Popen([sys.executable, str(WORKLOAD), self.workdir(it), self.logfile(it),
                                  str(wseed)], stdout=out, stderr=subprocess.STDOUT)
        try:
            # Wait for the work directory to exist (or the child to die), then a random delay.
            helpers.wait_until(lambda: child.poll() is not None or
                               os.path.exists(self.logfile(it)) and os.path.getsize(self.logfile(it)) > 0, 30)
            if child.poll() is not None:
                self.fail(it, f"the workload exited early ({child.returncode}): "
                              f"{(self.logdir / f'iter-{it:04d}.out').read_text()[-2000:]}")
            time.sleep(delay)
            if self.options:
                with contextlib.suppress(Exception):
                    m = self.mount.status(timeout=5)["migration"]
                    self.migrated += m["bytes_down"] + m["bytes_copied"] + m["bytes_up"]
            pid = self.mount.kill()  # SIGKILL: the crash
            self.history.append(f"killed daemon {pid}")
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            out.close()
        helpers.lazy_unmount(self.mnt)
        if helpers.is_mounted(self.mnt):
            self.fail(it, "the dead mount could not be detached")
        self.mount = None
        self.live.append(it)
        events = crash_workload.read_log(self.logfile(it))
        promises = sum(1 for e in events if e["ev"] not in ("ready", "stopped", "renaming", "unlinking",
                                                             "linking"))
        stop = next((e for e in events if e["ev"] == "stopped"), {})
        self.history.append(f"{promises} promises, stopped at {stop.get('op')}: {stop.get('errno')}")
        self.promises += promises
        self.fsck_clean(it, "on the crashed pool, before remount")
        self.remount(it)
        self.check(it, f"crash {it} and remount")
        self.retire_old_iterations()

    def finish(self) -> None:
        """Clean unmount, fsck, remount, check again."""
        it = ITERATIONS
        clean = helpers.unmount(self.mount)
        self.mount = None
        if not clean:
            self.fail(it, "`terrace umount` did not shut the daemon down cleanly")
        self.fsck_clean(it, "after a clean unmount")
        self.remount(it)
        self.check(it, "a clean unmount and remount")


def run_crash_loop(strict_prefix: bool, tiered: bool = False, options: str | None = None) -> None:
    """ITERATIONS crash iterations on one pool, then a clean unmount and checks.

    `options`: mount options of every mount (e.g. `writeback_cache`).

    `tiered`: a small PM tier plus an SSD tier file, mounted with a 10%
    migration threshold and no age limit, so migration (grouped moves, clean
    copies, eviction, extent recycling) runs during the whole workload and the
    kills land in the middle of it."""
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 31)))
    print(f"CRASH_SEED={seed} CRASH_ITERATIONS={ITERATIONS} strict_prefix={strict_prefix} tiered={tiered}")
    ssd = Path("/var/tmp") / (helpers.unique_name("crash-ssd") + ".img")
    with helpers.temp_pool_path("crash") as pool, helpers.temp_mountpoint("crash") as mnt, \
            tempfile.TemporaryDirectory(prefix=helpers.unique_name("crashlog") + "-") as logdir:
        if tiered:
            helpers.mkfs(pool, "48M", extra=["--tier", f"ssd:{ssd}:512M"])
            tier_options = os.environ.get(
                "CRASH_TIER_OPTIONS", "migration_threshold=10,migration_age_ns=0s,group_migration_bytes=1M")
            options = ",".join(o for o in (options, tier_options) if o)
        else:
            helpers.mkfs(pool, POOL_SIZE)
        loop = CrashLoop(pool, mnt, Path(logdir), seed, strict_prefix, options)
        try:
            loop.mount = helpers.mount(pool, mnt, options)
            for it in range(ITERATIONS):
                loop.iteration(it)
            loop.finish()
            print(f"{ITERATIONS} crashes survived, {loop.promises} durability promises checked, "
                  f"{loop.migrated} bytes migrated before kills")
            assert ITERATIONS == 0 or loop.promises > 0, "the workload never got to promise anything"
            assert not tiered or ITERATIONS == 0 or loop.migrated > 0, "migration never ran before a kill"
        finally:
            if loop.mount is not None:
                helpers.unmount(loop.mount)
            elif helpers.is_mounted(mnt):
                helpers.lazy_unmount(mnt)
            ssd.unlink(missing_ok=True)


@pytest.mark.slow
def test_fsynced_data_survives_daemon_kills_and_fsck_stays_clean(terrace_bin):
    """POSIX durability: everything fsync'd (or written with O_DSYNC, or renamed
    and followed by a directory fsync) survives kill -9; fsck is clean every time."""
    run_crash_loop(strict_prefix=False)


@pytest.mark.slow
def test_every_write_is_atomic_across_daemon_kills(terrace_bin):
    """Terrace's stronger guarantee (docs/design.md section 7): every write() is
    atomic, so after kill -9 each appended file is an exact sequence of whole
    records - no torn record at the end, even one that was never fsync'd."""
    run_crash_loop(strict_prefix=True)


@pytest.mark.slow
def test_fsynced_data_survives_daemon_kills_while_migration_runs(terrace_bin):
    """The same loop on a tiered pool whose migration runs all the time: kills
    land during grouped moves to the SSD tier, clean-copy flushes, evictions
    and extent recycling; nothing promised is lost, every write stays whole,
    and fsck is clean after every crash."""
    run_crash_loop(strict_prefix=True, tiered=True)


def test_fsynced_file_survives_a_kill_right_after_it_is_written(terrace_bin, pool, mountpoint):
    """kill -9 just after an fsync: fsck is clean and the file is there after remount."""
    m = helpers.mount(pool, mountpoint)
    try:
        with open(os.path.join(mountpoint, "f"), "wb") as f:
            f.write(b"durable")
            f.flush()
            os.fsync(f.fileno())
        m.kill()
    finally:
        helpers.lazy_unmount(mountpoint)
    cp = helpers.fsck(pool)
    assert cp.returncode == 0, helpers.describe(cp, "fsck after kill -9")
    with helpers.mounted_pool(pool, mountpoint):
        with open(os.path.join(mountpoint, "f"), "rb") as f:
            assert f.read() == b"durable"


def test_on_a_pm_only_pool_fsync_needs_no_request_and_unsynced_writes_survive_a_kill(
        terrace_bin, pool, mountpoint):
    """On a PM-only pool every write() is durable when it returns (design.md
    section 7), so fsync has nothing to do: the daemon answers the first one
    ENOSYS and the kernel completes the rest itself (one round trip saved per
    fsync). What makes that safe is checked here: after kill -9, every record
    whose write() returned is there, fsync'd or not, and dirty pages of a shared
    mapping still reach the pool through msync (the kernel writes them back
    before it skips the fsync request)."""
    import mmap
    m = helpers.mount(pool, mountpoint)
    try:
        path = os.path.join(mountpoint, "journal")
        records = [b"record %06d " % i + bytes([65 + i % 26]) * 50 + b"\n" for i in range(400)]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for i, r in enumerate(records):
                assert os.write(fd, r) == len(r)
                if i < 100:
                    os.fsync(fd)
                elif i < 200:
                    os.fdatasync(fd)
        finally:
            os.close(fd)
        mpath = os.path.join(mountpoint, "mapped")
        with open(mpath, "wb") as f:
            f.truncate(1 << 16)
        with open(mpath, "r+b") as f, mmap.mmap(f.fileno(), 1 << 16) as mm:
            mm[4096:4096 + 11] = b"mmap stores"
            mm.flush()
        st = m.status()
        assert st["fsync_in_kernel"] is True, st
        assert st["fsyncs"] <= 2, f"{st['fsyncs']} fsync requests reached the daemon after the first"
        m.kill()
    finally:
        helpers.lazy_unmount(mountpoint)
    cp = helpers.fsck(pool)
    assert cp.returncode == 0, helpers.describe(cp, "fsck after kill -9")
    with helpers.mounted_pool(pool, mountpoint):
        with open(os.path.join(mountpoint, "journal"), "rb") as f:
            assert f.read() == b"".join(records)
        with open(os.path.join(mountpoint, "mapped"), "rb") as f:
            data = f.read()
        assert data[4096:4096 + 11] == b"mmap stores" and len(data) == 1 << 16


_ALIGNED_WRITER = r"""
import os, random, sys
path, seed = sys.argv[1], int(sys.argv[2])
rnd = random.Random(seed)
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
k = 0
while True:
    pages = rnd.choice([1, 2, 3, 16, 64, 255, 256])
    rec = b"".join(k.to_bytes(8, "little") + p.to_bytes(8, "little") + bytes([k & 0xFF]) * 4080
                   for p in range(pages))
    try:
        os.write(fd, rec)
    except OSError:
        break
    k += 1
    if k == 1:
        print("writing", flush=True)
"""


@pytest.mark.pool(size="1G")
def test_page_aligned_writes_through_a_read_write_descriptor_stay_whole_across_kills(
        terrace_bin, pool, mountpoint):
    """Read-write opens go through the kernel's page cache (design.md 5b,
    5g0): a write() that starts on a page boundary is one request up to
    1 MiB, so after kill -9 the file is a sequence of whole writes, never
    part of one (ext4 does not promise even that)."""
    for it in range(4):
        seed = 1000 + it
        path = os.path.join(mountpoint, f"aligned{it}")
        m = helpers.mount(pool, mountpoint)
        try:
            w = subprocess.Popen([sys.executable, "-c", _ALIGNED_WRITER, path, str(seed)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert w.stdout.readline().strip() == "writing"
            time.sleep(0.05 + 0.05 * it)
            m.kill()
            w.wait(timeout=60)
        finally:
            helpers.lazy_unmount(mountpoint)
        cp = helpers.fsck(pool)
        assert cp.returncode == 0, helpers.describe(cp, f"fsck after kill -9 ({it})")
        with helpers.mounted_pool(pool, mountpoint):
            with open(path, "rb") as f:
                data = f.read()
            os.unlink(path)
        rnd = random.Random(seed)
        off = k = 0
        while off < len(data):
            pages = rnd.choice([1, 2, 3, 16, 64, 255, 256])
            rec = b"".join(k.to_bytes(8, "little") + p.to_bytes(8, "little") + bytes([k & 0xFF]) * 4080
                           for p in range(pages))
            got = data[off:off + len(rec)]
            assert got == rec, (f"run {it}: write {k} ({pages} pages at {off}) is "
                                f"{'torn' if len(got) < len(rec) else 'wrong'}: {len(got)} of {len(rec)} bytes")
            off += len(rec)
            k += 1
        assert k > 0, f"run {it}: nothing was written before the kill"
