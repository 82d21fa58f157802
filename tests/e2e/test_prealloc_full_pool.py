"""Writes into space that fallocate preallocated succeed when the pool is
full, through a real mount: POSIX promises that after posix_fallocate
succeeded, writes into the range do not fail for lack of space, and
databases rely on it for their WAL (xfstests generic/274 checks it). The
same sequence runs on ext4 on a loop device, which writes such data in place:
both must accept every write and end with the same file. On Terrace (a
tiered pool: data is copy-on-write, so a full pool writes into the
preallocated blocks themselves, design.md §5i) the data also survives
kill -9, and fsck is clean.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import helpers
from helpers import mounted_pool, temp_mountpoint, temp_pool_path, temp_ssd_image, terrace

CHUNK = 64 << 10
PREALLOC = 4 << 20


def chunk_data(seed: int) -> bytes:
    return helpers.pattern(CHUNK, seed)


def fill(root: Path) -> int:
    """Fills the file system with 1 MiB, then 4 KiB writes until ENOSPC;
    returns the bytes written."""
    total = 0
    for name, size in (("fill-big", 1 << 20), ("fill-small", 4096)):
        fd = os.open(root / name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            block = b"\xa5" * size
            while True:
                try:
                    os.write(fd, block)
                    total += size
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
            with contextlib.suppress(OSError):
                os.fsync(fd)
        finally:
            os.close(fd)
    return total


def preallocate_fill_and_write(root: Path) -> str:
    """A 64 KiB file with 4 MiB preallocated after it; the file system is
    filled; then every 64 KiB chunk of the preallocated range is written,
    odd chunks first (generic/274's order). Returns the file's sha256."""
    path = root / "db.wal"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, chunk_data(0), 0)
        os.posix_fallocate(fd, CHUNK, PREALLOC)
        os.fsync(fd)
        assert fill(root) > 0
        for first in (1, 0):
            for k in range(first, PREALLOC // CHUNK, 2):
                os.pwrite(fd, chunk_data(k + 1), CHUNK + k * CHUNK)
        os.fsync(fd)
    finally:
        os.close(fd)
    return helpers.sha256_file(path)


def expected_sha() -> str:
    h = hashlib.sha256(chunk_data(0))
    for k in range(PREALLOC // CHUNK):
        h.update(chunk_data(k + 1))
    return h.hexdigest()


@contextlib.contextmanager
def ext4_on_loop(size_mb: int):
    """A fresh ext4 of `size_mb` MiB on a loop device, mounted; removed after."""
    parent = "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()
    base = Path(tempfile.mkdtemp(prefix=helpers.unique_name("prealloc-ext4") + "-", dir=parent))
    img, mnt = base / "ext4.img", base / "mnt"
    mnt.mkdir()
    try:
        with open(img, "wb") as f:
            f.truncate(size_mb << 20)
        helpers.run(["mkfs.ext4", "-q", "-F", str(img)])
        helpers.run(["mount", "-o", "loop", str(img), str(mnt)])
        try:
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)], check=False)
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_writes_into_preallocated_space_of_a_full_pool_succeed_as_on_ext4():
    with ext4_on_loop(64) as ext4:
        assert preallocate_fill_and_write(ext4) == expected_sha()
    with temp_pool_path() as pool, temp_ssd_image() as ssd, temp_mountpoint() as mnt:
        terrace("mkfs", "--tier", f"pm:{pool}:32M", "--tier", f"ssd:{ssd}:64M")
        with mounted_pool(pool, mnt) as m:
            assert preallocate_fill_and_write(mnt) == expected_sha()
            st = m.status()
            assert st["prealloc_in_place_writes"] > 0, "the full pool wrote in place"
            assert st["checksum_errors"] == 0
            shown = terrace("status", mnt).stdout
            assert "into their preallocated blocks" in shown, shown
            # A crash now keeps every write (each was durable when fsync
            # returned; these went in place, durable at once).
            m.kill()
            helpers.lazy_unmount(mnt)
        helpers.assert_fsck_clean(pool, "after kill -9")
        with mounted_pool(pool, mnt):
            assert helpers.sha256_file(mnt / "db.wal") == expected_sha()
        helpers.assert_fsck_clean(pool, "after a clean unmount")
