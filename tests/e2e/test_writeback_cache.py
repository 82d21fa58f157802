"""The kernel's writeback cache, opt-in (`-o writeback_cache`, issue 16;
docs/design.md 5g0 and 7).

With the option, writes of every open without O_DIRECT land in the kernel's
page cache and reach the daemon later — at fsync, at close, for O_SYNC and
O_DSYNC writes before they return, or at the kernel's own write-back — and
the kernel owns the size and times of the files it caches. What must still
hold, checked here:
- data, sizes and mtimes are right through another descriptor and another
  process at once, and after a clean remount;
- `stat` right after writes shows the new size, before any of them reached
  the daemon;
- fsync'd and O_DSYNC data survives kill -9 of the daemon, and the crashed
  pool is fsck-clean (what was only in the kernel's pages is lost, as a
  machine crash loses it on ext4);
- O_DIRECT and shared mappings stay coherent with cached writes;
- without the option nothing changes: every write reaches the daemon when
  it is made.

Every test first checks that the writeback cache is really on (writes do not
reach the daemon until fsync), so none passes against a build that accepts
the option and ignores it.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, terrace

OPT = "writeback_cache"
MiB = 1 << 20


def pattern(seed: int, n: int) -> bytes:
    return bytes((i * 31 + seed) & 0xFF for i in range(256)) * (n // 256) + bytes(n % 256)


def daemon_writes(m: helpers.Mount) -> int:
    return m.status()["writes"]


def other_process_stat_and_read(path: Path) -> tuple[int, int, bytes]:
    code = ("import os, sys; p = sys.argv[1]; st = os.stat(p); "
            "sys.stdout.buffer.write(b'%d %d\\n' % (st.st_size, st.st_mtime_ns)); "
            "sys.stdout.buffer.write(open(p, 'rb').read())")
    out = subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                         capture_output=True, timeout=60).stdout
    head, data = out.split(b"\n", 1)
    size, mtime = (int(x) for x in head.split())
    return size, mtime, data


def assert_writes_are_cached(m: helpers.Mount, path: Path, n: int = 64) -> None:
    """`n` small writes through a read-write descriptor do not reach the
    daemon until fsync: the kernel's writeback cache is on."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        before = daemon_writes(m)
        for i in range(n):
            os.pwrite(fd, b"w" * 100, i * 100)
        reached = daemon_writes(m) - before
        assert reached < n // 4, f"{reached} of {n} cached writes reached the daemon before fsync"
        os.fsync(fd)
        assert daemon_writes(m) > before, "fsync sent none of the cached writes to the daemon"
    finally:
        os.close(fd)


@pytest.fixture
def wb_pool():
    with temp_pool_path("wb") as pool, temp_mountpoint("wb") as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:128M")
        yield pool, mnt


def test_without_the_option_every_write_reaches_the_daemon_when_it_is_made(wb_pool):
    """Default and `no_writeback_cache`: unchanged behaviour, each write()
    is a request to the daemon before it returns, through read-write and
    write-only descriptors alike, and a 1 MiB write-only write() is one."""
    pool, mnt = wb_pool
    for options in (None, "no_writeback_cache"):
        with mounted_pool(pool, mnt, options) as m:
            for flags in (os.O_RDWR, os.O_WRONLY):
                fd = os.open(mnt / "f", flags | os.O_CREAT, 0o644)
                try:
                    before = daemon_writes(m)
                    for i in range(50):
                        os.pwrite(fd, b"x" * 100, i * 100)
                    assert daemon_writes(m) - before >= 50, (options, flags)
                finally:
                    os.close(fd)
            fd = os.open(mnt / "big", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                buf = mmap.mmap(-1, MiB)
                buf.write(pattern(5, MiB))
                before = daemon_writes(m)
                assert os.write(fd, buf) == MiB
                assert daemon_writes(m) - before == 1, "a 1 MiB write-only write() is one request"
            finally:
                os.close(fd)


def test_a_writer_that_never_syncs_gets_enospc_at_write_when_the_pool_is_full():
    """A writer on a full pool that never calls fsync (`dd if=/dev/zero
    of=F bs=1M`, xfstests generic/015) gets ENOSPC from a write() soon after
    the pool is full, as on ext4, instead of writing on for ever while the
    kernel drops every page it cannot write back (before the fix the file
    reached 340 GB on a 255 MiB pool). What the kernel accepted before the
    refusal is reported at close; after a delete the pool takes writes
    again, and it is fsck-clean."""
    with helpers.temp_ssd_image("wbfull") as ssd, temp_pool_path("wbfull") as pool, \
            temp_mountpoint("wbfull") as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt, OPT) as m:
            assert_writes_are_cached(m, mnt / "probe")
            capacity = os.statvfs(mnt).f_blocks * os.statvfs(mnt).f_frsize
            buf = mmap.mmap(-1, MiB)
            written = 0
            fd = os.open(mnt / "fill", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                with pytest.raises(OSError) as err:
                    # At most twice the pool: the kernel may accept its dirty
                    # limit's worth beyond the room before a refusal.
                    while written < 2 * capacity:
                        written += os.write(fd, buf)
                assert err.value.errno == errno.ENOSPC, err.value
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
            assert written > capacity // 2, f"ENOSPC after {written} of {capacity} bytes"
            os.unlink(mnt / "fill")
            fd = os.open(mnt / "again", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                for _ in range(8):
                    assert os.write(fd, buf) == MiB
                os.fsync(fd)
            finally:
                os.close(fd)
        helpers.assert_fsck_clean(pool, "after the pool filled under the writeback cache")


def test_files_written_on_a_nearly_full_pool_get_enospc_at_write_and_keep_what_it_accepted():
    """xfstests generic/027's loop under this option: on a full pool with
    2 MiB freed, writers create 1 KiB files until a write fails. With every
    open cached, each new file's write() went into the kernel's pages and
    its write-back was refused: the write() succeeded, the data was lost
    (reported only at close, which `xfs_io` ignores), and the loop ran on
    until the inode table was full. A writable open made while the pool has
    little room now writes through (direct I/O): write() fails with ENOSPC
    as on ext4, and every write() that succeeded is in the pool, across a
    remount."""
    with helpers.temp_ssd_image("wbnear") as ssd, temp_pool_path("wbnear") as pool, \
            temp_mountpoint("wbnear") as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        accepted = {}
        with mounted_pool(pool, mnt, OPT):
            (mnt / "reserve").write_bytes(b"r" * (2 * MiB))
            buf = mmap.mmap(-1, MiB)
            fd = os.open(mnt / "big", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, buf)
                with contextlib.suppress(OSError):
                    os.fsync(fd)
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
            os.unlink(mnt / "reserve")
            (mnt / "d").mkdir()
            refused = None
            for i in range(20_000):
                data = pattern(i, 1024)
                try:
                    fd = os.open(mnt / "d" / f"file_{i}", os.O_WRONLY | os.O_CREAT, 0o644)
                except OSError as e:
                    refused = ("open", e.errno)
                    break
                try:
                    os.write(fd, data)
                except OSError as e:
                    refused = ("write", e.errno)
                    break
                finally:
                    with contextlib.suppress(OSError):
                        os.close(fd)  # as xfs_io: an error at close goes unseen
                accepted[i] = data
            assert refused == ("write", errno.ENOSPC), \
                f"after {len(accepted)} files: {refused}"
            assert len(accepted) < 2048, f"{len(accepted)} files of 1 KiB accepted in 2 MiB"
        with mounted_pool(pool, mnt):
            lost = [i for i, data in accepted.items()
                    if (mnt / "d" / f"file_{i}").read_bytes() != data]
            assert not lost, f"{len(lost)} of {len(accepted)} accepted writes lost, e.g. {lost[:5]}"
        helpers.assert_fsck_clean(pool, "after files written on a nearly full pool")


def test_deleted_files_the_kernel_evicts_leave_no_pm_behind():
    """Under this option the kernel sends, for each file it evicts after an
    unlink, a SETATTR of the times it kept. Each one committed to the
    deleted file's log: a fresh PM page that the FORGET then dropped with
    the slot, leaked until the next mount. On xfstests generic/416's full
    pool (4 KiB files until ENOSPC, remount, delete the odd half) PM ran out
    and 8,713 of 14,266 deletes failed with ENOSPC. Now PM's free room after
    the deletes is what a remount, which rebuilds it from the live files,
    finds: 3,000 deletes leaked 766 KB before."""
    n = 3000
    with helpers.temp_ssd_image("wbleak") as ssd, temp_pool_path("wbleak") as pool, \
            temp_mountpoint("wbleak") as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:16M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt, OPT):
            (mnt / "d").mkdir()
            for i in range(n):
                (mnt / "d" / f"f{i}").write_bytes(pattern(i, 4096))
        with mounted_pool(pool, mnt):
            # Their data off PM, so the deletes free no data block there.
            terrace("migrate", "-q", mnt)
        with mounted_pool(pool, mnt, OPT) as m:
            for i in range(n):
                os.unlink(mnt / "d" / f"f{i}")
            # The kernel evicts the deleted inodes (the SETATTR) and forgets
            # them (the daemon drops their slots).
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2")
            free_after = m.status()["space"]["pm_free_bytes"]
        with mounted_pool(pool, mnt) as m:
            free_remounted = m.status()["space"]["pm_free_bytes"]
        assert free_after == free_remounted, \
            f"{free_remounted - free_after} bytes of PM held by {n} deleted files until a remount"
        helpers.assert_fsck_clean(pool, "after deleting files the kernel held")


def test_a_new_files_times_read_the_same_after_a_remount(wb_pool):
    """Under this option the kernel keeps a file's mtime and ctime and sends
    them when it changes them. A write that falls in the tick the file was
    created in changes nothing in the kernel's view, so nothing is sent;
    the daemon stamped its own clock at the write-back, and the times read
    after a remount were later than those read before (xfstests generic/003
    under `-o writeback_cache`). Write-backs now leave the times alone."""
    pool, mnt = wb_pool
    before = {}
    with mounted_pool(pool, mnt, OPT):
        for i in range(20):
            (mnt / f"f{i}").write_text("aaa\n")
            st = os.stat(mnt / f"f{i}")
            before[i] = (st.st_mtime_ns, st.st_ctime_ns)
    with mounted_pool(pool, mnt, OPT):
        after = {i: (os.stat(mnt / f"f{i}").st_mtime_ns, os.stat(mnt / f"f{i}").st_ctime_ns)
                 for i in before}
    changed = {i: (before[i], after[i]) for i in before if before[i] != after[i]}
    assert not changed, f"{len(changed)} of {len(before)} files' (mtime, ctime) changed: {changed}"


def test_cached_writes_reach_the_daemon_at_fsync_close_and_o_dsync(wb_pool):
    pool, mnt = wb_pool
    with mounted_pool(pool, mnt, OPT) as m:
        assert_writes_are_cached(m, mnt / "probe")
        # Write-only opens are cached too.
        fd = os.open(mnt / "wo", os.O_WRONLY | os.O_CREAT, 0o644)
        before = daemon_writes(m)
        for i in range(100):
            os.write(fd, b"%05d\n" % i)
        assert daemon_writes(m) - before < 25
        os.close(fd)  # close writes the file's dirty pages back
        assert daemon_writes(m) > before, "close() did not write the cached pages back"
        assert (mnt / "wo").read_bytes() == b"".join(b"%05d\n" % i for i in range(100))
        # O_DSYNC: each write reaches the daemon before it returns.
        fd = os.open(mnt / "ds", os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
        try:
            for i in range(10):
                before = daemon_writes(m)
                os.write(fd, b"d" * 4096)
                assert daemon_writes(m) > before, f"O_DSYNC write {i} returned before it reached the daemon"
        finally:
            os.close(fd)


def test_data_sizes_and_mtimes_are_right_everywhere_and_after_remount(wb_pool):
    pool, mnt = wb_pool
    path = mnt / "f"
    with mounted_pool(pool, mnt, OPT) as m:
        assert_writes_are_cached(m, mnt / "probe")
        model = bytearray()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        reader = os.open(path, os.O_RDONLY)
        try:
            before = daemon_writes(m)
            # Appends, an overwrite inside, an extending write past a gap,
            # a truncate: the kernel keeps the size itself.
            for i in range(300):
                rec = pattern(i, 1000)
                os.write(fd, rec)
                model += rec
            os.pwrite(fd, b"OVERWRITE", 5000)
            model[5000:5009] = b"OVERWRITE"
            os.pwrite(fd, b"far", 2 * MiB)
            model += bytes(2 * MiB - len(model)) + b"far"
            st = os.stat(path)
            assert daemon_writes(m) - before < 30, "the writes were not cached"
            assert st.st_size == len(model), "stat right after the writes missed the new size"
            os.ftruncate(fd, 1_500_000)
            del model[1_500_000:]
            assert os.fstat(fd).st_size == len(model)
            assert os.pread(reader, len(model) + 10, 0) == model, "another descriptor saw other data"
            st = os.stat(path)
            size, mtime, data = other_process_stat_and_read(path)
            assert (size, data) == (len(model), bytes(model)), "another process saw other data"
            assert mtime == st.st_mtime_ns, "another process saw another mtime"
        finally:
            os.close(reader)
            os.close(fd)
        st = os.stat(path)
    with mounted_pool(pool, mnt, OPT):
        after = os.stat(path)
        assert path.read_bytes() == model
        assert after.st_size == len(model)
        assert after.st_mtime_ns == st.st_mtime_ns, "the kernel's mtime was not kept across a remount"
    with mounted_pool(pool, mnt):
        assert path.read_bytes() == model, "without the option the pool holds other data"


def test_fsynced_and_o_dsync_data_survive_kill_9_and_the_pool_is_fsck_clean(wb_pool):
    pool, mnt = wb_pool
    synced = pattern(7, 300_000)
    dsync = pattern(8, 5 * 4096)
    m = helpers.mount(pool, mnt, OPT)
    fds = []
    try:
        assert_writes_are_cached(m, mnt / "probe")
        f = os.open(mnt / "synced", os.O_WRONLY | os.O_CREAT, 0o644)
        fds.append(f)
        for off in range(0, len(synced), 1000):
            os.write(f, synced[off:off + 1000])
        os.fsync(f)
        d = os.open(mnt / "dsync", os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
        fds.append(d)
        for off in range(0, len(dsync), 4096):
            os.write(d, dsync[off:off + 4096])
        # Unsynced writes to a file still open: these may be lost.
        os.write(f, b"unsynced tail")
        m.kill()
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):  # the daemon is gone: close cannot write back
                os.close(fd)
        helpers.lazy_unmount(mnt)
    helpers.assert_fsck_clean(pool, "after kill -9 with the writeback cache")
    with mounted_pool(pool, mnt, OPT):
        got = (mnt / "synced").read_bytes()
        assert got[:len(synced)] == synced, "fsync'd data was lost"
        assert got[len(synced):] in (b"", b"unsynced tail"), "the unsynced tail is torn or garbage"
        assert (mnt / "dsync").read_bytes() == dsync, "O_DSYNC data was lost"
    helpers.assert_fsck_clean(pool, "after the remount")


def test_fsync_after_the_daemon_died_fails_instead_of_promising_lost_data(wb_pool):
    """The kernel drops write-backs to a dead connection without an error,
    so only the FSYNC request's failure tells the application that its data
    never reached the pool: under the writeback cache fsync must reach the
    daemon even on a PM-only pool (where it is otherwise answered ENOSYS
    once and completed in the kernel). Before that, fsync and O_DSYNC
    writes after a kill -9 returned success for data that was gone (the
    kill -9 loop found records of O_DSYNC writes missing)."""
    pool, mnt = wb_pool
    m = helpers.mount(pool, mnt, OPT)
    fds = []
    try:
        assert_writes_are_cached(m, mnt / "probe")  # includes a first fsync
        f = os.open(mnt / "f", os.O_WRONLY | os.O_CREAT, 0o644)
        fds.append(f)
        os.write(f, b"synced")
        os.fsync(f)
        d = os.open(mnt / "d", os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
        fds.append(d)
        os.write(d, b"dsync")
        m.kill()
        os.write(f, b" lost")  # lands in the kernel's pages: nothing says it is lost yet
        with pytest.raises(OSError):
            os.fsync(f)
        with pytest.raises(OSError):
            os.write(d, b" lost")
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        helpers.lazy_unmount(mnt)
    helpers.assert_fsck_clean(pool, "after kill -9 with the writeback cache")
    with mounted_pool(pool, mnt, OPT):
        assert (mnt / "f").read_bytes() == b"synced"
        assert (mnt / "d").read_bytes() == b"dsync"


def test_o_direct_and_mmap_stay_coherent_with_cached_writes(wb_pool):
    pool, mnt = wb_pool
    path = mnt / "f"
    size = 256 * 1024
    with mounted_pool(pool, mnt, OPT) as m:
        assert_writes_are_cached(m, mnt / "probe")
        model = bytearray(pattern(1, size))
        path.write_bytes(model)
        buffered = os.open(path, os.O_RDWR)
        direct = os.open(path, os.O_RDWR | os.O_DIRECT)
        buf = mmap.mmap(-1, 8192)
        try:
            assert os.pread(buffered, size, 0) == model  # cached
            # A cached (dirty) write is seen by an O_DIRECT read.
            os.pwrite(buffered, b"B" * 5000, 10_000)
            model[10_000:15_000] = b"B" * 5000
            n = os.preadv(direct, [buf], 8192)
            assert n == 8192 and buf[:] == model[8192:16384], "O_DIRECT read missed a cached write"
            # An O_DIRECT write is seen by the cached descriptor.
            buf[:] = b"D" * 8192
            assert os.pwritev(direct, [buf], 65536) == 8192
            model[65536:65536 + 8192] = b"D" * 8192
            assert os.pread(buffered, size, 0) == model, "a cached reader missed an O_DIRECT write"
            # Shared mapping and write() of one file agree both ways.
            with mmap.mmap(buffered, size) as mm:
                mm[100_000:100_005] = b"mmap!"
                model[100_000:100_005] = b"mmap!"
                assert os.pread(buffered, size, 0) == model, "read() missed an mmap store"
                os.pwrite(buffered, b"write", 120_000)
                model[120_000:120_005] = b"write"
                assert mm[120_000:120_005] == b"write", "the mapping missed a write()"
                mm.flush()
            n = os.preadv(direct, [buf], 98304)
            assert buf[:] == model[98304:98304 + 8192], "O_DIRECT read missed an mmap store"
            assert path.read_bytes() == model
        finally:
            buf.close()
            os.close(direct)
            os.close(buffered)
    with mounted_pool(pool, mnt, OPT):
        assert path.read_bytes() == model


@pytest.mark.slow
def test_fsynced_data_survives_daemon_kills_with_the_writeback_cache(terrace_bin):
    """The kill -9 loop of test_crash_kill.py with the writeback cache: every
    fsync'd or O_DSYNC record, durable create, rename and unlink survives,
    fsck is clean after every crash (records never fsync'd may be lost or
    cut, as on ext4: the loop checks the POSIX promises only)."""
    import test_crash_kill
    test_crash_kill.run_crash_loop(strict_prefix=False, options=OPT)
