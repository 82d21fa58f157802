"""lseek(SEEK_DATA) and lseek(SEEK_HOLE) through a real mount, compared with
the host's ext4 (/var/tmp): the same writes, truncates and hole punches
give the same answers at every block boundary and inside blocks, on a
PM-only pool and on a tiered one, also after a remount. Stores through a
shared mapping that the kernel has not written back yet count as data (the
kernel asks the daemon without writing them back first). `cp` of a large
sparse file reads only its data from the daemon.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import mounted_pool, temp_mountpoint, temp_pool_path, temp_ssd_image, terrace

BS = 4096
MiB = 1 << 20
PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def punch(fd: int, off: int, length: int) -> None:
    if _libc.fallocate(fd, PUNCH, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def seek(fd: int, off: int, whence: int):
    """lseek's answer, or the errno name."""
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return errno.errorcode[e.errno]


def answers(fd: int, size: int, rng: random.Random) -> dict:
    """SEEK_DATA and SEEK_HOLE at every block boundary up to past the end,
    and at random offsets inside blocks."""
    offs = list(range(0, size + 2 * BS, BS)) + [rng.randrange(size + 2 * BS) for _ in range(40)]
    return {(off, w): seek(fd, off, w) for off in offs for w in (os.SEEK_DATA, os.SEEK_HOLE)}


def random_ops(seed: int, n: int) -> list:
    rng = random.Random(seed)
    ops = []
    for _ in range(n):
        k = rng.randrange(10)
        off = rng.randrange(2 * MiB)
        if k < 6:
            ops.append(("write", off, rng.randrange(1, 5 * BS)))
        elif k < 8:
            ops.append(("punch", off, rng.randrange(1, 24 * BS)))
        else:
            ops.append(("truncate", rng.randrange(2 * MiB + 64 * BS), 0))
    return ops


def apply(fd: int, op) -> None:
    kind, off, n = op
    if kind == "write":
        os.pwrite(fd, bytes([1 + off % 250]) * n, off)
    elif kind == "punch":
        punch(fd, off, n)
    else:
        os.ftruncate(fd, off)


@pytest.fixture(scope="module")
def reference_dir():
    """A directory on the native file system (ext4), removed afterwards."""
    d = tempfile.mkdtemp(prefix="terrace-seek-ref-", dir="/var/tmp")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def compare_with_ext4(mnt: Path, ref: Path, seed: int, remount=None) -> None:
    """The same random operations on a file of each; lseek must answer alike
    after every few steps (and after `remount()`, when given)."""
    ops = random_ops(seed, 60)
    paths = (mnt / f"sparse{seed}", ref / f"sparse{seed}")
    fds = [os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) for p in paths]
    try:
        for step, op in enumerate(ops):
            for fd in fds:
                apply(fd, op)
            if step % 6 == 5 or step == len(ops) - 1:
                size = os.fstat(fds[1]).st_size
                assert os.fstat(fds[0]).st_size == size
                got, want = (answers(fd, size, random.Random(step)) for fd in fds)
                diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
                assert not diff, f"seed {seed} step {step} {op}: (terrace, ext4) differ at {sorted(diff.items())[:8]}"
    finally:
        for fd in fds:
            os.close(fd)
    if remount is not None:
        remount()
        fds = [os.open(p, os.O_RDONLY) for p in paths]
        try:
            size = os.fstat(fds[1]).st_size
            got, want = (answers(fd, size, random.Random(seed)) for fd in fds)
            assert got == want, f"seed {seed}: answers changed across the remount"
        finally:
            for fd in fds:
                os.close(fd)


def test_seek_data_and_hole_answer_as_ext4_does_on_a_pm_only_pool_and_after_remount(reference_dir):
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:128M")
        with contextlib.ExitStack() as stack:
            stack.enter_context(mounted_pool(pool, mnt))

            def remount():
                stack.close()
                stack.enter_context(mounted_pool(pool, mnt))

            for seed in range(3):
                compare_with_ext4(mnt, reference_dir, seed)
            compare_with_ext4(mnt, reference_dir, 3, remount)


def test_seek_data_and_hole_answer_as_ext4_does_on_a_tiered_pool_after_migration(reference_dir):
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M", "--tier", f"ssd:{ssd}:256M")
        with mounted_pool(pool, mnt) as m:
            compare_with_ext4(mnt, reference_dir, 10)
            terrace("migrate", str(mnt))
            # The data is on the SSD now; the same answers there.
            paths = (mnt / "sparse10", reference_dir / "sparse10")
            fds = [os.open(p, os.O_RDONLY) for p in paths]
            try:
                size = os.fstat(fds[1]).st_size
                got, want = (answers(fd, size, random.Random(1)) for fd in fds)
                assert got == want, "answers changed when the data moved to the SSD"
            finally:
                for fd in fds:
                    os.close(fd)
            assert m.status()["tiers"][1]["used"] > 0, "nothing moved to the SSD"


def test_stores_through_a_mapping_not_yet_written_back_are_data():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with mounted_pool(pool, mnt):
            fd = os.open(mnt / "mapped", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, MiB)
                with mmap.mmap(fd, MiB) as mm:
                    mm[512 * 1024:512 * 1024 + 5] = b"hello"
                    # No msync: the page is dirty in the kernel only.
                    assert seek(fd, 0, os.SEEK_DATA) == 512 * 1024
                    assert seek(fd, 512 * 1024, os.SEEK_HOLE) == 512 * 1024 + BS
                    # A copy made meanwhile (cp skips what lseek calls holes).
                    out = Path(tempfile.mkdtemp(dir="/var/tmp")) / "copy"
                    try:
                        subprocess.run(["cp", "--sparse=always", str(mnt / "mapped"), str(out)], check=True)
                        with open(out, "rb") as f:
                            f.seek(512 * 1024)
                            assert f.read(5) == b"hello", "cp lost a store not yet written back"
                    finally:
                        shutil.rmtree(out.parent, ignore_errors=True)
            finally:
                os.close(fd)


def test_cp_of_a_large_sparse_file_reads_only_its_data():
    with temp_pool_path() as pool, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:64M")
        with contextlib.ExitStack() as stack:
            stack.enter_context(mounted_pool(pool, mnt))
            size = 64 << 30
            pieces = {k * (size // 8): os.urandom(65536) for k in range(8)}
            fd = os.open(mnt / "disk.img", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, size)
                for off, data in pieces.items():
                    os.pwrite(fd, data, off)
            finally:
                os.close(fd)
            # A fresh mount: nothing of the file in the kernel's page cache.
            stack.close()
            m = stack.enter_context(mounted_pool(pool, mnt))
            before = m.status()["bytes_read"]
            out = Path(tempfile.mkdtemp(dir="/var/tmp")) / "disk.img"
            try:
                subprocess.run(["cp", str(mnt / "disk.img"), str(out)], check=True, timeout=120)
                read = m.status()["bytes_read"] - before
                # 512 KiB of data; without SEEK_DATA cp reads all 64 GiB.
                assert read < 8 * MiB, f"cp read {read} bytes of a file holding 512 KiB"
                assert out.stat().st_size == size
                with open(out, "rb") as f:
                    for off, data in pieces.items():
                        f.seek(off)
                        assert f.read(len(data)) == data
            finally:
                shutil.rmtree(out.parent, ignore_errors=True)
