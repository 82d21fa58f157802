"""The kernel's page cache serves reads of files opened for reading only
(issue 16, step 1), and stays coherent with every change made through the
mount: a reader holding cached pages sees a write, truncate, hole punch or
mmap store made through another descriptor or process as soon as that call
returns; migration between tiers changes nothing it sees; and a re-read of
a cached file does not reach the daemon.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, terrace

MiB = 1 << 20
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2

libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def punch(fd: int, off: int, length: int) -> None:
    if libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def pattern(seed: int, n: int) -> bytes:
    return bytes((i * 31 + seed) & 0xFF for i in range(256)) * (n // 256)


def read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    out = bytearray()
    off = 0
    while off < size:
        b = os.pread(fd, 128 << 10, off)
        if not b:
            break
        out += b
        off += len(b)
    return bytes(out)


def other_process_reads(path: Path) -> bytes:
    code = "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())"
    return subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                          capture_output=True, timeout=60).stdout


def daemon_reads(m: helpers.Mount) -> int:
    return m.status()["reads"]


def test_a_cached_reader_sees_every_change_made_through_another_descriptor_at_once():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt):
            path = mnt / "f"
            model = bytearray(pattern(1, 2 * MiB))
            path.write_bytes(model)
            reader = os.open(path, os.O_RDONLY)
            writer = os.open(path, os.O_RDWR)
            try:
                assert read_all(reader) == model  # now cached in the kernel

                new = pattern(2, 4096)
                os.pwrite(writer, new, 12288)
                model[12288:12288 + 4096] = new
                assert read_all(reader) == model, "a cached reader missed a pwrite"
                assert other_process_reads(path) == model

                punch(writer, 65536, 3 * 4096)
                model[65536:65536 + 3 * 4096] = bytes(3 * 4096)
                assert read_all(reader) == model, "a cached reader missed a hole punch"

                with mmap.mmap(writer, 0) as mm:
                    mm[200_000:200_005] = b"mmap!"
                    mm.flush()
                model[200_000:200_005] = b"mmap!"
                assert read_all(reader) == model, "a cached reader missed an mmap store"

                os.ftruncate(writer, MiB + 100)
                del model[MiB + 100:]
                assert read_all(reader) == model, "a cached reader missed a truncate"

                os.pwrite(writer, b"tail", MiB + 100)
                model += b"tail"
                assert read_all(reader) == model, "a cached reader missed an extending write"
                assert other_process_reads(path) == model

                # O_DIRECT through a read-write open (the kernel drops the
                # range's cached pages itself), opened so or set by fcntl.
                page = mmap.mmap(-1, 4096)
                page.write(pattern(3, 4096))
                direct = os.open(path, os.O_RDWR | os.O_DIRECT)
                try:
                    os.pwrite(direct, page, 8192)
                finally:
                    os.close(direct)
                model[8192:8192 + 4096] = pattern(3, 4096)
                assert read_all(reader) == model, "a cached reader missed an O_DIRECT write"
                fl = fcntl.fcntl(writer, fcntl.F_GETFL)
                fcntl.fcntl(writer, fcntl.F_SETFL, fl | os.O_DIRECT)
                page.seek(0)
                page.write(pattern(4, 4096))
                os.pwrite(writer, page, 16384)
                fcntl.fcntl(writer, fcntl.F_SETFL, fl)
                model[16384:16384 + 4096] = pattern(4, 4096)
                assert read_all(reader) == model, "a cached reader missed a write after F_SETFL O_DIRECT"
                assert other_process_reads(path) == model
            finally:
                os.close(writer)
                os.close(reader)
            # Closed and reopened: a change made while no reader was open is
            # seen by the next reader (its open drops the stale pages).
            r = os.open(path, os.O_RDONLY)
            assert read_all(r) == model
            os.close(r)
            with open(path, "r+b") as w:
                w.seek(4096)
                w.write(b"X" * 100)
            model[4096:4196] = b"X" * 100
            r = os.open(path, os.O_RDONLY)
            try:
                assert read_all(r) == model, "a reopened reader saw stale cached pages"
            finally:
                os.close(r)
        with mounted_pool(pool, mnt):
            assert (mnt / "f").read_bytes() == model


def test_rereads_of_a_cached_file_do_not_reach_the_daemon():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt) as m:
            path = mnt / "hot"
            data = pattern(3, 4 * MiB)
            path.write_bytes(data)
            fd = os.open(path, os.O_RDONLY)
            try:
                assert read_all(fd) == data
                before = daemon_reads(m)
                for _ in range(5):
                    assert read_all(fd) == data
                    for off in range(0, len(data), 64 << 10):
                        assert os.pread(fd, 4096, off) == data[off:off + 4096]
                after = daemon_reads(m)
            finally:
                os.close(fd)
            assert after == before, f"{after - before} reads of a cached file reached the daemon"
            # A new read-only open of the unchanged file keeps the pages.
            fd = os.open(path, os.O_RDONLY)
            try:
                before = daemon_reads(m)
                assert read_all(fd) == data
                assert daemon_reads(m) == before, "reopening an unchanged file dropped its pages"
            finally:
                os.close(fd)


def test_a_read_write_open_of_a_file_changed_since_it_was_read_keeps_its_pages():
    """A database opens its files read-write, changes them, and opens them
    again (another connection, another process). Under relatime each such
    open is due to update the access time; it takes it at the open and keeps
    the kernel's pages, so the reads that follow do not reach the daemon.
    (Before, a read-write open due to update atime dropped every page of
    the file: PostgreSQL's `pgbench -i` sent 30,000 reads of pages it had
    just written.)"""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt) as m:
            path = mnt / "table"
            data = bytearray(pattern(5, 4 * MiB))
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            try:
                os.write(fd, data)
                assert read_all(fd) == data
            finally:
                os.close(fd)
            for round_no in range(3):
                # Another "connection" changes a page through its own
                # read-write open: the change passes through the kernel's
                # pages, which stay valid.
                off = (round_no * 97 + 13) * 4096
                data[off:off + 4096] = pattern(10 + round_no, 4096)
                fd = os.open(path, os.O_RDWR)
                try:
                    os.pwrite(fd, data[off:off + 4096], off)
                finally:
                    os.close(fd)
                atime = os.stat(path).st_atime_ns
                before = daemon_reads(m)
                fd = os.open(path, os.O_RDWR)
                try:
                    assert read_all(fd) == data
                finally:
                    os.close(fd)
                assert daemon_reads(m) == before, \
                    f"round {round_no}: {daemon_reads(m) - before} reads reached the daemon"
                assert os.stat(path).st_atime_ns > atime, "the access time was not updated"
                assert other_process_reads(path) == data


def test_migration_between_tiers_changes_nothing_a_cached_reader_sees():
    with temp_pool_path() as pool, helpers.temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:32M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt):
            path = mnt / "m"
            model = bytearray(pattern(4, 8 * MiB))
            path.write_bytes(model)
            reader = os.open(path, os.O_RDONLY)
            try:
                assert read_all(reader) == model
                terrace("migrate", mnt, "--to", "ssd", timeout=300)
                assert read_all(reader) == model
                with open(path, "r+b") as w:
                    w.seek(MiB)
                    w.write(b"after-migration")
                model[MiB:MiB + 15] = b"after-migration"
                assert read_all(reader) == model, "a cached reader missed a write after migration"
                terrace("migrate", mnt, "--to", "pm", timeout=300)
                assert read_all(reader) == model
                assert other_process_reads(path) == model
            finally:
                os.close(reader)


def test_names_the_kernel_remembers_as_missing_appear_as_soon_as_they_are_made():
    """Lookups of missing names are cached by the kernel (negative entries);
    every way of making the name through the mount replaces them."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt):
            (mnt / "src").write_bytes(b"source")

            def rename_to(p):
                (mnt / "tmp").write_bytes(b"r")
                os.rename(mnt / "tmp", p)

            makers = {
                "created": lambda p: p.write_bytes(b"new"),
                "mkdir": lambda p: p.mkdir(),
                "symlink": lambda p: p.symlink_to("src"),
                "hardlink": lambda p: os.link(mnt / "src", p),
                "renamed": rename_to,
                "mknod": lambda p: os.mkfifo(p),
            }
            for name, make in makers.items():
                p = mnt / name
                for _ in range(3):
                    assert not p.exists() and not os.path.lexists(p)
                make(p)
                assert os.path.lexists(p), f"{name}: still missing after it was made"
                assert name in os.listdir(mnt)
            # Removed again: missing at once, and made again: there at once.
            os.unlink(mnt / "created")
            assert not (mnt / "created").exists()
            (mnt / "created").write_bytes(b"again")
            assert (mnt / "created").read_bytes() == b"again"
            # A symlink's target (now cached by the kernel) reads right.
            assert os.readlink(mnt / "symlink") == "src"
            assert (mnt / "symlink").read_bytes() == b"source"


def test_a_pwrite_and_a_shared_mapping_store_to_one_page_both_land():
    """xfstests generic/346 (holetest -w): one thread stores into every page
    of a fresh sparse file through a shared mapping while another pwrite()s
    into the same pages through the same O_RDWR descriptor. With direct I/O
    for that descriptor the kernel's invalidation after each direct write
    wrote back a page that was re-dirtied with the stale bytes, losing the
    pwrite (5 of 6 runs of this test failed before read-write opens used the
    page cache)."""
    src = Path(__file__).parent / "c" / "mmap_pwrite_race.c"
    with tempfile.TemporaryDirectory() as build:
        exe = Path(build) / "mmap_pwrite_race"
        subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(src)], check=True, timeout=120)
        with temp_pool_path() as pool, temp_mountpoint() as mnt:
            terrace("mkfs", "--tier", f"pm:{pool}:256M")
            with mounted_pool(pool, mnt):
                for run in range(3):
                    cp = subprocess.run([str(exe), str(mnt / "holes"), "4", "100"],
                                        capture_output=True, text=True, timeout=300)
                    assert cp.returncode == 0, f"run {run}: {cp.stdout}{cp.stderr}"


# A child that shares one read-write descriptor between a process toggling
# O_DIRECT on it (fcntl F_SETFL) and two processes writing through it, for
# SECONDS (xfstests generic/036, aio-dio-fcntl-race, with pwrite).
_TOGGLE_RACE = r"""
import mmap, os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
flags = __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL)
end = time.monotonic() + seconds
kids = []
for role in ("toggle", "write", "write"):
    pid = os.fork()
    if pid == 0:
        import fcntl
        page = mmap.mmap(-1, 4096)  # aligned: an O_DIRECT write takes it
        page.write(b"x" * 4096)
        buf = memoryview(page)[:512]
        while time.monotonic() < end:
            if role == "toggle":
                fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            else:
                # Part of a page: a buffered write of it locks the page
                # and may read it first, a wider window (as the test).
                os.pwrite(fd, buf, 512)
        os._exit(0)
    kids.append(pid)
bad = [os.waitpid(p, 0)[1] for p in kids]
sys.exit(1 if any(bad) else 0)
"""


def test_writes_racing_an_o_direct_toggle_on_a_shared_descriptor_never_hang_the_mount():
    """A buffered write holds its page locked until the daemon answers; the
    kernel reads the file's flags for the request later, so O_DIRECT set
    meanwhile by fcntl arrives with it. The daemon answered such a write only
    after dropping the kernel's pages of the range — which waited for the
    very page lock the writer held: the mount hung (generic/036)."""
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        helpers.mkfs(pool, "256M")
        with mounted_pool(pool, mnt) as m:
            try:
                cp = subprocess.run([sys.executable, "-c", _TOGGLE_RACE, str(mnt / "f"), "6"],
                                    capture_output=True, text=True, timeout=30)
            except subprocess.TimeoutExpired:
                m.kill()  # frees the stuck writers (ENOTCONN) so cleanup can unmount
                raise AssertionError("writers racing an O_DIRECT toggle hung the mount")
            assert cp.returncode == 0, cp.stderr
            assert os.stat(mnt / "f").st_size == 1024
